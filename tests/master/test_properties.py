"""Random interleavings never lose a record and never count one twice.

A hypothesis state machine drives the core (with its real store) through acquire / done /
fail / progress / leave / silence / lease timeout / restart in any order, then drains what is
left and checks, from the durable lease history, that every record of every epoch was counted
done exactly once and that the counters agree with that history.
"""
from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from master.calls import Report
from master.core import Settings
from rpckit.errors import ServiceError
from tests.master.harness import Harness, assert_exactly_once

NUM_RECORDS, SHARD_SIZE, EPOCHS = 37, 5, 2


class Interleavings(RuleBasedStateMachine):
    @initialize(shuffle=st.booleans(), failures=st.integers(min_value=2, max_value=4))
    def setup(self, shuffle, failures):
        self.h = Harness(Settings(max_shard_failures=failures))
        self.h.dataset(num_records=NUM_RECORDS, shard_size=SHARD_SIZE, num_epochs=EPOCHS,
                       shuffle=shuffle, seed=11, lease_timeout_s=20)
        self.workers: list[str] = []
        self.held: dict[int, tuple[str, int]] = {}  # lease id -> (worker, size) as acknowledged

    def _call(self, fn):
        try:
            result = fn()
        except ServiceError as exc:
            assert exc.code == "NOT_FOUND", exc.message  # only a lost/left worker is refused
            return None
        self.h.commit()  # the server answers only after this
        return result

    def _live(self, i):
        return self.workers[i % len(self.workers)] if self.workers else None

    @rule()
    def register(self):
        if len(self.workers) < 4:
            self.workers.append(self.h.worker())

    @precondition(lambda self: self.workers)
    @rule(i=st.integers(0, 3), n=st.integers(0, 3))
    def acquire(self, i, n):
        w = self._live(i)
        grant = self._call(lambda: self.h.core.get_shard(w, "d", n, []))
        if grant:
            for lease in grant.leases:
                self.held[lease.lease_id] = (w, lease.size)

    @precondition(lambda self: self.held)
    @rule(pick=st.integers(0, 10**6), outcome=st.sampled_from(["DONE", "FAILED", "PROGRESS"]),
          frac=st.floats(0, 1))
    def report(self, pick, outcome, frac):
        lease_id = sorted(self.held)[pick % len(self.held)]
        w, size = self.held[lease_id]
        k = int(size * frac)
        results = self._call(lambda: self.h.core.report(w, [Report(lease_id, outcome, k, "x")]))
        if results and outcome != "PROGRESS":
            self.held.pop(lease_id)

    @precondition(lambda self: self.workers)
    @rule(i=st.integers(0, 3), reason=st.sampled_from(["preempted", "scaled-down"]))
    def leave(self, i, reason):
        w = self._live(i)
        if self._call(lambda: self.h.core.leave_worker(w, reason, [])) is not None:
            self.workers.remove(w)

    @rule(seconds=st.sampled_from([1.0, 3.5, 25.0]))
    def time_passes(self, seconds):
        """Nobody calls for a while: silent workers are lost, old leases time out."""
        self.h.clock.advance(seconds)
        self._call(self.h.core.tick)
        self.workers = [w for w in self.workers if w in self.h.core.workers.alive]

    @rule()
    def restart(self):
        self.h.restart()

    @invariant()
    def counters_match_history(self):
        if not hasattr(self, "h"):
            return
        self.h.commit()
        audit = self.h.audit()
        for epoch, stats in self.h.core.datasets["d"].epochs.items():
            ranges = audit.get(epoch, [])
            assert stats.records_done == sum(e - s for s, e in ranges)
            for (s1, e1), (s2, _) in zip(ranges, ranges[1:]):
                assert e1 <= s2, f"epoch {epoch}: [{s1}, {e1}) overlaps a range from {s2}"

    def teardown(self):
        if not hasattr(self, "h"):
            return
        core = self.h.core
        core.requeue_quarantined("d")
        self.h.commit()
        for w in list(core.workers.alive):
            core.leave_worker(w, "finished", [])
        self.h.commit()
        self.h.drain(self.h.worker("finisher"))
        audit = self.h.audit()
        assert sorted(audit) == list(range(EPOCHS))
        for epoch in range(EPOCHS):
            assert_exactly_once(audit[epoch], NUM_RECORDS)
            stats = core.datasets["d"].epochs[epoch]
            assert stats.records_done == NUM_RECORDS
            assert stats.shards_done == -(-NUM_RECORDS // SHARD_SIZE)
            assert stats.finished_ms


TestInterleavings = Interleavings.TestCase
TestInterleavings.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
