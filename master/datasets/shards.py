"""One dataset's shard state machine: TODO, DOING leases, done records, epochs, quarantine.

The state is small by construction. An epoch's fresh shards are a cursor into a deterministic
order (`spec.order(epoch)`), so TODO is `cursor..num_shards` plus a short `front` of requeued
pieces; only leases, requeued pieces and partly done shards are held one by one. Everything
else is counters. Every change is written to the journal's batch; the caller commits it before
it answers anybody.

Record accounting: each record of an epoch moves TODO -> leased -> done exactly once. A lease
that comes back for any cause credits its consumed part `[start, start + records_done)` as
done and sends only the remainder back to the front of TODO, so nothing is lost and nothing is
counted twice, whatever happens.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from ..limits import clean_message
from ..persistence.journal import Journal
from ..states import Cause, EventKind, LeaseState
from .spec import DatasetSpec

MAX_ERRORS_KEPT = 3


@dataclass
class Piece:
    """A record range waiting in the front of TODO (or in quarantine)."""

    key: int  # order in the front: the highest key is handed out first
    epoch: int
    index: int
    start: int
    end: int
    handouts: int = 1
    failures: int = 0
    errors: list[str] = field(default_factory=list)
    quarantined: bool = False
    # the records may have been trained already: their last holder died or failed without
    # an exact offset (a graceful leave reports one, so its remainder is untrained)
    redo: bool = False

    def to_row(self, dataset: str) -> dict:
        return dict(
            key=self.key, dataset=dataset, epoch=self.epoch, shard_index=self.index,
            start_rec=self.start, end_rec=self.end, handouts=self.handouts,
            failures=self.failures, errors=json.dumps(self.errors),
            quarantined=self.quarantined, redo=self.redo,
        )

    @classmethod
    def from_row(cls, row: dict) -> "Piece":
        return cls(
            key=row["key"], epoch=row["epoch"], index=row["shard_index"],
            start=row["start_rec"], end=row["end_rec"], handouts=row["handouts"],
            failures=row["failures"], errors=json.loads(row["errors"] or "[]"),
            quarantined=bool(row["quarantined"]), redo=bool(row["redo"]),
        )


@dataclass
class Lease:
    lease_id: int
    dataset: str
    epoch: int
    index: int
    start: int
    end: int
    worker_id: str
    handed_ms: int
    deadline_ms: int
    records_done: int = 0
    handout: int = 1  # this is the shard's n-th hand-out in its epoch
    failures: int = 0
    errors: list[str] = field(default_factory=list)
    redo: bool = False  # handed out again after an inexact loss (see Piece.redo)
    # when the lease expires, on the monotonic clock (deadline_ms is wall-clock, for people)
    due: float = 0.0

    @property
    def size(self) -> int:
        return self.end - self.start

    def to_row(self) -> dict:
        return dict(
            lease_id=self.lease_id, dataset=self.dataset, epoch=self.epoch,
            shard_index=self.index, start_rec=self.start, end_rec=self.end,
            worker_id=self.worker_id, handed_ms=self.handed_ms, deadline_ms=self.deadline_ms,
            records_done=self.records_done, handout=self.handout, failures=self.failures,
            errors=json.dumps(self.errors), state=str(LeaseState.DOING), cause="", ended_ms=0,
            redo=self.redo,
        )

    @classmethod
    def from_row(cls, row: dict) -> "Lease":
        return cls(
            lease_id=row["lease_id"], dataset=row["dataset"], epoch=row["epoch"],
            index=row["shard_index"], start=row["start_rec"], end=row["end_rec"],
            worker_id=row["worker_id"], handed_ms=row["handed_ms"],
            deadline_ms=row["deadline_ms"], records_done=row["records_done"],
            handout=row["handout"], failures=row["failures"],
            errors=json.loads(row["errors"] or "[]"), redo=bool(row["redo"]),
        )


@dataclass
class EpochStats:
    epoch: int
    started_ms: int = 0
    finished_ms: int = 0
    records_done: int = 0
    shards_done: int = 0
    handouts: int = 0
    duplicates: int = 0
    records_redone: int = 0  # handed out again and possibly trained before (upper bound)
    records_rehanded: int = 0  # handed out again, for any cause
    requeues: dict[str, int] = field(default_factory=dict)
    quarantined_shards: int = 0
    quarantined_records: int = 0
    rehanded_shards: int = 0
    max_handouts: int = 0

    def to_row(self, dataset: str) -> dict:
        return dict(
            dataset=dataset, epoch=self.epoch, started_ms=self.started_ms,
            finished_ms=self.finished_ms, records_done=self.records_done,
            shards_done=self.shards_done, handouts=self.handouts, duplicates=self.duplicates,
            records_redone=self.records_redone, records_rehanded=self.records_rehanded,
            requeues=json.dumps(self.requeues),
            quarantined_shards=self.quarantined_shards,
            quarantined_records=self.quarantined_records,
            rehanded_shards=self.rehanded_shards, max_handouts=self.max_handouts,
        )

    @classmethod
    def from_row(cls, row: dict) -> "EpochStats":
        values = {k: row[k] for k in cls.__dataclass_fields__ if k in row}
        values["requeues"] = json.loads(row["requeues"] or "{}")
        return cls(**values)


class DatasetQueue:
    """The TODO queue, leases and per-epoch accounting of one dataset."""

    def __init__(
        self,
        spec: DatasetSpec,
        journal: Journal,
        next_key: Callable[[], int],
        max_shard_failures: int = 3,
        monotonic: Callable[[], float] | None = None,
    ):
        self.spec = spec
        self.journal = journal
        self.monotonic = monotonic or journal.clock  # lease deadlines run on this clock
        self._next_key = next_key  # piece keys order the front across restarts
        self.max_shard_failures = max_shard_failures
        self.frontier = 0  # the newest epoch whose fresh shards are being handed out
        self.cursor = 0  # position in the frontier epoch's order of the next fresh shard
        self.front: list[Piece] = []  # requeued pieces; front[-1] goes out next
        self.quarantine: dict[int, Piece] = {}
        self.leases: dict[int, Lease] = {}
        self.epochs: dict[int, EpochStats] = {}
        # records still to do of shards that were handed out but are not done yet
        self.open: dict[tuple[int, int], int] = {}
        self._orders = {}
        # per-epoch counts kept as things move, so a status costs O(epochs shown), not a scan
        self.doing_by_epoch: Counter[int] = Counter()
        self.front_by_epoch: Counter[int] = Counter()
        self.oldest_unfinished = 0  # every epoch before it is finished

    # ---- creation and restore -------------------------------------------------------------

    def create(self) -> None:
        self.journal.batch.insert("datasets", self.spec.name, self._dataset_row())
        self._start_epoch(0)

    def restore(self, row: dict, epochs, pieces, leases) -> None:
        self.frontier, self.cursor = row["frontier"], row["cursor"]
        for e in epochs:
            self.epochs[e["epoch"]] = EpochStats.from_row(e)
        for p in sorted((Piece.from_row(r) for r in pieces), key=lambda p: p.key):
            if p.quarantined:
                self.quarantine[p.key] = p
            else:
                self.front.append(p)
                self.front_by_epoch[p.epoch] += 1
            self._open_add(p.epoch, p.index, p.end - p.start)
        now_ms, now = self.journal.now_ms(), self.monotonic()
        for lease in leases:
            self.leases[lease.lease_id] = lease
            self.doing_by_epoch[lease.epoch] += 1
            lease.due = now + (lease.deadline_ms - now_ms) / 1000
            self._open_add(lease.epoch, lease.index, lease.size)  # progress is credited at the end
        self._advance_unfinished()

    def _open_add(self, epoch: int, index: int, records: int) -> None:
        self.open[(epoch, index)] = self.open.get((epoch, index), 0) + records

    def _dataset_row(self) -> dict:
        row = self.spec.as_row()
        row.update(frontier=self.frontier, cursor=self.cursor, created_ms=self.journal.now_ms())
        return row

    def _start_epoch(self, epoch: int) -> None:
        stats = EpochStats(epoch=epoch, started_ms=self.journal.now_ms())
        self.epochs[epoch] = stats
        self.journal.batch.insert("epochs", (self.spec.name, epoch), stats.to_row(self.spec.name))
        self.journal.event(EventKind.EPOCH_STARTED, dataset=self.spec.name, epoch=epoch)

    def _save_epoch(self, stats: EpochStats) -> None:
        self.journal.touch(
            "epochs", (self.spec.name, stats.epoch), lambda: stats.to_row(self.spec.name)
        )

    def _order(self, epoch: int):
        order = self._orders.get(epoch)
        if order is None:
            self._orders = {epoch: self.spec.order(epoch)}  # only the frontier is needed
            order = self._orders[epoch]
        return order

    # ---- hand-out ---------------------------------------------------------------------------

    def take(self, worker_id: str, lease_id: int) -> Lease | None:
        """Lease the next piece of TODO to `worker_id`, or None when TODO is empty."""
        now = self.journal.now_ms()
        if self.front:
            piece = self.front.pop()
            self.front_by_epoch[piece.epoch] -= 1
            self.journal.batch.delete("pieces", piece.key)
            stats = self.epochs[piece.epoch]
            handout = piece.handouts + 1
            stats.records_rehanded += piece.end - piece.start
            if piece.redo:
                stats.records_redone += piece.end - piece.start
            if handout == 2:  # a shard has at most one piece out at a time: counted once
                stats.rehanded_shards += 1
            stats.max_handouts = max(stats.max_handouts, handout)
            epoch, index, start, end = piece.epoch, piece.index, piece.start, piece.end
            failures, errors, redo = piece.failures, piece.errors, piece.redo
        elif self.cursor < self.spec.num_shards:
            epoch, handout, failures, errors, redo = self.frontier, 1, 0, [], False
            index = self._order(epoch).index_at(self.cursor)
            start, end = self.spec.shard_range(index)
            self.cursor += 1
            self.open[(epoch, index)] = end - start
            stats = self.epochs[epoch]
            stats.max_handouts = max(stats.max_handouts, 1)
            if self.cursor == self.spec.num_shards and epoch + 1 < self.spec.num_epochs:
                # the epoch's TODO is empty: open the next one so nobody idles on stragglers
                self.frontier, self.cursor = epoch + 1, 0
                self._start_epoch(epoch + 1)
            self.journal.batch.update(
                "datasets", self.spec.name, dict(frontier=self.frontier, cursor=self.cursor)
            )
        else:
            return None
        stats.handouts += 1
        self._save_epoch(stats)
        lease = Lease(
            lease_id=lease_id, dataset=self.spec.name, epoch=epoch, index=index, start=start,
            end=end, worker_id=worker_id, handed_ms=now,
            deadline_ms=now + int(self.spec.lease_timeout * 1000), handout=handout,
            failures=failures, errors=list(errors), redo=redo,
            due=self.monotonic() + self.spec.lease_timeout,
        )
        self.leases[lease_id] = lease
        self.doing_by_epoch[epoch] += 1
        self.journal.batch.insert("leases", lease_id, lease.to_row())
        return lease

    @property
    def ended(self) -> bool:
        """No more work will ever come: every epoch handed out and nothing is leased."""
        return (
            not self.front
            and not self.leases
            and self.cursor >= self.spec.num_shards
            and self.frontier == self.spec.num_epochs - 1
        )

    # ---- lease outcomes ---------------------------------------------------------------------

    def progress(self, lease: Lease, records_done: int) -> None:
        if records_done > lease.records_done:
            lease.records_done = records_done
            self.journal.batch.update("leases", lease.lease_id, dict(records_done=records_done))

    def done(self, lease: Lease) -> None:
        self._drop_lease(lease)
        self._credit(lease, lease.size)
        self._end_lease(lease, LeaseState.DONE, "")

    def _drop_lease(self, lease: Lease) -> None:
        del self.leases[lease.lease_id]
        self.doing_by_epoch[lease.epoch] -= 1

    def requeue(self, lease: Lease, cause: str, *, failed: bool = False, error: str = "",
                exact: bool = False) -> None:
        """Take a lease back: credit its consumed part, return the rest to the front of TODO.

        Only a FAILED outcome (`failed`) spends the shard's failure budget; a worker that left,
        was lost or timed out did nothing wrong with this data. `exact`: the holder reported
        exactly what it trained (a graceful leave), so the remainder is untrained and handing
        it out again redoes nothing.
        """
        self._drop_lease(lease)
        cause = str(cause)
        consumed = lease.records_done
        self._credit(lease, consumed)
        self._end_lease(lease, LeaseState.FAILED if failed else LeaseState.REQUEUED, cause)
        stats = self.epochs[lease.epoch]
        stats.requeues[cause] = stats.requeues.get(cause, 0) + 1
        start = lease.start + consumed
        if start < lease.end:
            errors = ((lease.errors + [clean_message(error)])[-MAX_ERRORS_KEPT:] if failed
                      else lease.errors)
            piece = Piece(
                key=self._next_key(), epoch=lease.epoch, index=lease.index, start=start,
                end=lease.end, handouts=lease.handout,
                failures=lease.failures + (1 if failed else 0), errors=errors,
                redo=not exact,
            )
            if piece.failures >= self.max_shard_failures:
                piece.quarantined = True
                self.quarantine[piece.key] = piece
                stats.quarantined_shards += 1
                stats.quarantined_records += piece.end - piece.start
                self.journal.event(
                    EventKind.SHARD_QUARANTINED, worker_id=lease.worker_id, dataset=self.spec.name,
                    epoch=lease.epoch, shard_index=lease.index, cause=cause,
                    detail=f"after {piece.failures} failures: records [{start}, {lease.end}); "
                    f"last error: {clean_message(error[:200])}",
                )
            else:
                self.front.append(piece)
                self.front_by_epoch[piece.epoch] += 1
            self.journal.batch.insert("pieces", piece.key, piece.to_row(self.spec.name))
        self.journal.event(
            EventKind.LEASE_REQUEUED, worker_id=lease.worker_id, dataset=self.spec.name,
            epoch=lease.epoch, shard_index=lease.index, cause=cause,
            detail=f"lease {lease.lease_id} offset {consumed}: "
            f"[{lease.start}, {start}) done, [{start}, {lease.end}) back",
        )
        self._save_epoch(stats)
        self._check_finished(stats)

    def release_quarantine(self) -> int:
        """Put quarantined pieces back at the front of TODO, failure budgets reset.

        An epoch that had finished with quarantined records is unfinished again (finished
        false, finished_ms 0) until the released records are done; it then finishes anew with
        a second `epoch_finished` event. A dataset that had ended hands out work again.
        """
        released = sorted(self.quarantine.values(), key=lambda p: p.key)
        self.quarantine.clear()
        for piece in released:
            stats = self.epochs[piece.epoch]
            stats.quarantined_shards -= 1
            stats.quarantined_records -= piece.end - piece.start
            if stats.finished_ms:
                stats.finished_ms = 0
                self.oldest_unfinished = min(self.oldest_unfinished, stats.epoch)
            self._save_epoch(stats)
            self.journal.batch.delete("pieces", piece.key)
            piece.key, piece.quarantined, piece.failures = self._next_key(), False, 0
            piece.redo = True  # it was attempted (and failed) before
            self.front.append(piece)
            self.front_by_epoch[piece.epoch] += 1
            self.journal.batch.insert("pieces", piece.key, piece.to_row(self.spec.name))
            self.journal.event(
                EventKind.LEASE_REQUEUED, dataset=self.spec.name, epoch=piece.epoch,
                shard_index=piece.index, cause=Cause.QUARANTINE_RELEASED,
                detail=f"[{piece.start}, {piece.end}) back",
            )
        return len(released)

    def count_duplicate(self, epoch: int) -> None:
        stats = self.epochs.get(epoch)
        if stats is not None:
            stats.duplicates += 1
            self._save_epoch(stats)

    def _credit(self, lease: Lease, records: int) -> None:
        stats = self.epochs[lease.epoch]
        if records:
            stats.records_done += records
            key = (lease.epoch, lease.index)
            left = self.open[key] - records
            if left:
                self.open[key] = left
            else:
                del self.open[key]
                stats.shards_done += 1
        self._save_epoch(stats)
        self._check_finished(stats)

    def _end_lease(self, lease: Lease, state: LeaseState, cause: str) -> None:
        self.journal.batch.update(
            "leases", lease.lease_id,
            dict(state=str(state), cause=str(cause),
                 records_done=lease.size if state == LeaseState.DONE else lease.records_done,
                 ended_ms=self.journal.now_ms()),
        )

    def _check_finished(self, stats: EpochStats) -> None:
        if stats.finished_ms:
            return
        if stats.records_done + stats.quarantined_records < self.spec.num_records:
            return
        stats.finished_ms = self.journal.now_ms()
        self._save_epoch(stats)
        self._advance_unfinished()
        self.journal.event(
            EventKind.EPOCH_FINISHED, dataset=self.spec.name, epoch=stats.epoch,
            detail=f"{stats.records_done} records done, {stats.quarantined_shards} quarantined, "
            f"{stats.handouts} hand-outs",
        )

    # ---- views ----------------------------------------------------------------------------

    def todo_count(self, epoch: int) -> int:
        fresh = 0
        if epoch == self.frontier:
            fresh = self.spec.num_shards - self.cursor
        elif epoch > self.frontier:
            fresh = self.spec.num_shards
        return fresh + self.front_by_epoch[epoch]

    def doing_count(self, epoch: int) -> int:
        return self.doing_by_epoch[epoch]

    def _advance_unfinished(self) -> None:
        # amortised O(1): the pointer only moves back when a quarantine release reopens one
        while self.oldest_unfinished < self.spec.num_epochs:
            stats = self.epochs.get(self.oldest_unfinished)
            if stats is None or not stats.finished_ms:
                return
            self.oldest_unfinished += 1

    def current_epoch(self) -> int:
        """The oldest epoch not finished; num_epochs once every epoch is."""
        return self.oldest_unfinished
