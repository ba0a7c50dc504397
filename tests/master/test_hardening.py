"""Issue 16, master: each defect found at the edges, on the core, the committer and both
databases (SQLite always; PostgreSQL with ELASTIC_PS_TEST_PG_URL). Each test failed on the
main before the fix."""
from __future__ import annotations

import math
import threading

import pytest

from master import workers as workers_module
from master.calls import Report
from master.core import MasterCore, Settings
from master.datasets.shards import DatasetQueue
from master.datasets.spec import DatasetSpec
from master.limits import MAX_SEED, check_endpoint
from master.ps import restores
from master.persistence.committer import Committer
from master.persistence.store import Store
from master.views import status_view
from protos import master_pb2 as pb
from rpckit.errors import ServiceError
from tests.fakes import FakeClock
from tests.master.harness import Harness, assert_exactly_once


@pytest.fixture(params=["sqlite", "postgres"])
def h(request):
    if request.param == "sqlite":
        return Harness()
    return Harness(url=request.getfixturevalue("pg_url"))


def refused(fn) -> ServiceError:
    with pytest.raises(ServiceError) as info:
        fn()
    assert info.value.code == "INVALID_ARGUMENT", info.value
    return info.value


def spec(**kw) -> DatasetSpec:
    base = dict(name="d", num_records=100, shard_size=10, num_epochs=2)
    base.update(kw)
    return DatasetSpec(**base)


# ---- numbers bounded where accepted ----------------------------------------------------------


@pytest.mark.parametrize("timeout", [math.inf, -math.inf, math.nan, 1e17, 1e9, -1.0])
def test_lease_timeouts_that_cannot_be_carried_are_refused(h, timeout):
    refused(lambda: h.core.create_dataset(spec(lease_timeout_s=timeout)))
    assert h.core.datasets == {}


def test_the_longest_lease_timeout_still_hands_out_and_commits(h):
    h.dataset(lease_timeout_s=7 * 86400.0)
    wid = h.worker()
    assert h.get(wid).status == "LEASED"  # committed by the harness: the deadline fits


@pytest.mark.parametrize("seed", [(1 << 63) - 1, -(1 << 63), MAX_SEED + 1, -MAX_SEED - 1])
def test_seeds_that_could_overflow_seed_plus_epoch_are_refused(h, seed):
    refused(lambda: h.core.create_dataset(spec(shuffle=True, seed=seed)))


@pytest.mark.parametrize("seed", [MAX_SEED, -MAX_SEED])
def test_the_largest_seeds_shuffle_every_epoch(h, seed):
    h.dataset(num_records=50, shard_size=10, num_epochs=3, shuffle=True, seed=seed)
    wid = h.worker()
    assert h.drain(wid) == 15
    for epoch, ranges in h.audit().items():
        assert_exactly_once(ranges, 50)


@pytest.mark.parametrize("field,value", [
    ("num_records", (1 << 50) + 1), ("shard_size", (1 << 50) + 1), ("num_epochs", (1 << 20) + 1),
    ("num_records", -1), ("shard_size", -(1 << 63)),
])
def test_sizes_are_bounded(h, field, value):
    refused(lambda: h.core.create_dataset(spec(**{field: value})))


# ---- strings checked before they reach the database --------------------------------------------


@pytest.mark.parametrize("name", ["d\n", "d\x00", "\nd", "d e", "-d", "d" * 129])
def test_dataset_names_are_matched_whole(h, name):
    refused(lambda: h.core.create_dataset(spec(name=name)))


