"""The shard state machine and worker registry, on a fake clock and an in-memory store."""
from __future__ import annotations

import pytest

from master.calls import Report
from rpckit.errors import ServiceError
from master.datasets.spec import DatasetSpec
from tests.master.harness import Harness, assert_exactly_once


@pytest.fixture
def h():
    return Harness()


def codes(fn):
    with pytest.raises(ServiceError) as info:
        fn()
    return info.value.code, info.value.message


# ---- datasets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("name", "", "empty"),
        ("name", "x" * 129, "limit"),
        ("name", "bad name!", "characters"),
        ("num_records", 0, "num_records must be > 0"),
        ("num_records", -5, "num_records must be > 0"),
        ("shard_size", 0, "shard_size must be > 0"),
        ("num_epochs", 0, "num_epochs must be > 0"),
        ("lease_timeout_s", -1.0, "lease_timeout_s"),
    ],
)
def test_bad_spec_is_refused_and_changes_nothing(h, field, value, words):
    kw = dict(name="d", num_records=10, shard_size=2, num_epochs=1)
    kw[field] = value
    code, message = codes(lambda: h.core.create_dataset(DatasetSpec(**kw)))
    assert code == "INVALID_ARGUMENT"
    assert words in message
    assert not h.core.datasets and not h.core.journal.pending()


def test_same_spec_again_is_a_noop_and_a_different_one_already_exists(h):
    h.dataset(num_records=100, shard_size=10)
    events_before = h.core.journal.next_event_seq
    assert h.core.create_dataset(DatasetSpec("d", 100, 10)) == DatasetSpec("d", 100, 10)
    assert not h.core.journal.pending() and h.core.journal.next_event_seq == events_before
    code, message = codes(lambda: h.core.create_dataset(DatasetSpec("d", 100, 20)))
    assert code == "ALREADY_EXISTS"
    assert "shard_size=10 (asked: 20)" in message
    assert h.core.datasets["d"].spec.shard_size == 10


def test_shards_are_index_ranges_with_a_remainder(h):
    h.dataset(num_records=25, shard_size=10)
    w = h.worker()
    grant = h.get(w, n=10)
    got = sorted((x.index, x.start, x.end) for x in grant.leases)
    assert got == [(0, 0, 10), (1, 10, 20), (2, 20, 25)]


def test_shuffled_order_is_deterministic_per_seed_and_epoch(h):
    spec = h.dataset(num_records=200, shard_size=10, num_epochs=2, shuffle=True, seed=5)
    w = h.worker()
    first = [x.index for x in h.get(w, n=20).leases]
    second = [x.index for x in h.get(w, n=20).leases]
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second != list(range(20))
    assert first == [spec.order(0).index_at(p) for p in range(20)]
    assert second == [spec.order(1).index_at(p) for p in range(20)]


# ---- leases and reports -------------------------------------------------------------------------


def test_batched_get_applies_reports_first_then_hands_out(h):
    h.dataset(num_records=80, shard_size=10)
    w = h.worker()
    first = h.get(w, n=4)
    assert first.status == "LEASED" and len(first.leases) == 4
    reports = [Report(x.lease_id, "DONE") for x in first.leases]
    second = h.get(w, n=4, reports=reports)
    assert [r.accepted for r in second.results] == [True] * 4
    assert len(second.leases) == 4
    assert h.epoch().shards_done == 4 and h.epoch().records_done == 40


def test_one_shard_per_call_client_works(h):
    h.dataset(num_records=30, shard_size=10)
    w = h.worker()
    for _ in range(3):
        grant = h.get(w, n=0)
        assert len(grant.leases) == 1
        assert h.done(w, grant.leases[0])[0].accepted
    assert h.get(w, n=0).status == "END"


