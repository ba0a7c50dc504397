"""The store's rules without any network: init, push, staleness, at-most-once, snapshots."""
from __future__ import annotations

import threading

import pytest
import torch

from ps.store.applied import AppliedTable, Duplicate
from pswire.tables import TableSpec
from rpckit.errors import ServiceError as PSError
from pswire.optimizers import make_config
from ps.store.params import ParamStore

SGD1 = make_config("sgd", lr=1.0)


def _store(**kw) -> ParamStore:
    s = ParamStore(**kw)
    s.init_parameters([("w", torch.zeros(4)), ("b", torch.zeros(2))], SGD1)
    return s


def _code(fn, *args) -> str:
    with pytest.raises(PSError) as err:
        fn(*args)
    return err.value.code


def test_first_init_wins_and_the_same_model_again_answers_versions():
    s = _store()
    s.push("c", 1, [("w", torch.ones(4))], [0])
    initialized, versions, message, changed = s.init_parameters(
        [("w", torch.full((4,), 9.0)), ("b", torch.zeros(2))], SGD1)
    assert not initialized and not changed
    assert versions == {"w": 1, "b": 0}
    assert "already initialized" in message
    assert s.dense["w"].value.tolist() == [-1.0] * 4


@pytest.mark.parametrize("tensors, optimizer, tables, named", [
    ([("w", torch.zeros(4))], SGD1, [], "'b'"),                                   # one missing
    ([("w", torch.zeros(5)), ("b", torch.zeros(2))], SGD1, [], "float32[5]"),     # a shape
    ([("w", torch.zeros(4, dtype=torch.float64)), ("b", torch.zeros(2))], SGD1, [], "float64"),
    ([("w", torch.zeros(4)), ("b", torch.zeros(2)), ("x", torch.zeros(1))], SGD1, [], "'x'"),
    ([("w", torch.zeros(4)), ("b", torch.zeros(2))], make_config("adam", lr=0.1), [], "adam"),
    ([("w", torch.zeros(4)), ("b", torch.zeros(2))], SGD1, [(TableSpec("e", 4), None)], "'e'"),
])
def test_another_model_or_optimizer_is_refused_naming_the_difference(tensors, optimizer,
                                                                      tables, named):
    s = _store()
    with pytest.raises(PSError) as err:
        s.init_parameters(tensors, optimizer, tables)
    assert err.value.code == "FAILED_PRECONDITION" and err.value.reason == "MODEL_MISMATCH"
    assert named in err.value.message
    assert s.optimizer_cfg["name"] == "sgd" and sorted(s.dense) == ["b", "w"] and not s.tables


def test_requests_before_init_are_refused():
    s = ParamStore()
    assert _code(s.pull, ["w"]) == "FAILED_PRECONDITION"
    assert _code(s.push, "c", 1, [("w", torch.ones(4))], [0]) == "FAILED_PRECONDITION"
    assert _code(s.pull_rows, "emb", torch.tensor([1])) == "FAILED_PRECONDITION"


def test_bad_pushes_change_nothing():
    s = _store()
    assert _code(s.push, "c", 1, [("nope", torch.ones(4))], [0]) == "NOT_FOUND"
    assert _code(s.push, "c", 2, [("w", torch.ones(5))], [0]) == "INVALID_ARGUMENT"
    assert _code(s.push, "c", 3, [("w", torch.ones(4, dtype=torch.float64))], [0]) \
        == "INVALID_ARGUMENT"
    assert _code(s.push, "c", 4, [("w", torch.ones(4))], []) == "INVALID_ARGUMENT"
    # a valid tensor next to a bad one is not applied either
    assert _code(s.push, "c", 5, [("w", torch.ones(4)), ("b", torch.ones(3))], [0, 0]) \
        == "INVALID_ARGUMENT"
    assert _code(s.pull, ["w", "zz"]) == "NOT_FOUND"
    assert s.versions() == {"w": 0, "b": 0}
    assert s.dense["w"].value.tolist() == [0.0] * 4


