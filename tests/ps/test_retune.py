"""A table's bounds (max_rows, ttl_s, ttl_steps, evict) change on a running job: a later
InitParameters declaring new ones is adopted, filed before the answer, kept by a restart;
any other field still refuses, naming the fields that differ."""
from __future__ import annotations

import pytest
import torch

from ps.checkpoint import CheckpointDir, Checkpointer
from ps.store.params import ParamStore
from ps.store.tables.eviction import Cause
from pswire.optimizers import make_config
from pswire.tables import TableSpec
from rpckit.errors import ServiceError
from worker_sdk.ps.data_client import DataClient

SGD = make_config("sgd", lr=0.1)


def _init(store: ParamStore, **kw):
    return store.init_parameters([("w", torch.zeros(3))], SGD,
                                 [(TableSpec("emb", 4, seed=1, **kw), None)])


def test_a_new_cap_is_adopted_at_once_and_named():
    store = ParamStore()
    _init(store, max_rows=1000)
    store.pull_rows("emb", torch.arange(1000))
    initialized, _, message, changed = _init(store, max_rows=400, evict="lfu")
    table = store.tables["emb"]
    assert not initialized and changed
    assert "max_rows 1000 -> 400" in message and "evict 'lru' -> 'lfu'" in message
    assert table.spec.max_rows == 400 and table.row_cap == 400 and table.spec.evict == "lfu"
    assert len(table) == 400 and table.evicted[Cause.CAP] == 600  # past the new cap: now
    _, _, message, changed = _init(store, max_rows=400, evict="lfu")  # the same again
    assert not changed and message == "already initialized with this model"
    _init(store, max_rows=2000)  # and up again: room for more rows
    store.pull_rows("emb", torch.arange(5000, 6500))
    assert len(table) == 1900


@pytest.mark.parametrize("kw, named", [
    (dict(dim=8), "dim 4 -> 8"),
    (dict(seed=2, max_rows=50), "seed 1 -> 2"),
    (dict(admit_after=3, initializer="zeros"),
     "initializer 'normal' -> 'zeros', admit_after 1 -> 3"),
])
def test_any_other_field_refuses_naming_the_fields_and_changes_nothing(kw, named):
    store = ParamStore()
    _init(store, max_rows=100)
    spec = TableSpec("emb", kw.pop("dim", 4), seed=kw.pop("seed", 1), **{"max_rows": 100, **kw})
    with pytest.raises(ServiceError) as err:
        store.init_parameters([("w", torch.zeros(3))], SGD, [(spec, None)])
    assert (err.value.code, err.value.reason) == ("FAILED_PRECONDITION", "MODEL_MISMATCH")
    assert named in err.value.message and "TableSpec(" not in err.value.message
    assert "max_rows, ttl_s, ttl_steps, evict may change" in err.value.message
    assert store.tables["emb"].spec == TableSpec("emb", 4, seed=1, max_rows=100)


def test_an_optimizer_difference_names_its_fields():
    store = ParamStore()
    _init(store)
    with pytest.raises(ServiceError) as err:
        store.init_parameters([("w", torch.zeros(3))], make_config("sgd", lr=0.5),
                              [(TableSpec("emb", 4, seed=1), None)])
    assert "lr 0.1 -> 0.5" in err.value.message


def test_new_bounds_are_filed_before_the_answer_and_a_restart_keeps_them(tmp_path):
    store = ParamStore()
    _init(store, max_rows=1000)
    cp = Checkpointer(store, CheckpointDir(tmp_path, 0, 1))
    store.pull_rows("emb", torch.arange(800))
    cp.write()
    written = cp.written
    _init(store, max_rows=500, ttl_steps=9)
    assert cp.written == written + 1 and cp.last.delta  # filed, as a delta on the full one
    restored = ParamStore()
    Checkpointer(restored, CheckpointDir(tmp_path, 0, 1)).restore()
    table = restored.tables["emb"]
    assert (table.spec.max_rows, table.spec.ttl_steps, table.row_cap) == (500, 9, 500)
    assert sorted(table.rows()) == sorted(store.tables["emb"].rows())
    # a full file holds them too
    _init(store, max_rows=300)
    cp.write()
    again = ParamStore()
    Checkpointer(again, CheckpointDir(tmp_path, 0, 1)).restore()
    assert again.tables["emb"].spec.max_rows == 300 and len(again.tables["emb"]) <= 300


def test_a_failed_filing_is_an_error_and_the_next_call_files_it(tmp_path):
    store = ParamStore()
    _init(store, max_rows=1000)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    cp = Checkpointer(store, CheckpointDir(blocked / "ckpt", 0, 1))
    with pytest.raises(ServiceError) as err:
        _init(store, max_rows=500)
    assert err.value.code == "UNAVAILABLE" and "retry" in err.value.message
    cp.dir.directory = tmp_path / "ckpt"  # the disk is back
    _, _, message, changed = _init(store, max_rows=500)  # nothing new to adopt: filed now
    assert changed and cp.written == 1 and message == "already initialized with this model"
    _, _, _, changed = _init(store, max_rows=500)
    assert not changed and cp.written == 1


def test_a_table_gaining_ttl_s_keeps_its_rows_until_they_go_quiet():
    now = [1000.0]
    store = ParamStore()
    _init(store)
    table = store.tables["emb"]
    table.clock = lambda: now[0]
    store.pull_rows("emb", torch.arange(10))
    now[0] += 3600  # created an hour ago, their touch times not kept (no ttl_s then)
    _init(store, ttl_s=60.0)
    table.expire()
    assert len(table) == 10
    now[0] += 61
    table.expire()
    assert len(table) == 0


def test_over_the_wire_the_answer_says_the_tables_changed(inproc_ps):
    ps = inproc_ps()
    with DataClient([ps.endpoint], timeout_s=5.0) as c:
        spec = TableSpec("emb", 4, max_rows=100)
        assert c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[spec])
        assert not c.init_parameters({"w": torch.zeros(2)}, "sgd",
                                     tables=[TableSpec("emb", 4, max_rows=200, ttl_steps=5)])
        with pytest.raises(ServiceError) as err:
            c.init_parameters({"w": torch.zeros(2)}, "sgd", tables=[TableSpec("emb", 8)])
        assert err.value.reason == "MODEL_MISMATCH" and "dim 4 -> 8" in err.value.message
    assert ps.store.tables["emb"].spec == TableSpec("emb", 4, max_rows=200, ttl_steps=5)
    assert ps.store.tables["emb"].row_cap == 200


@pytest.mark.slow
def test_a_backup_adopts_the_new_bounds_with_its_primary(launcher):
    from tests.ps.test_replicas import _table_facts, ps_status, start_pair, wait_until

    master, primary, backup = start_pair(launcher)
    with DataClient(master=master.address, timeout_s=5, max_attempts=20) as client:
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0,
                               tables=[TableSpec("t", 2, max_rows=8)])
        client.pull_rows("t", torch.arange(8))
        client.init_parameters({"w": torch.zeros(1)}, "sgd", lr=1.0,
                               tables=[TableSpec("t", 2, max_rows=3, evict="lfu")])
        wait_until("the backup adopted the bounds",
                   lambda: ps_status(backup).tables[0].spec.max_rows == 3, timeout=10)
        wait_until("the backup caught up",
                   lambda: _table_facts(backup) == _table_facts(primary), timeout=10)
    for proc in (primary, backup):
        table = ps_status(proc).tables[0]
        assert (table.spec.max_rows, table.spec.evict, table.rows) == (3, "lfu", 3)