def test_nul_and_control_characters_never_reach_the_database(h):
    refused(lambda: h.core.register_worker("w\x00", {}))
    refused(lambda: h.core.register_worker("w\n", {}))
    refused(lambda: h.core.register_worker("w", {"k\x00": "v"}))
    refused(lambda: h.core.register_worker("w", {"k": "v\x00"}))
    refused(lambda: h.core.register_ps("127.0.0.1:1\x00", "tcp://x:1", 0, 1))
    refused(lambda: h.core.register_ps("127.0.0.1:1", "tcp://x:1\x00", 0, 1))
    refused(lambda: h.core.register_ps("127.0.0.1:1", "tcp://x:1", 0, 1 << 20))
    refused(lambda: h.core.leave_worker("w-1", "pre\x00empted", []))
    h.commit()
    h.dataset(num_epochs=1)
    wid = h.worker("w\u00e9")  # any printable name is fine
    (lease,) = h.get(wid).leases
    # a FAILED message is free text: kept, cleaned, and the commit (in h.report) succeeds
    (result,) = h.report(wid, Report(lease.lease_id, "FAILED", 0, "boom\x00\n" + "x" * 10_000))
    assert result.accepted
    (piece,) = h.core.datasets["d"].front
    assert "\x00" not in piece.errors[0] and len(piece.errors[0]) <= 500
    h.restart()
    assert h.core.datasets["d"].front[0].errors == piece.errors


def test_long_input_is_quoted_short_in_messages(h):
    err = refused(lambda: h.core.create_dataset(spec(name="x" * 100_000)))
    assert len(err.message) < 300
    wid = h.worker()
    with pytest.raises(ServiceError) as info:
        h.core.get_shard(wid, "y" * 100_000, 1, [])
    assert info.value.code == "NOT_FOUND" and len(info.value.message) < 300


# ---- a call that raises changes nothing --------------------------------------------------------


def test_a_call_that_breaks_midway_changes_nothing(monkeypatch):
    store = Store("sqlite://")
    store.upgrade()
    core = MasterCore(Settings(), snapshot=store.load())
    committer = Committer(core, store, on_fatal=lambda exc: None)
    committer.start()
    try:
        committer.call(lambda: core.create_dataset(spec(num_epochs=1)))
        wid = committer.call(lambda: core.register_worker("w", {})).worker_id
        before = committer.call(lambda: status_view(core))
        real_take = DatasetQueue.take

        def broken_take(self, worker_id, lease_id):
            real_take(self, worker_id, lease_id)  # advances the cursor, journals the lease
            raise OverflowError("a bug after half the work")

        monkeypatch.setattr(DatasetQueue, "take", broken_take)
        with pytest.raises(OverflowError):
            committer.call(lambda: core.get_shard(wid, "d", 3, []))
        monkeypatch.setattr(DatasetQueue, "take", real_take)
        committer.flush()
        assert store.load().leases == []  # nothing of the broken call was committed
        after = committer.call(lambda: status_view(core))
        assert after.datasets == before.datasets  # memory was rebuilt from the database
        assert committer.recoveries == 1
        # the worker was restored alive and gets the very shards the broken call took
        grant = committer.call(lambda: core.get_shard(wid, "d", 3, []))
        assert [lease.index for lease in grant.leases] == [0, 1, 2]
        kinds = [e["kind"] for e in store.events(0, 100)]
        assert kinds[-1] == "master_recovered"
    finally:
        committer.stop()


def test_get_status_shows_only_committed_state():
    """GetStatus goes through the committer: it is answered only once what it shows is
    durable, so a commit that fails takes the status down with it instead of showing it."""
    from tests.master.persistence.test_committer import GatedStore
    from master.server import MasterServicer

    store = GatedStore()
    core = MasterCore(snapshot=store.load())
    committer = Committer(core, store, on_fatal=lambda exc: None)
    store.gate.set()
    committer.start()
    committer.flush()
    store.gate.clear()
    store.fail = True
    servicer = MasterServicer(core, committer, store)
    seen = {}

    def create():
        try:
            committer.call(lambda: core.create_dataset(spec()))
        except ServiceError as exc:
            seen["create"] = exc.code

    def status():
        try:
            seen["status"] = [d.spec.name for d in committer.call(lambda: status_view(core))
                              .datasets]
        except ServiceError as exc:
            seen["status"] = exc.code

    a = threading.Thread(target=create)
    a.start()
    while not core.journal.pending() and committer._durable == 0 and a.is_alive():
        pass  # until the dataset is in memory, its commit held at the gate
    b = threading.Thread(target=status)
    b.start()
    store.gate.set()  # the commit fails
    a.join(10)
    b.join(10)
    committer.stop()
    assert seen == {"create": "UNAVAILABLE", "status": "UNAVAILABLE"}
    assert servicer is not None


# ---- the --min-workers gate ----------------------------------------------------------------


