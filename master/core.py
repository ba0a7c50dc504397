"""The master's decisions: routes each call to the worker registry and the dataset queues.

`MasterCore` is plain Python with injected clocks: no network, no database. Callers hold
one lock around every method, then commit the journal's batch before they answer (see
`master/persistence/committer.py`). It can be rebuilt from a store's `Snapshot`
(master/persistence/snapshot.py) after a restart. What its calls take and give back
(`Report`, `Result`, `ShardGrant`) is in master/calls.py.

Every method checks its whole request (master/limits.py) before it changes anything, so a
refused call leaves no trace; the committer also drops the journal changes of any call that
raises. Per-call work is bounded: no scan of all workers, leases, epochs or the database.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from rpckit.errors import Reason, already_exists, invalid, not_found, quote
from .calls import Report, Result, ShardGrant
from .datasets.shards import DatasetQueue, Lease
from .datasets.spec import DatasetSpec
from .limits import MAX_REPORTS, check_labels, check_name, check_reason, clean_message
from .persistence.journal import Journal
from .persistence.snapshot import Snapshot
from .ps.layout import PSLayout, Resized
from .ps.leases import PrimaryLeases
from .ps.registry import PSRegistration, PSRegistry
from .states import Cause, EventKind, Grant, Outcome, WorkerState
from .workers import Worker, WorkerRegistry

RECENT_ENDED = 1 << 16  # ended leases remembered in memory (dataset, epoch, worker)


@dataclass
class Settings:
    heartbeat_interval: float = 1.0
    worker_timeout: float = 3.0
    max_shard_failures: int = 3
    min_workers: int = 0
    max_wait: float = 0.0
    max_shards_per_call: int = 256
    max_leases_per_worker: int = 1024  # bounds a Heartbeat's answer and a worker's grab
    wait_retry_ms: int = 100
    ps_replicas: int = 0  # backups asked for per PS index (master/ps/replicas.py)
    ps_lease_s: float = 2.0  # a PS primary's lease (master/ps/leases.py)
    ps_slots: int = 1024  # hash slots of the PS layout, fixed for the job (master/ps/layout.py)


class MasterCore:
    def __init__(
        self,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        snapshot: Snapshot | None = None,
        monotonic: Callable[[], float] | None = None,
    ):
        """`clock` gives the wall-clock times that are stored and shown; `monotonic` drives
        every deadline (worker timeout, lease timeout, --max-wait), so a step of the wall
        clock (NTP) declares nobody lost. An injected `clock` drives both unless `monotonic`
        is given too, so a test's fake clock moves everything."""
        self.settings = settings or Settings()
        self.clock = clock
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self.started = self.monotonic()
        self.reset(snapshot or Snapshot())

    def reset(self, snap: Snapshot, cause: str = "") -> None:
        """(Re)build every in-memory structure from durable state: at start, and after a call
        broke in the middle (`cause` 'recovered'), so memory matches the database again."""
        self.journal = Journal(self.clock, snap.max_event_seq + 1)
        self.workers = WorkerRegistry()
        self.datasets: dict[str, DatasetQueue] = {}
        self.leases: dict[int, Lease] = {}
        # primary leases count from this (re)build: see master/ps/leases.py
        leases = PrimaryLeases(self.monotonic, self.settings.ps_lease_s) \
            if self.settings.ps_replicas else None
        # raises SlotsMismatch when the job's layout has another --ps-slots
        layout = PSLayout(self.journal, self.settings.ps_slots, snap.ps_layout,
                          snap.ps_slot_ranges, snap.ps_slot_moves)
        self.ps_set = PSRegistry(self.journal, self.settings.ps_replicas, snap.ps,
                                 snap.ps_generations, snap.ps_backups, leases, layout)
        self.recent_ended: OrderedDict[int, tuple[str, int, str]] = OrderedDict()
        self.next_lease_id = snap.max_lease_id + 1
        self._piece_key = snap.max_piece_key
        self._restore(snap, cause)
        # --min-workers holds the first hand-out only: once anything was handed out (before a
        # restart too) the gate stays open, and restored live workers count towards it
        self.gate_open = any(stats.handouts for queue in self.datasets.values()
                             for stats in queue.epochs.values())
        self._open_gate()

    # the PS registry, under the names the servicer and the PS monitor read
    @property
    def ps(self) -> dict[int, dict]:
        return self.ps_set.rows

    @property
    def ps_lost(self) -> set[int]:
        return self.ps_set.lost

    @property
    def replicas(self):
        return self.ps_set.replicas

    @property
    def layout(self) -> PSLayout:
        return self.ps_set.layout

    # ---- restore ----------------------------------------------------------------------------

    def _restore(self, snap: Snapshot, cause: str) -> None:
        now = self.monotonic()
        for row in snap.workers:
            if row["state"] == WorkerState.ALIVE:
                # a restarted master gives every worker a fresh timeout: those that do not
                # come back are declared lost as usual and their leases requeued
                self.workers.add(Worker(
                    worker_id=row["worker_id"], num=row["num"], name=row["name"],
                    labels=json.loads(row["labels"] or "{}"), registered_ms=row["registered_ms"],
                    last_seen=now, last_seen_ms=self.journal.now_ms(),
                ))
            else:
                self.workers.next_num = max(self.workers.next_num, row["num"] + 1)
                self.workers.note_gone(row["worker_id"], (
                    f"left ({row['reason']})" if row["state"] == WorkerState.LEFT
                    else "was declared lost"
                ))
        by_dataset: dict[str, dict[str, list]] = {}
        for kind in ("epochs", "pieces", "leases"):
            for row in getattr(snap, kind):
                by_dataset.setdefault(row["dataset"], {}).setdefault(kind, []).append(row)
        orphans = []
        for row in snap.datasets:
            spec = DatasetSpec(**{k: row[k] for k in DatasetSpec.__dataclass_fields__})
            queue = self._queue(spec)
            parts = by_dataset.get(spec.name, {})
            leases = [Lease.from_row(r) for r in sorted(parts.get("leases", []),
                                                         key=lambda r: r["lease_id"])]
            queue.restore(row, parts.get("epochs", []), parts.get("pieces", []), leases)
            for lease in leases:
                self.leases[lease.lease_id] = lease
                worker = self.workers.alive.get(lease.worker_id)
                if worker is None:
                    orphans.append(lease)
                else:
                    worker.leases.add(lease.lease_id)
        for lease in orphans:
            self._take_back(lease, Cause.LOST)
        was = cause or ("restarted" if snap.datasets or snap.workers or snap.ps else "fresh")
        self.journal.event(
            EventKind.MASTER_RECOVERED if cause else EventKind.MASTER_STARTED, cause=was,
            detail=f"{len(self.datasets)} datasets, {len(self.workers.alive)} workers, "
            f"{len(self.leases)} leases, {len(self.ps)} PS restored",
        )

    def _queue(self, spec: DatasetSpec) -> DatasetQueue:
        queue = DatasetQueue(spec, self.journal, self._next_piece_key,
                             self.settings.max_shard_failures, self.monotonic)
        self.datasets[spec.name] = queue
        return queue

    def _next_piece_key(self) -> int:
        self._piece_key += 1
        return self._piece_key

    # ---- workers ----------------------------------------------------------------------------

    def register_worker(self, name: str, labels: dict[str, str]) -> Worker:
        check_name("worker", name)
        check_labels(labels)
        num = self.workers.next_num
        worker = Worker(
            worker_id=f"w-{num}", num=num, name=name, labels=dict(labels),
            registered_ms=self.journal.now_ms(), last_seen=self.monotonic(),
            last_seen_ms=self.journal.now_ms(),
        )
        self.workers.add(worker)
        self.journal.batch.insert("workers", worker.worker_id, worker.to_row())
        self.journal.event(
            EventKind.WORKER_REGISTERED, worker_id=worker.worker_id,
            detail=json.dumps({"name": name, "labels": worker.labels}, sort_keys=True),
        )
        self._open_gate()
        return worker

    def heartbeat(self, worker_id: str, progress: list[Report]) -> tuple[list[Result], list[Lease]]:
        """Apply progress reports; answer with every lease the worker holds."""
        self._check_reports(progress)
        worker = self._caller(worker_id)
        results = self._apply_reports(worker, progress)
        return results, [self.leases[i] for i in sorted(worker.leases)]

    def leave_worker(self, worker_id: str, reason: str, reports: list[Report]) -> list[Result]:
        reason = check_reason(reason)
        self._check_reports(reports)
        worker = self._caller(worker_id)
        results = self._apply_reports(worker, reports)
        for lease_id in sorted(worker.leases):
            # the worker reported its progress with the leave: the remainders are untrained
            self._take_back(self.leases[lease_id], reason, exact=True)
        self._remove_worker(worker, WorkerState.LEFT, reason, f"left ({reason})")
        self.journal.event(EventKind.WORKER_LEFT, worker_id=worker_id, cause=reason,
                           detail=f"name={worker.name}")
        return results

    def _caller(self, worker_id: str) -> Worker:
        """The live worker making this call, marked as seen now (any call is a heartbeat)."""
        worker = self.workers.find(worker_id)
        self.workers.seen(worker, self.monotonic(), self.journal.now_ms())
        return worker

    def _remove_worker(self, worker: Worker, state: WorkerState, reason: str, why: str) -> None:
        self.workers.remove(worker, state, why)
        self.journal.batch.update(
            "workers", worker.worker_id,
            dict(state=str(state), reason=str(reason), ended_ms=self.journal.now_ms()),
        )

    def _open_gate(self) -> None:
        if not self.gate_open and len(self.workers.alive) >= self.settings.min_workers:
            self.gate_open = True

    # ---- datasets and shards ----------------------------------------------------------------

    def create_dataset(self, spec: DatasetSpec) -> DatasetSpec:
        spec.validate()
        queue = self.datasets.get(spec.name)
        if queue is not None:
            if queue.spec == spec:
                return queue.spec
            raise already_exists(
                Reason.DATASET_EXISTS,
                f"dataset {spec.name!r} already exists with "
                + ", ".join(queue.spec.differences(spec))
                + "; use a new name or the same spec"
            )
        self._queue(spec).create()
        self.journal.event(
            EventKind.DATASET_CREATED, dataset=spec.name,
            detail=f"{spec.num_records} records, {spec.num_shards} shards of {spec.shard_size}, "
            f"{spec.num_epochs} epochs, shuffle={spec.shuffle}",
        )
        return spec

    def get_shard(
        self, worker_id: str, dataset: str, max_shards: int, reports: list[Report]
    ) -> ShardGrant:
        if max_shards < 0:
            raise invalid(f"max_shards must be >= 0 (0 means 1), got {max_shards}")
        self._check_reports(reports)
        queue = self._dataset(dataset)
        worker = self._caller(worker_id)
        results = self._apply_reports(worker, reports)
        if not self.gate_open:
            if (self.settings.max_wait
                    and self.monotonic() - self.started >= self.settings.max_wait):
                self.gate_open = True
            else:
                return ShardGrant(Grant.WAIT, [], results, self.settings.wait_retry_ms)
        leases = []
        room = self.settings.max_leases_per_worker - len(worker.leases)
        for _ in range(min(max(max_shards, 1), self.settings.max_shards_per_call, room)):
            lease = queue.take(worker_id, self.next_lease_id)
            if lease is None:
                break
            self.next_lease_id += 1
            self.leases[lease.lease_id] = lease
            worker.leases.add(lease.lease_id)
            leases.append(lease)
        if leases:
            return ShardGrant(Grant.LEASED, leases, results)
        if queue.ended:
            return ShardGrant(Grant.END, [], results)
        # also when the worker holds max_leases_per_worker: it should finish some first
        return ShardGrant(Grant.WAIT, [], results, self.settings.wait_retry_ms)

    def report(self, worker_id: str, reports: list[Report]) -> list[Result]:
        self._check_reports(reports)
        worker = self._caller(worker_id)
        return self._apply_reports(worker, reports)

    def requeue_quarantined(self, dataset: str) -> int:
        return self._dataset(dataset).release_quarantine()

    def _dataset(self, name: str) -> DatasetQueue:
        queue = self.datasets.get(name)
        if queue is None:
            if not name:
                raise invalid("dataset name is empty")
            raise not_found(
                Reason.UNKNOWN_DATASET,
                f"unknown dataset {quote(name)}; create it first with CreateDataset "
                "(ElasticDataset does this for you)"
            )
        return queue

    @staticmethod
    def _check_reports(reports: list[Report]) -> None:
        if len(reports) > MAX_REPORTS:
            raise invalid(f"{len(reports)} reports in one call; send at most {MAX_REPORTS}")

    # ---- leases that ended ------------------------------------------------------------------
    # A report may name a lease that already ended (a duplicate). Lease ids are handed out in
    # order and never reused, so any id below `next_lease_id` that is not active has ended:
    # the core answers duplicate without asking the database. Only to count the duplicate in
    # its epoch does it need (dataset, epoch): remembered for recent endings, and for older
    # ones looked up by the servicer *outside* the lock (`unresolved` -> store ->
    # `remember_ended`). Never-issued ids cost nothing.

    def unresolved(self, reports: list[Report]) -> list[int]:
        """Ids of reports naming leases that ended and are not remembered (lock-free read)."""
        return [r.lease_id for r in reports
                if 0 < r.lease_id < self.next_lease_id and r.lease_id not in self.leases
                and r.lease_id not in self.recent_ended]

    def remember_ended(self, rows: list[dict]) -> None:
        for row in rows:
            if row["lease_id"] not in self.leases:
                self._remember(row["lease_id"], (row["dataset"], row["epoch"], row["worker_id"]))

    def _remember(self, lease_id: int, ended: tuple[str, int, str]) -> None:
        self.recent_ended[lease_id] = ended
        if len(self.recent_ended) > RECENT_ENDED:
            self.recent_ended.popitem(last=False)

    def _apply_reports(self, worker: Worker, reports: list[Report]) -> list[Result]:
        """Apply each report on its own: one bad report is refused alone, never the call."""
        return [self._apply_report(worker, r) for r in reports]

    def _apply_report(self, worker: Worker, r: Report) -> Result:
        lease = self.leases.get(r.lease_id)
        if lease is None:
            if not 0 < r.lease_id < self.next_lease_id:
                return Result(r.lease_id, False, False, f"unknown lease {r.lease_id}")
            ended = self.recent_ended.get(r.lease_id)
            queue = self.datasets.get(ended[0]) if ended else None
            if queue is not None:
                queue.count_duplicate(ended[1])
            return Result(
                r.lease_id, False, True,
                f"lease {r.lease_id} is no longer held (finished, or taken back and handed "
                "out again); nothing was counted",
            )
        if lease.worker_id != worker.worker_id:
            return Result(r.lease_id, False, False,
                          f"lease {r.lease_id} is held by worker {lease.worker_id}, "
                          f"not {worker.worker_id}")
        if r.outcome not in Outcome.__members__:
            return Result(r.lease_id, False, False,
                          f"outcome {quote(r.outcome)} is not one of DONE, FAILED, PROGRESS, "
                          "RELEASED")
        if not 0 <= r.records_done <= lease.size:
            return Result(r.lease_id, False, False,
                          f"records_done {r.records_done} is outside 0..{lease.size} "
                          f"for lease {r.lease_id}")
        queue = self.datasets[lease.dataset]
        if r.outcome == Outcome.PROGRESS:
            queue.progress(lease, r.records_done)
        elif r.outcome == Outcome.DONE:
            self._forget(lease)
            queue.done(lease)
        elif r.outcome == Outcome.RELEASED:  # no fault of the data: no failure counted
            queue.progress(lease, r.records_done)
            self._take_back(lease, Cause.RELEASED)
        else:
            queue.progress(lease, r.records_done)
            self._take_back(lease, Cause.FAILED, failed=True, error=clean_message(r.message))
        return Result(r.lease_id, True)

    def _forget(self, lease: Lease) -> None:
        del self.leases[lease.lease_id]
        worker = self.workers.alive.get(lease.worker_id)
        if worker is not None:
            worker.leases.discard(lease.lease_id)
        self._remember(lease.lease_id, (lease.dataset, lease.epoch, lease.worker_id))

    def _take_back(self, lease: Lease, cause: str, failed: bool = False, error: str = "",
                   exact: bool = False) -> None:
        self._forget(lease)
        self.datasets[lease.dataset].requeue(lease, cause, failed=failed, error=error,
                                             exact=exact)

    # ---- time -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Declare silent workers lost and take back leases past their deadline."""
        now = self.monotonic()
        for worker in self.workers.silent_since(now - self.settings.worker_timeout):
            for lease_id in sorted(worker.leases):
                self._take_back(self.leases[lease_id], Cause.LOST)
            self._remove_worker(worker, WorkerState.LOST, Cause.LOST, "was declared lost")
            self.journal.event(
                EventKind.WORKER_LOST, worker_id=worker.worker_id, cause=Cause.LOST,
                detail=f"no call for {now - worker.last_seen:.1f} s "
                f"(timeout {self.settings.worker_timeout} s)",
            )
        for queue in self.datasets.values():
            # a dataset's leases are in hand-out order and share one timeout, so the first
            # one is always the next to expire
            while queue.leases:
                lease = next(iter(queue.leases.values()))
                if lease.due > now:
                    break
                self._take_back(lease, Cause.TIMEOUT)

    # ---- parameter servers (master/ps/registry.py) -----------------------------------------

    def register_ps(self, address: str, data_address: str, index: int, num_ps: int,
                    data_public_key: str = "", instance: str = "") -> int:
        return self.join_ps(address, data_address, index, num_ps, data_public_key,
                            instance).incarnation

    def join_ps(self, address: str, data_address: str, index: int, num_ps: int,
                data_public_key: str = "", instance: str = "") -> PSRegistration:
        return self.ps_set.join(address, data_address, index, num_ps, data_public_key, instance)

    def mark_ps_lost(self, index: int, incarnation: int, why: str) -> bool:
        return self.ps_set.mark_lost(index, incarnation, why)

    def promote_ps(self, index: int, incarnation: int, why: str) -> bool:
        return self.ps_set.promote(index, incarnation, why)

    def report_replicas(self, index: int, generation: int, instance: str,
                        in_sync: list[str]) -> int:
        """The primary's in-sync backups; its answer also renews the primary's lease (the
        lease's length is `settings.ps_lease_s`)."""
        generation = self.replicas.report(index, generation, instance, in_sync)
        self.ps_set.grant_lease(index)
        return generation

    def lose_ps_backup(self, index: int, instance: str, why: str) -> bool:
        return self.replicas.lose_backup(index, instance, why)

    def list_ps(self) -> tuple[list[dict], int, bool]:
        return self.ps_set.listing()

    def resize_ps(self, num_ps: int) -> Resized:
        """`elastic-ctl resize-ps N`: the target PS count, its slot moves planned (durable
        once this call is answered). Allowed with no PS up."""
        return self.ps_set.layout.resize(num_ps)
