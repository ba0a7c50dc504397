"""MasterCore: how leases come back (FAILED, leave, loss, lease timeout), progress within a
lease, quarantine, epochs and the --min-workers gate; on a fake clock, no network."""
from __future__ import annotations

import pytest

from master.calls import Report
from master.core import Settings
from tests.master.harness import Harness, assert_exactly_once
from tests.master.test_core import codes


@pytest.fixture
def h():
    return Harness()


def test_failed_goes_to_the_front_and_is_handed_out_next(h):
    h.dataset(num_records=100, shard_size=10)
    w = h.worker()
    lease = h.get(w).leases[0]
    h.report(w, Report(lease.lease_id, "FAILED", 0, "boom"))
    again = h.get(w).leases[0]
    assert (again.index, again.start, again.end) == (lease.index, lease.start, lease.end)
    assert again.handout == 2
    assert h.epoch().requeues == {"failed": 1}


def test_leave_requeues_at_once_with_the_reason(h):
    h.dataset(num_records=100, shard_size=10)
    w, other = h.worker(), h.worker()
    leases = h.get(w, n=3).leases
    h.core.leave_worker(w, "preempted", [])
    h.commit()
    assert h.epoch().requeues == {"preempted": 3}
    got = h.get(other, n=3).leases
    assert sorted(x.index for x in got) == sorted(x.index for x in leases)
    assert codes(lambda: h.core.heartbeat(w, []))[1].startswith(f"worker '{w}' left")


def test_silent_worker_is_lost_and_its_leases_come_back(h):
    h.dataset(num_records=100, shard_size=10)
    quiet, busy = h.worker("quiet"), h.worker("busy")
    taken = h.get(quiet, n=2).leases
    h.clock.advance(2.0)
    h.core.heartbeat(busy, [])
    h.core.tick()
    assert quiet in h.core.workers.alive  # 2 s < 3 s timeout
    h.clock.advance(1.5)
    h.core.tick()
    h.commit()
    assert quiet not in h.core.workers.alive and busy in h.core.workers.alive
    assert h.epoch().requeues == {"lost": 2}
    again = h.get(busy, n=2).leases
    assert sorted(x.index for x in again) == sorted(x.index for x in taken)
    code, message = codes(lambda: h.core.heartbeat(quiet, []))
    assert code == "NOT_FOUND" and "lost" in message


def test_any_call_refreshes_liveness(h):
    h.dataset(num_records=1000, shard_size=10)
    w = h.worker()
    for _ in range(10):
        h.clock.advance(2.5)
        h.get(w)  # no heartbeat, but GetShard counts
        h.core.tick()
    assert w in h.core.workers.alive


def test_lease_timeout_takes_back_a_stuck_lease(h):
    h.dataset(num_records=100, shard_size=10, lease_timeout_s=30)
    stuck, other = h.worker(), h.worker()
    lease = h.get(stuck).leases[0]
    assert lease.deadline_ms == lease.handed_ms + 30_000
    for _ in range(4):  # alive all along, but holding the lease for 40 s
        h.clock.advance(10)
        h.core.heartbeat(stuck, [])
        h.core.heartbeat(other, [])
        h.core.tick()
    h.commit()
    assert h.epoch().requeues == {"timeout": 1}
    assert h.get(other).leases[0].index == lease.index
    assert h.done(stuck, lease)[0].duplicate


