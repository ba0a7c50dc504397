"""Bounded-table options: checked like every other field, carried to the PS and back."""
from __future__ import annotations

import pytest
import torch

from pswire.tables import TableSpec
from ps.server import status_view
from rpckit.errors import ServiceError
from worker_sdk.ps.client import ElasticEmbedding
from worker_sdk.ps.data_client import DataClient


@pytest.mark.parametrize("field,value", [
    ("max_rows", -1), ("admit_after", 0), ("admit_after", 70_000), ("ttl_s", -1.0),
    ("ttl_s", float("nan")), ("ttl_steps", -5), ("evict", "fifo"), ("max_rows", 1.5),
])
def test_bad_values_are_invalid_argument_naming_the_field(field, value):
    with pytest.raises(ServiceError) as err:
        TableSpec("t", 4, **{field: value}).check()
    assert err.value.code == "INVALID_ARGUMENT" and field in str(err.value)
    with pytest.raises(ServiceError):
        ElasticEmbedding(dim=4, table="t", **{field: value})


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