def test_min_workers_gate_reopens_after_a_restart():
    h = Harness(Settings(min_workers=2))
    h.dataset()
    a, b = h.worker("a"), h.worker("b")
    h.restart()
    assert h.get(a).status == "LEASED"  # restored live workers count


def test_min_workers_gate_stays_open_once_anything_was_handed_out():
    h = Harness(Settings(min_workers=2))
    h.dataset()
    a, b = h.worker("a"), h.worker("b")
    assert h.get(a).status == "LEASED"
    h.core.leave_worker(b, "scaled-down", [])
    h.restart()
    assert h.get(a).status == "LEASED"  # one worker left, but training had started


# ---- bounded per-call work -------------------------------------------------------------------


class CountingDict(dict):
    scans = 0

    def values(self):
        CountingDict.scans += 1
        return super().values()

    def __iter__(self):
        CountingDict.scans += 1
        return super().__iter__()


def test_status_does_not_scan_leases_or_epochs():
    h = Harness()
    h.dataset(num_records=200, shard_size=1, num_epochs=200)
    wid = h.worker()
    # one lease in each of many epochs: each epoch's TODO empties, so the next one opens
    h.core.settings.max_leases_per_worker = 100_000
    for _ in range(200):
        h.get(wid, n=200)
    queue = h.core.datasets["d"]
    assert len(queue.epochs) == 200 and len(queue.leases) == 200 * 200
    queue.leases = CountingDict(queue.leases)
    CountingDict.scans = 0
    view = status_view(h.core)
    assert CountingDict.scans == 0
    (ds,) = view.datasets
    assert len(ds.epochs) <= 16 and ds.epochs_not_shown == 200 - len(ds.epochs)
    assert ds.epochs[0].doing == 200 and ds.epochs[0].epoch == 0


def test_reports_of_never_issued_leases_cost_no_query():
    h = Harness()
    h.dataset()
    wid = h.worker()
    (lease,) = h.get(wid).leases
    h.done(wid, lease)
    reports = [Report(i, "DONE") for i in (0, 10**6, (1 << 64) - 1)]
    assert h.core.unresolved(reports) == []  # nothing to look up
    results = h.core.report(wid, reports)
    assert [r.reason.startswith("unknown lease") for r in results] == [True] * 3
    h.commit()
    h.restart()  # the ended lease is no longer remembered: one lookup, outside the lock
    assert h.core.unresolved([Report(lease.lease_id, "DONE")]) == [lease.lease_id]
    (result,) = h.report(wid, Report(lease.lease_id, "DONE"))
    assert result.duplicate and h.epoch().duplicates == 1


def test_the_registry_of_departed_workers_is_bounded(monkeypatch):
    monkeypatch.setattr(workers_module, "MAX_GONE_KEPT", 5)
    h = Harness()
    ids = [h.worker(f"w{i}") for i in range(20)]
    for wid in ids:
        h.core.leave_worker(wid, "finished", [])
    assert len(h.core.workers.gone) == 5
    with pytest.raises(ServiceError) as info:
        h.core.heartbeat(ids[0], [])  # forgotten why, still known to be gone
    assert info.value.code == "NOT_FOUND" and info.value.reason == "WORKER_GONE"


def test_a_wall_clock_step_declares_nobody_lost():
    wall, mono = FakeClock(), FakeClock(100.0)
    core = MasterCore(Settings(worker_timeout=3.0), clock=wall, monotonic=mono)
    core.create_dataset(spec(lease_timeout_s=5.0))
    wid = core.register_worker("w", {}).worker_id
    (lease,) = core.get_shard(wid, "d", 1, []).leases
    wall.advance(3600)  # NTP steps the wall clock an hour ahead
    core.tick()
    assert wid in core.workers.alive and lease.lease_id in core.leases
    mono.advance(3.5)
    core.tick()
    assert wid not in core.workers.alive  # the monotonic clock still catches the silent


# ---- the PS set and the quarantine ------------------------------------------------------------