def test_negative_max_shards_is_refused_before_any_report_is_applied(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    code, _ = codes(lambda: h.core.get_shard(w, "d", -1, [Report(lease.lease_id, "DONE")]))
    assert code == "INVALID_ARGUMENT"
    assert h.epoch().records_done == 0


def test_done_counts_once_and_a_repeat_is_a_duplicate(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    assert h.done(w, lease)[0].accepted
    again = h.done(w, lease)[0]
    assert not again.accepted and again.duplicate
    assert h.epoch().records_done == 10 and h.epoch().duplicates == 1


def test_report_of_a_lease_taken_away_is_a_duplicate_and_not_counted(h):
    h.dataset(num_records=10, shard_size=10)
    slow, fast = h.worker("slow"), h.worker("fast")
    lease = h.get(slow).leases[0]
    h.core.leave_worker(slow, "scaled-down", [])
    h.commit()
    again = h.get(fast).leases[0]
    assert (again.start, again.end) == (lease.start, lease.end)
    assert h.done(fast, again)[0].accepted
    # the slow worker comes back under a new id and reports its old lease: refused
    slow2 = h.worker("slow")
    late = h.done(slow2, lease)[0]
    assert not late.accepted and late.duplicate
    assert h.epoch().records_done == 10 and h.epoch().duplicates == 1


def test_duplicate_is_recognised_after_a_restart(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    h.done(w, lease)
    h.restart()
    result = h.done(w, lease)[0]
    assert result.duplicate and not result.accepted


def test_reports_that_are_wrong_get_their_own_refusal(h):
    h.dataset()
    a, b = h.worker("a"), h.worker("b")
    la = h.get(a).leases[0]
    lb = h.get(b).leases[0]
    results = h.report(
        a,
        Report(la.lease_id, "DONE"),
        Report(lb.lease_id, "DONE"),  # not a's lease
        Report(999_999, "DONE"),  # never handed out
        Report(la.lease_id + 100, "unknown(9)"),
    )
    assert [r.accepted for r in results] == [True, False, False, False]
    assert "held by worker" in results[1].reason
    assert "unknown lease" in results[2].reason
    assert h.epoch().records_done == 10


def test_records_done_out_of_range_is_refused(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    (r,) = h.report(w, Report(lease.lease_id, "PROGRESS", 11))
    assert not r.accepted and "outside 0..10" in r.reason
    (r,) = h.report(w, Report(lease.lease_id, "PROGRESS", -1))
    assert not r.accepted


def test_unknown_worker_or_dataset_is_not_found(h):
    h.dataset()
    w = h.worker()
    assert codes(lambda: h.core.get_shard("w-99", "d", 1, []))[0] == "NOT_FOUND"
    assert codes(lambda: h.core.heartbeat("nobody", []))[0] == "NOT_FOUND"
    code, message = codes(lambda: h.core.get_shard(w, "nope", 1, []))
    assert code == "NOT_FOUND" and "CreateDataset" in message


def test_bad_worker_names_and_labels_are_refused(h):
    assert codes(lambda: h.core.register_worker("", {}))[0] == "INVALID_ARGUMENT"
    assert codes(lambda: h.core.register_worker("x" * 200, {}))[0] == "INVALID_ARGUMENT"
    assert codes(lambda: h.core.register_worker("w", {"": "x"}))[0] == "INVALID_ARGUMENT"
    assert not h.core.workers.alive


# ---- requeue causes -----------------------------------------------------------------------------


def test_two_epochs_drain_exactly_once(h):
    h.dataset(num_records=95, shard_size=10, num_epochs=2, shuffle=True, seed=3)
    w = h.worker()
    assert h.drain(w) == 20
    audit = h.audit()
    for epoch in (0, 1):
        assert_exactly_once(audit[epoch], 95)
        assert h.epoch(epoch=epoch).records_done == 95
        assert h.epoch(epoch=epoch).shards_done == 10


# ---- restart -----------------------------------------------------------------------------------


def test_restart_restores_everything(h):
    h.dataset(num_records=100, shard_size=10, num_epochs=2)
    w = h.worker("w", market="spot")
    leases = h.get(w, n=3).leases
    h.done(w, leases[0])
    h.report(w, Report(leases[1].lease_id, "FAILED", 2, "oops"))
    h.restart()
    core = h.core
    assert core.workers.alive[w].labels == {"market": "spot"}
    assert set(core.leases) == {leases[2].lease_id}
    queue = core.datasets["d"]
    assert queue.cursor == 3 and len(queue.front) == 1
    assert queue.epochs[0].records_done == 12
    # lease ids keep growing after the restart
    new = h.get(w).leases[0]
    assert new.lease_id > max(x.lease_id for x in leases)
    assert (new.start, new.end) == (leases[1].start + 2, leases[1].end)


def test_uncommitted_changes_are_gone_after_a_crash(h):
    h.dataset()
    w = h.worker()
    h.core.get_shard(w, "d", 1, [])  # never committed, so never acknowledged
    h.restart(lose_uncommitted=True)
    assert not h.core.leases and h.core.datasets["d"].cursor == 0


def test_workers_that_do_not_come_back_after_a_restart_expire(h):
    h.dataset()
    w = h.worker()
    h.get(w, n=2)
    h.restart()
    h.clock.advance(3.5)
    h.core.tick()
    assert w not in h.core.workers.alive
    assert h.epoch().requeues == {"lost": 2}


# ---- events ------------------------------------------------------------------------------------


def test_timeline_records_membership_and_data_events(h):
    h.dataset(num_records=20, shard_size=10)
    a = h.worker("a")
    b = h.worker("b")
    lease = h.get(a).leases[0]
    h.core.heartbeat(a, [Report(lease.lease_id, "PROGRESS", 4)])
    h.core.leave_worker(a, "preempted", [])
    h.commit()
    h.drain(b)
    h.clock.advance(10)
    h.core.tick()
    h.restart()
    kinds = [e["kind"] for e in h.store.events(0, 1000)]
    for kind in ("master_started", "dataset_created", "epoch_started", "worker_registered",
                 "worker_left", "lease_requeued", "epoch_finished", "worker_lost"):
        assert kind in kinds, kind
    assert kinds.count("master_started") == 2
    requeued = [e for e in h.store.events(0, 1000) if e["kind"] == "lease_requeued"][0]
    assert requeued["cause"] == "preempted" and "offset 4" in requeued["detail"]
    seqs = [e["seq"] for e in h.store.events(0, 1000)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [e["seq"] for e in h.store.events(seqs[2], 2)] == seqs[3:5]


# ---- PS registry -------------------------------------------------------------------------------


def test_ps_registry(h):
    assert h.core.register_ps("h:1", "tcp://h:2", 0, 2) == 1
    assert h.core.list_ps()[2] is False
    h.core.register_ps("h:3", "tcp://h:4", 1, 2)
    assert h.core.list_ps()[1:] == (2, True)
    assert h.core.register_ps("h:5", "tcp://h:6", 0, 2) == 2
    assert codes(lambda: h.core.register_ps("h:1", "", 0, 3))[0] == "FAILED_PRECONDITION"
    assert codes(lambda: h.core.register_ps("h:1", "", 2, 2))[0] == "INVALID_ARGUMENT"
    h.restart()
    rows, num_ps, complete = h.core.list_ps()
    assert complete and rows[0]["address"] == "h:5" and rows[0]["incarnation"] == 2


def test_heartbeat_answers_the_leases_held_so_a_lost_reply_is_recovered(h):
    h.dataset()
    w = h.worker()
    granted = h.get(w, n=2).leases  # imagine this reply never arrived
    results, held = h.core.heartbeat(w, [])
    assert results == [] and [x.lease_id for x in held] == [x.lease_id for x in granted]
    h.done(w, held[0])
    assert [x.lease_id for x in h.core.heartbeat(w, [])[1]] == [granted[1].lease_id]


def test_ps_lost_only_for_the_incarnation_that_failed(h):
    h.core.register_ps("h:1", "tcp://h:2", 0, 1)
    assert h.core.mark_ps_lost(0, 1, "down")
    assert not h.core.mark_ps_lost(0, 1, "down")  # once
    h.core.register_ps("h:1", "tcp://h:2", 0, 1)  # back, incarnation 2
    assert 0 not in h.core.ps_lost
    assert not h.core.mark_ps_lost(0, 1, "stale failure of the old incarnation")
    h.commit()
    kinds = [e["kind"] for e in h.store.events(0, 100)]
    assert kinds.count("ps_lost") == 1 and kinds.count("ps_registered") == 2