def test_bad_inits_refused():
    s = ParamStore()
    assert _code(s.init_parameters, [("w", torch.ones(2, dtype=torch.int64))], SGD1) \
        == "INVALID_ARGUMENT"
    assert _code(s.init_parameters, [("w", torch.ones(2)), ("w", torch.ones(2))], SGD1) \
        == "INVALID_ARGUMENT"
    assert _code(s.init_parameters, [], {"name": "sgd", "lr": -1.0}) == "INVALID_ARGUMENT"
    assert _code(s.init_parameters, [], make_config("adam"), [(TableSpec("e", 4), None)]) \
        == "INVALID_ARGUMENT"  # adam has no row-wise form: the table must name one
    assert _code(s.init_parameters, [], SGD1, [(TableSpec("e", 0), None)]) == "INVALID_ARGUMENT"
    assert not s.initialized


def test_staleness_recorded_and_refused_beyond_the_limit():
    s = _store(max_staleness=1)
    s.push("a", 1, [("w", torch.ones(4))], [0])          # staleness 0
    s.push("b", 1, [("w", torch.ones(4))], [0])          # staleness 1: allowed
    answer = s.push("c", 1, [("w", torch.ones(4)), ("b", torch.ones(2))], [0, 0])
    assert answer["code"] == "FAILED_PRECONDITION" and "2 versions stale" in answer["message"]
    assert answer["versions"] == {"w": 2, "b": 0}
    assert s.dense["b"].value.tolist() == [0.0, 0.0]    # refused whole: b untouched too
    assert s.stats.refused_stale == 1
    assert s.stats.staleness == {0: 1, 1: 1}
    # the same (client, seq) retried gets the same refusal; a fresh pull-and-push goes in
    assert s.push("c", 1, [("w", torch.ones(4))], [0])["code"] == "FAILED_PRECONDITION"
    assert s.push("c", 2, [("w", torch.ones(4))], [2])["code"] == "OK"


def test_unlimited_staleness_still_recorded():
    s = _store()
    for i in range(3):
        s.push(f"c{i}", 1, [("w", torch.ones(4))], [0])
    assert s.stats.staleness == {0: 1, 1: 1, 2: 1}
    assert s.stats.max_staleness_seen == 2


def test_a_retried_push_is_applied_once():
    s = _store()
    first = s.push("c", 7, [("w", torch.ones(4))], [0])
    again = s.push("c", 7, [("w", torch.ones(4))], [0])
    assert not first["duplicate"] and again["duplicate"]
    assert again["versions"] == first["versions"] == {"w": 1}
    older = s.push("c", 3, [("w", torch.ones(4))], [0])
    assert older["duplicate"] and "superseded" in older["message"]
    assert s.dense["w"].value.tolist() == [-1.0] * 4
    assert s.applied.duplicates == 2
    s.push("c", 8, [("w", torch.ones(4))], [1])
    assert s.dense["w"].version == 2


def test_a_retry_arriving_during_the_first_try_waits_for_it():
    table = AppliedTable()
    entry = table.begin("c", 1)
    got = []

    def retry():
        try:
            table.begin("c", 1)
        except Duplicate as dup:
            got.append(dup.answer)

    t = threading.Thread(target=retry)
    t.start()
    t.join(0.1)
    assert t.is_alive()  # waiting for the first try
    table.finish(entry, {"code": "OK", "message": "", "n": 1})
    t.join(5)
    assert got == [{"code": "OK", "message": "", "n": 1}]


def test_applied_table_is_bounded_and_exports():
    table = AppliedTable(capacity=2)
    for cid in "abc":
        table.finish(table.begin(cid, 1), {"code": "OK", "message": ""})
    assert len(table) == 2
    assert table.begin("a", 1) is not None  # "a" was forgotten first
    restored = AppliedTable()
    restored.restore(table.export())
    with pytest.raises(Duplicate):
        restored.begin("c", 1)


def test_a_pull_in_flight_is_never_changed_under_it():
    s = _store()

    class Tracker:
        done = False

    tracker = Tracker()
    sent = []

    def export(t):
        view = t.view(-1)  # the live memory, as the zero-copy data plane hands it to ZeroMQ
        sent.append(view)
        return view, tracker

    s.pull(["w"], export)
    s.push("c", 1, [("w", torch.ones(4))], [0])
    assert sent[0].tolist() == [0.0] * 4          # the bytes being sent did not change
    assert s.dense["w"].value.tolist() == [-1.0] * 4
    assert s.stats.copies_on_write == 1
    tracker.done = True
    s.pull(["w"], export)
    s.push("c", 2, [("w", torch.ones(4))], [1])   # nothing pinned now: updated in place
    assert sent[1].tolist() == [-2.0] * 4 and s.stats.copies_on_write == 1


