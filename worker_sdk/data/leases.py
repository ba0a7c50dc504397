"""The leases a worker holds for one dataset, and how far each got: read, delivered, trained.

Pure bookkeeping (no network): `ElasticDataset` reads positions from it, tells it what was
delivered to the training loop, the ack ledger (`worker_sdk.data.ack`) tells it what was trained,
and the master client asks it for reports and hands back the master's answers.

Per lease, positions move read -> delivered -> trained, each a prefix of the lease
(0 <= trained <= delivered <= read <= size). Only `trained` is ever reported: PROGRESS with
records_done = trained, DONE once trained == size. A lease the master says it no longer holds
for us (a duplicate answer, or a re-registration after we were declared lost) is dropped at once:
its unread positions are never delivered, and nothing of it is reported again.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, NamedTuple

from . import ack

log = logging.getLogger(__name__)


@dataclass(eq=False)
class HeldLease:
    lease_id: int
    epoch: int
    index: int
    start: int
    end: int
    read: int = 0  # positions taken out of the lease (delivered, or in an SDK buffer)
    delivered: int = 0  # positions handed to the training loop
    trained: int = 0  # positions whose training step finished
    reported: int = 0  # records_done the master has accepted
    failed: str | None = None  # its step failed: report `failed_as` with this message
    failed_as: "Outcome | None" = None  # FAILED (the training code) or RELEASED (the push)

    @property
    def size(self) -> int:
        return self.end - self.start


class Outcome(str, Enum):
    """What a report says of a lease (the names of ShardReport.Outcome)."""

    def __str__(self) -> str:  # the value in messages and logs
        return self.value

    DONE = "DONE"  # every record trained
    PROGRESS = "PROGRESS"  # records_done trained so far, still held
    FAILED = "FAILED"  # the training step failed on it: give the untrained rest back
    RELEASED = "RELEASED"  # its push did not go through (stale, no PS): the rest goes back


class Report(NamedTuple):
    lease_id: int
    outcome: Outcome
    records_done: int
    message: str = ""


class Result(NamedTuple):
    lease_id: int
    accepted: bool
    duplicate: bool
    reason: str


class LeaseTable:
    def __init__(self, dataset: str, ledger: ack.AckLedger | None = None):
        """ledger: the ack ledger that tells this table what was trained (default: the
        process's, `worker_sdk.data.ack.LEDGER`)."""
        self.dataset = dataset
        self.ledger = ledger or ack.LEDGER
        self.lock = threading.RLock()
        self.leases: dict[int, HeldLease] = {}  # in read order
        # deliveries not yet trained, oldest first: [first sequence number, lease, count]
        self._runs: deque[list] = deque()
        self.frozen = False  # after a preemption leave: nothing may be acknowledged any more
        self.dropped = 0  # leases taken away from us
        self.wasted = 0  # records read from leases that were taken away (trained elsewhere)
        self.duplicates = 0  # reports the master refused as duplicates
        self.completed = 0  # leases reported DONE and accepted
        self.trained = 0  # records acknowledged as trained (worker metrics)
        self.ledger.register(self)

    # ---- leases in and out --------------------------------------------------------------------

    def add(self, lease_id: int, epoch: int, index: int, start: int, end: int) -> HeldLease:
        with self.lock:
            lease = self.leases.get(lease_id)
            if lease is None:
                lease = HeldLease(lease_id, epoch, index, start, end)
                self.leases[lease_id] = lease
            return lease

    def rewind(self) -> None:
        """Positions read but never delivered (a pass that ended in the middle of a batch, or a
        __getitem__ that raised) go back to be read again."""
        with self.lock:
            for lease in self.leases.values():
                lease.read = lease.delivered

    def holds(self, lease: HeldLease) -> bool:
        return self.leases.get(lease.lease_id) is lease

    def take(self) -> tuple[HeldLease, int] | None:
        """The next position to read: (lease, position k from the lease's start), or None."""
        got = self.take_run(1)
        return None if got is None else got[:2]

    def take_run(self, limit: int) -> tuple[HeldLease, int, int] | None:
        """The next run of at most `limit` consecutive positions of one lease:
        (lease, first position k, count), or None when every held lease is read."""
        with self.lock:
            for lease in self.leases.values():
                if lease.read < lease.size and lease.failed is None:
                    k = lease.read
                    n = min(limit, lease.size - k)
                    lease.read += n
                    return lease, k, n
            return None

    def unread(self, lease: HeldLease, k: int) -> None:
        """Positions from k on were taken but will not be delivered: read them again."""
        with self.lock:
            lease.read = max(min(lease.read, k), lease.delivered)

    def drop(self, lease_id: int, why: str) -> None:
        with self.lock:
            lease = self.leases.pop(lease_id, None)
            if lease is not None:
                self.dropped += 1
                self.wasted += lease.read - lease.reported
                log.info("dataset %r: lease %d (epoch %d shard %d [%d, %d)) is no longer ours "
                         "(%s); it goes back to the master from offset %d",
                         self.dataset, lease.lease_id, lease.epoch, lease.index, lease.start,
                         lease.end, why, lease.reported)

    def drop_all(self, why: str) -> None:
        with self.lock:
            for lease_id in list(self.leases):
                self.drop(lease_id, why)

    # ---- delivery and training ----------------------------------------------------------------

    def deliver(self, leases: Iterable[HeldLease]) -> None:
        """The training loop now has one record of each of `leases` (in order)."""
        self.deliver_runs([(lease, 1) for lease in leases])

    def deliver_runs(self, runs: Iterable[tuple[HeldLease, int]]) -> None:
        """The training loop now has the next `n` records of each (lease, n), in order."""
        runs = [(lease, n) for lease, n in runs if n > 0]
        if not runs:
            return
        with self.lock:
            seq = self.ledger.take_sequence(sum(n for _, n in runs))
            for lease, n in runs:
                lease.delivered += n
                last = self._runs[-1] if self._runs else None
                if last is not None and last[1] is lease and last[0] + last[2] == seq:
                    last[2] += n
                else:
                    self._runs.append([seq, lease, n])
                seq += n

    def mark_trained(self, upto: int | None = None) -> int:
        """Records delivered before sequence number `upto` (all when None) are trained."""
        with self.lock:
            if self.frozen:
                return 0
            newly = 0
            while self._runs:
                run = self._runs[0]
                seq, lease, count = run
                covered = count if upto is None else min(count, upto - seq)
                if covered <= 0:
                    break
                lease.trained += covered
                newly += covered
                if covered == count:
                    self._runs.popleft()
                else:
                    run[0] += covered
                    run[2] -= covered
            self.trained += newly
            return newly

    def fail_in_flight(self, message: str, released: bool = False) -> int:
        """The step that consumed the records in flight failed: their leases are reported
        (keeping what was trained before) and nothing more is read from them. FAILED: the
        training code failed on them, which spends the shard's failure budget; `released`:
        RELEASED, their push did not go through (refused as stale, no PS answered), which is
        no fault of the data."""
        with self.lock:
            # the first cause sticks: a lease already failed keeps its outcome and message (a
            # RELEASED one does not turn FAILED when the loop then gives up on PushFailed)
            failing = [lease for lease in self.leases.values()
                       if lease.delivered > lease.trained and lease.failed is None]
            for lease in failing:
                lease.failed = message[:500] or "the training step failed"
                lease.failed_as = Outcome.RELEASED if released else Outcome.FAILED
            self._runs = deque(run for run in self._runs if run[1].failed is None)
            return len(failing)

    def freeze(self) -> None:
        with self.lock:
            self.frozen = True

    def in_flight(self) -> int:
        """Records the loop holds whose step has not been acknowledged, in leases still ours."""
        with self.lock:
            return sum(lease.delivered - lease.trained for lease in self.leases.values()
                       if lease.failed is None)

    def unread_positions(self) -> int:
        """Positions of held leases not yet taken out by the reader."""
        with self.lock:
            return sum(lease.size - lease.read for lease in self.leases.values()
                       if lease.failed is None)

    def buffered(self) -> int:
        with self.lock:
            return sum(lease.read - lease.delivered for lease in self.leases.values())

    # ---- reporting ------------------------------------------------------------------------------

    def reports(self, every: bool = False) -> list[Report]:
        """DONE for leases fully trained; PROGRESS for those that trained more since the last
        accepted report, or (`every`, for heartbeats) for every lease held, so that a lease
        taken back for a timeout is noticed (the master answers it as a duplicate)."""
        out = []
        with self.lock:
            for lease in self.leases.values():
                if lease.failed is not None:
                    out.append(Report(lease.lease_id, lease.failed_as or Outcome.FAILED,
                                      lease.trained, lease.failed))
                elif lease.trained >= lease.size:
                    out.append(Report(lease.lease_id, Outcome.DONE, lease.size))
                elif every or lease.trained > lease.reported:
                    out.append(Report(lease.lease_id, Outcome.PROGRESS, lease.trained))
        return out

    def apply(self, reports: list[Report], results: list[Result]) -> None:
        """Take in the master's answers to `reports` (in the same order)."""
        with self.lock:
            for report, result in zip(reports, results):
                lease = self.leases.get(report.lease_id)
                if lease is None:
                    continue
                if result.accepted:
                    if report.outcome == Outcome.DONE:
                        del self.leases[report.lease_id]
                        self.completed += 1
                    elif report.outcome in (Outcome.FAILED, Outcome.RELEASED):
                        del self.leases[report.lease_id]
                    else:
                        lease.reported = max(lease.reported, report.records_done)
                    continue
                if report.outcome == Outcome.RELEASED and not result.duplicate:
                    # a master older than RELEASED refuses it: the next report says FAILED,
                    # which every master takes (the lease is not left to time out)
                    lease.failed_as = Outcome.FAILED
                    continue
                if result.duplicate:
                    self.duplicates += 1
                else:
                    log.warning("dataset %r: the master refused a report of lease %d: %s",
                                self.dataset, report.lease_id, result.reason)
                self.drop(report.lease_id, result.reason or "refused")

    def close(self) -> None:
        self.ledger.unregister(self)