def test_a_wrong_num_ps_is_refused_for_good_and_never_replaces_the_layout(h):
    """Issue 25: a stray PS refused while the set lived used to replace it once the set was
    lost. With the durable layout only resize-ps changes the count."""
    h.core.register_ps("10.0.0.1:1", "tcp://10.0.0.1:2", 0, 2)
    h.core.register_ps("10.0.0.2:1", "tcp://10.0.0.2:2", 1, 2)
    h.commit()
    for index, num_ps in ((2, 3), (0, 3), (2, 0)):  # the stray one, however it is started
        with pytest.raises(ServiceError) as info:
            h.core.register_ps("10.0.0.9:1", "tcp://10.0.0.9:2", index, num_ps)
        assert info.value.code == "FAILED_PRECONDITION"
        assert info.value.reason == "LAYOUT_MISMATCH"
        assert "elastic-ctl resize-ps 3" in info.value.message
    assert h.core.mark_ps_lost(0, 1, "health check failing")
    assert h.core.mark_ps_lost(1, 1, "health check failing")
    h.restart()
    with pytest.raises(ServiceError) as info:  # the whole set lost and the master restarted
        h.core.register_ps("10.0.0.9:1", "tcp://10.0.0.9:2", 2, 3)
    assert info.value.reason == "LAYOUT_MISMATCH"
    h.core.register_ps("10.0.0.1:1", "tcp://10.0.0.1:2", 0, 0)  # --num-ps left out
    h.core.register_ps("10.0.0.2:1", "tcp://10.0.0.2:2", 1, 2)
    h.commit()
    rows, num_ps, complete = h.core.list_ps()
    assert num_ps == 2 and complete and [r["address"] for r in rows] == [
        "10.0.0.1:1", "10.0.0.2:1"]
    assert h.core.layout.version == 1


def test_a_released_quarantine_unfinishes_its_epoch_until_done_again():
    h = Harness(Settings(max_shard_failures=1))
    h.dataset(num_records=20, shard_size=10, num_epochs=1)
    wid = h.worker()
    first, second = h.get(wid, n=2).leases
    h.report(wid, Report(first.lease_id, "FAILED", 0, "bad record"))
    h.done(wid, second)
    assert h.epoch().finished_ms and h.get(wid).status == "END"
    assert h.core.requeue_quarantined("d") == 1
    h.commit()
    assert not h.epoch().finished_ms
    assert not status_view(h.core).datasets[0].epochs[0].finished
    assert h.drain(wid) == 1
    assert h.epoch().finished_ms
    kinds = [e["kind"] for e in h.store.events(0, 1000)]
    assert kinds.count("epoch_finished") == 2
    assert_exactly_once(h.audit()[0], 20)


# ---- issue 37: the fields of the RPCs added since (tests/master/test_hostile_walk.py) ------


@pytest.mark.parametrize("address", ["h", "h:0", "h:65536", ":5", "tcp://h:5", "h:5 ", "[::1]",
                                     "h:1\x00"])
def test_a_ps_address_names_a_host_and_a_port(address):
    refused(lambda: check_endpoint("PS address", address))


def test_ps_addresses_as_ps_register_them_pass():
    for address in ("127.0.0.1:50051", "ps-0.example.com:1", "[::1]:65535", "[fe80::1%eth0]:5"):
        check_endpoint("PS address", address)
        check_endpoint("PS data_address", f"tcp://{address}", "tcp://")
    check_endpoint("PS data_address", "", "tcp://", empty_ok=True)
    refused(lambda: check_endpoint("PS data_address", "127.0.0.1:5", "tcp://"))


def test_a_restored_window_is_ordered_and_not_in_the_future():
    now = 1_700_000_000_000
    ok = pb.RestoredCheckpoint(taken_ms=now - 5000, started_ms=now, number=3, applied={"c": 7})
    restores.check(ok, now)
    for bad in (dict(taken_ms=now, started_ms=now - 1), dict(taken_ms=-1),
                dict(started_ms=now + restores.CLOCK_SKEW_MS + 1), dict(number=-1),
                dict(applied={"c": -1}), dict(applied={f"c{i}": 1 for i in range(257)})):
        msg = pb.RestoredCheckpoint()
        msg.CopyFrom(ok)
        for key, value in bad.items():
            if key == "applied":
                msg.applied.clear()
                msg.applied.update(value)
            else:
                setattr(msg, key, value)
        refused(lambda: restores.check(msg, now))