def test_a_push_waits_briefly_for_a_send_about_to_finish():
    s = ParamStore()
    s.init_parameters([("w", torch.zeros(1 << 20))], SGD1)  # 4 MB: a ~2 ms wait budget

    class Tracker:
        done = False

        def wait(self, timeout):
            self.done = True  # the send finishes while the push waits

    sent = []

    def export(t):
        view = t.view(-1)
        sent.append(view)
        return view, Tracker()

    s.pull(["w"], export)
    s.push("c", 1, [("w", torch.ones(1 << 20))], [0])
    assert s.stats.copies_on_write == 0 and s.stats.waited_for_send == 1
    assert sent[0][0].item() == -1.0  # updated in place: the send had finished


def test_snapshot_restore_continues_identically():
    cfg = make_config("adam", lr=0.05)
    a = ParamStore(index=1, num_ps=2)
    a.init_parameters([("w", torch.arange(6.0))], cfg, [(TableSpec("e", 3, seed=5),
                                                         {"name": "adagrad", "lr": 0.1})])
    a.push("c", 1, [("w", torch.ones(6))], [0])
    a.push_rows("c", 2, "e", torch.tensor([1, 3, 3]), torch.ones(3, 3))
    b = ParamStore(index=1, num_ps=2)
    b.restore(a.snapshot())
    assert b.versions() == a.versions() and b.initialized
    for s in (a, b):
        s.push("d", 1, [("w", torch.full((6,), 0.5))], [1])
        s.push_rows("d", 2, "e", torch.tensor([3, 5]), torch.ones(2, 3))
    assert torch.equal(a.dense["w"].value, b.dense["w"].value)
    ids = torch.tensor([1, 3, 5, 7])
    assert torch.equal(a.pull_rows("e", ids)[0], b.pull_rows("e", ids)[0])
    assert b.push("c", 2, [("w", torch.ones(6))], [0])["duplicate"]  # the table came along


def test_restore_refuses_another_ps():
    a = ParamStore(index=0, num_ps=2)
    with pytest.raises(ValueError, match="PS 0 of 2"):
        ParamStore(index=1, num_ps=2).restore(a.snapshot())


def test_after_stop_mutations_are_refused_but_pulls_answered():
    s = _store()
    s.stop_mutations()
    assert _code(s.push, "c", 1, [("w", torch.ones(4))], [0]) == "UNAVAILABLE"
    assert s.pull(["w"])[0][2] == 0


def test_snapshot_sees_no_half_applied_push():
    s = ParamStore()
    names = [f"t{i}" for i in range(8)]
    s.init_parameters([(n, torch.zeros(1000)) for n in names], SGD1)
    stop = threading.Event()

    def pusher():
        seq = 0
        while not stop.is_set() and seq < 5000:
            seq += 1
            s.push("p", seq, [(n, torch.full((1000,), -1.0)) for n in names], [0] * 8)

    t = threading.Thread(target=pusher)
    t.start()
    try:
        for _ in range(20):
            snap = s.snapshot()
            values = {row["value"][0].item() for row in snap["dense"]}
            versions = {row["version"] for row in snap["dense"]}
            assert len(values) == 1 and len(versions) == 1  # every push in, or out, whole
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_are_refused_and_change_nothing(bad):
    s = _store()
    g = torch.ones(4)
    g[2] = bad
    assert _code(s.push, "c", 1, [("w", g)], [0]) == "INVALID_ARGUMENT"
    assert s.versions() == {"w": 0, "b": 0} and s.dense["w"].value.tolist() == [0.0] * 4
    s.init_parameters([("w", torch.zeros(4)), ("b", torch.zeros(2))], SGD1)
    fresh = ParamStore()
    assert _code(fresh.init_parameters, [("w", g)], SGD1) == "INVALID_ARGUMENT"
    assert not fresh.initialized
    # a large but finite gradient whose sum overflows is still accepted
    big = torch.full((4,), 3e38)
    assert s.push("c", 2, [("w", big)], [0])["code"] == "OK"
