"""Bounded-table options: checked like every other field, carried to the PS and back."""
from __future__ import annotations

import pytest
import torch

from protos import ps_pb2
from pswire.tables import TableSpec, spec_from_pb, spec_to_pb
from ps.server import status_view
from rpckit.errors import ServiceError
from worker_sdk.ps.client import ElasticEmbedding
from worker_sdk.ps.data_client import DataClient


BAD = [  # (field, value, expressible on the wire)
    ("name", "", True), ("name", "x" * 300, True), ("dim", 0, True), ("dim", 70_000, True),
    ("dim", 2.5, False), ("initializer", "gauss", True), ("init_a", float("nan"), True),
    ("init_b", float("inf"), True), ("init_b", -1.0, True), ("seed", 2**64, False),
    ("num_embeddings", -1, True), ("num_embeddings", 2**60, True), ("max_rows", -1, True),
    ("max_rows", 1.5, False), ("admit_after", 0, True), ("admit_after", 70_000, True),
    ("ttl_s", -1.0, True), ("ttl_s", float("nan"), True), ("ttl_steps", -5, True),
    ("evict", "fifo", True),
]
SDK_ARG = {"name": "table"}  # ElasticEmbedding's name for the field


@pytest.mark.parametrize("field,value,_", BAD)
def test_the_sdk_refuses_each_bad_argument_with_a_value_error_naming_it(field, value, _):
    args = {"dim": 4, "table": "t"}
    args[SDK_ARG.get(field, field)] = value
    with pytest.raises(ValueError) as err:
        ElasticEmbedding(**args)
    assert not isinstance(err.value, ServiceError)
    assert err.value.field == SDK_ARG.get(field, field)
    assert SDK_ARG.get(field, field) in str(err.value)


@pytest.mark.parametrize("field,value,_", BAD)
def test_the_ps_check_is_the_same_check(field, value, _):
    spec = TableSpec(**{"name": "t", "dim": 4, field: value})
    with pytest.raises(ServiceError) as err:
        spec.check()
    assert err.value.code == "INVALID_ARGUMENT" and err.value.reason == "INVALID_ARGUMENT"
    assert str(spec.problem()) == err.value.message and spec.problem().field == field
    assert field in err.value.message


def test_the_ps_refuses_each_bad_field_on_the_wire_and_changes_nothing(inproc_ps):
    ps = inproc_ps()
    with DataClient([ps.endpoint], timeout_s=5.0) as c:
        for field, value, wire in BAD:
            if not wire:
                continue
            msg = spec_to_pb(TableSpec("t", 4))
            setattr(msg, field, value)
            with pytest.raises(ServiceError) as err:
                c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[msg])
            assert (err.value.code, err.value.reason) == ("INVALID_ARGUMENT", "INVALID_ARGUMENT")
            assert field in err.value.message, (field, err.value.message)
        assert not ps.store.initialized
        unset = spec_to_pb(TableSpec("t", 4))
        unset.ClearField("admit_after")  # a client that leaves it unset: a row at the first
        assert c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[unset])
    assert ps.store.tables["t"].spec.admit_after == 1


def test_a_spec_survives_the_wire_unchanged():
    spec = TableSpec("t", 8, initializer="uniform", init_a=-1.0, init_b=2.0, seed=-3,
                     num_embeddings=99, max_rows=10, admit_after=4, ttl_s=1.5, ttl_steps=7,
                     evict="lfu")
    assert spec_from_pb(ps_pb2.TableSpec.FromString(spec_to_pb(spec).SerializeToString())) \
        == spec


def test_defaults_are_unbounded():
    spec = TableSpec("t", 4)
    assert (spec.max_rows, spec.admit_after, spec.ttl_s, spec.ttl_steps, spec.evict) == \
        (0, 1, 0.0, 0, "lru")


def test_options_reach_the_ps_and_its_status(inproc_ps):
    ps = inproc_ps()
    spec = TableSpec("emb", 4, max_rows=10, admit_after=2, ttl_s=30.0, ttl_steps=100,
                     evict="lfu")
    with DataClient([ps.endpoint], timeout_s=5.0) as c:
        c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[spec])
        assert ps.store.tables["emb"].spec == spec
        with pytest.raises(Exception) as err:  # refused by the PS, naming the field
            c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[
                {"name": "x", "dim": 4, "evict": "random"}])
        assert "evict" in str(err.value)
    ps.store.pull_rows("emb", torch.arange(5))
    ps.store.pull_rows("emb", torch.arange(3))
    status = status_view(ps.store, None, _Me())
    (table,) = status.tables
    assert table.spec.max_rows == 10 and table.spec.evict == "lfu"
    assert table.spec.admit_after == 2 and table.spec.ttl_steps == 100
    assert table.rows == 3 and table.admitted == 3 and table.filtered == 5
    assert table.bytes > 0 and dict(table.evicted) == {"ttl": 0, "cap": 0}


class _Me:
    index, num_ps, address, data_address, started_ms, data_public_key = 0, 1, "", "", 0, ""