def test_default_lease_timeout_is_600s(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    assert lease.deadline_ms - lease.handed_ms == 600_000


# ---- progress within a lease ----------------------------------------------------------------------


def test_only_the_remainder_comes_back(h):
    h.dataset(num_records=10, shard_size=10)
    a, b = h.worker("a"), h.worker("b")
    lease = h.get(a).leases[0]
    h.core.heartbeat(a, [Report(lease.lease_id, "PROGRESS", 4)])
    h.core.leave_worker(a, "preempted", [Report(lease.lease_id, "PROGRESS", 6)])
    h.commit()
    rest = h.get(b).leases[0]
    assert (rest.index, rest.start, rest.end) == (0, 6, 10)
    assert h.epoch().records_done == 6 and h.epoch().shards_done == 0
    h.done(b, rest)
    assert h.epoch().records_done == 10 and h.epoch().shards_done == 1
    # a graceful leave reports its exact offset: the remainder is untrained, so re-handing it
    # out redoes nothing
    assert h.epoch().records_rehanded == 4 and h.epoch().records_redone == 0
    assert_exactly_once(h.audit()[0], 10)


def test_remainder_of_a_lost_worker_counts_as_possibly_redone(h):
    h.dataset(num_records=10, shard_size=10)
    a, b = h.worker("a"), h.worker("b")
    lease = h.get(a).leases[0]
    h.core.heartbeat(a, [Report(lease.lease_id, "PROGRESS", 3)])
    h.clock.advance(2)
    h.core.heartbeat(b, [])
    h.clock.advance(2)
    h.core.tick()  # a is lost: it may have trained past offset 3 before it died
    h.commit()
    rest = h.get(b).leases[0]
    assert (rest.start, rest.end, rest.redo) == (3, 10, True)
    h.done(b, rest)
    assert h.epoch().records_redone == 7 and h.epoch().records_rehanded == 7
    h.restart()
    assert [r["redo"] for r in h.store.leases_of("d")] == [False, True]


def test_progress_survives_a_restart_and_a_lost_worker(h):
    h.dataset(num_records=10, shard_size=10)
    a = h.worker("a")
    lease = h.get(a).leases[0]
    h.core.heartbeat(a, [Report(lease.lease_id, "PROGRESS", 7)])
    h.restart()
    h.clock.advance(5)
    h.core.tick()
    h.commit()
    b = h.worker("b")
    rest = h.get(b).leases[0]
    assert (rest.start, rest.end) == (7, 10)


def test_progress_never_goes_back(h):
    h.dataset()
    w = h.worker()
    lease = h.get(w).leases[0]
    h.report(w, Report(lease.lease_id, "PROGRESS", 5))
    h.report(w, Report(lease.lease_id, "PROGRESS", 3))
    assert h.core.leases[lease.lease_id].records_done == 5


# ---- failure budget and quarantine ----------------------------------------------------------------


def test_poison_shard_is_quarantined_after_max_failures_and_epoch_finishes(h):
    h.dataset(num_records=30, shard_size=10)
    w = h.worker()
    poison = None
    for attempt in range(3):
        grant = h.get(w, n=3)
        for lease in grant.leases:
            if lease.index == 1:
                poison = lease
                h.report(w, Report(lease.lease_id, "FAILED", 0, f"bad record {attempt}"))
            else:
                h.done(w, lease)
    assert poison is not None
    queue = h.core.datasets["d"]
    assert len(queue.quarantine) == 1
    (piece,) = queue.quarantine.values()
    assert piece.index == 1 and piece.failures == 3
    assert piece.errors == ["bad record 0", "bad record 1", "bad record 2"]
    assert h.get(w).status == "END"
    assert h.epoch().finished_ms and h.epoch().quarantined_shards == 1
    # an operator releases it: it is handed out again and the epoch completes
    assert h.core.requeue_quarantined("d") == 1
    h.commit()
    lease = h.get(w).leases[0]
    assert lease.index == 1
    h.done(w, lease)
    assert h.epoch().records_done == 30 and h.epoch().quarantined_shards == 0


def test_preemption_never_spends_the_failure_budget(h):
    h.dataset(num_records=10, shard_size=10)
    for _ in range(5):
        w = h.worker()
        h.get(w)
        h.core.leave_worker(w, "preempted", [])
        h.commit()
    w = h.worker()
    lease = h.get(w).leases[0]
    assert lease.failures == 0 and lease.handout == 6
    assert not h.core.datasets["d"].quarantine


def test_a_released_lease_keeps_its_progress_and_never_spends_the_failure_budget(h):
    """RELEASED: the worker's push did not go through (stale, or no PS answered): what it
    trained counts, the rest comes back at once, cause `released`, and however often it
    happens the shard is never quarantined (a FAILED one would be after 3)."""
    h.dataset(num_records=10, shard_size=10)
    w = h.worker()
    trained = 0
    for attempt in range(5):
        lease = h.get(w).leases[0]
        assert lease.failures == 0 and lease.start == trained
        h.report(w, Report(lease.lease_id, "RELEASED", 1, "refused as stale"))
        trained += 1
    assert h.epoch().requeues == {"released": 5}
    assert not h.core.datasets["d"].quarantine
    lease = h.get(w).leases[0]
    h.done(w, lease)
    assert h.epoch().records_done == 10


def test_quarantine_survives_restart(h):
    h = Harness(Settings(max_shard_failures=1))
    h.dataset(num_records=20, shard_size=10)
    w = h.worker()
    lease = h.get(w).leases[0]
    h.report(w, Report(lease.lease_id, "FAILED", 3, "nan loss"))
    h.restart()
    (piece,) = h.core.datasets["d"].quarantine.values()
    assert (piece.start, piece.end, piece.errors) == (lease.start + 3, lease.end, ["nan loss"])


# ---- epochs ------------------------------------------------------------------------------------


def test_next_epoch_opens_as_soon_as_todo_is_empty(h):
    h.dataset(num_records=40, shard_size=10, num_epochs=2)
    straggler, w = h.worker("s"), h.worker("w")
    slow = h.get(straggler).leases[0]
    for lease in h.get(w, n=3).leases:
        h.done(w, lease)
    grant = h.get(w, n=1)  # epoch 0's TODO is empty: epoch 1 is already available
    assert grant.status == "LEASED" and grant.leases[0].epoch == 1
    assert h.core.datasets["d"].current_epoch() == 0
    h.done(straggler, slow)
    assert h.epoch(epoch=0).finished_ms
    assert h.core.datasets["d"].current_epoch() == 1


def test_wait_with_a_retry_hint_then_end(h):
    h.dataset(num_records=10, shard_size=10)
    a, b = h.worker("a"), h.worker("b")
    lease = h.get(a).leases[0]
    wait = h.get(b)
    assert wait.status == "WAIT" and 0 < wait.retry_after_ms <= 1000
    h.done(a, lease)
    assert h.get(b).status == "END"


def test_min_workers_gate(h):
    h = Harness(Settings(min_workers=2, max_wait=60))
    h.dataset()
    a = h.worker("a")
    assert h.get(a).status == "WAIT"
    h.worker("b")
    assert h.get(a).status == "LEASED"


def test_min_workers_gate_opens_after_max_wait(h):
    h = Harness(Settings(min_workers=5, max_wait=10))
    h.dataset()
    a = h.worker("a")
    assert h.get(a).status == "WAIT"
    h.clock.advance(11)
    assert h.get(a).status == "LEASED"
