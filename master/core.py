"""The master's decisions: routes each call to the worker registry and the dataset queues.

`MasterCore` is plain Python with an injected clock: no network, no database. Callers hold
one lock around every method, then commit the journal's batch before they answer (see
`master/committer.py`). It can be rebuilt from a store's `Snapshot` after a restart.
"""
from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from rpckit.auth import is_curve_key
from rpckit.errors import Reason, already_exists, invalid, not_found, precondition
from .journal import Journal
from .ps_replicas import Join, Promotion, ReplicaSets, Role, check_instance
from .shards import DatasetQueue, Lease
from .spec import DatasetSpec, check_name
from .workers import Worker, WorkerRegistry, check_labels, check_reason

OUTCOMES = ("DONE", "FAILED", "PROGRESS")
RECENT_ENDED = 1 << 16


@dataclass
class Settings:
    heartbeat_interval: float = 1.0
    worker_timeout: float = 3.0
    max_shard_failures: int = 3
    min_workers: int = 0
    max_wait: float = 0.0
    max_shards_per_call: int = 256
    wait_retry_ms: int = 100
    ps_replicas: int = 0  # backups asked for per PS index (master/ps_replicas.py)


@dataclass
class Report:
    lease_id: int
    outcome: str  # DONE, FAILED, PROGRESS
    records_done: int = 0
    message: str = ""


@dataclass
class Result:
    lease_id: int
    accepted: bool
    duplicate: bool = False
    reason: str = ""


@dataclass
class Snapshot:
    """The durable state a store hands back at start-up."""

    datasets: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    leases: list[dict] = field(default_factory=list)  # active (state doing) only
    pieces: list[dict] = field(default_factory=list)
    workers: list[dict] = field(default_factory=list)
    ps: list[dict] = field(default_factory=list)
    ps_generations: list[dict] = field(default_factory=list)
    ps_backups: list[dict] = field(default_factory=list)
    max_lease_id: int = 0
    max_piece_key: int = 0
    max_event_seq: int = 0


@dataclass
class PSRegistration:
    incarnation: int
    role: Role
    generation: int
    primary: dict  # the index's primary row (this PS's own when role is primary)


@dataclass
class ShardGrant:
    status: str  # LEASED, WAIT, END
    leases: list[Lease]
    results: list[Result]
    retry_after_ms: int = 0


class MasterCore:
    def __init__(
        self,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        snapshot: Snapshot | None = None,
        lookup_lease: Callable[[int], dict | None] = lambda lease_id: None,
    ):
        self.settings = settings or Settings()
        self.clock = clock
        snapshot = snapshot or Snapshot()
        self.journal = Journal(clock, snapshot.max_event_seq + 1)
        self.lookup_lease = lookup_lease  # finds leases that ended before this run
        self.workers = WorkerRegistry()
        self.datasets: dict[str, DatasetQueue] = {}
        self.leases: dict[int, Lease] = {}
        self.ps: dict[int, dict] = {}
        self.ps_lost: set[int] = set()  # this run's view; every PS is presumed alive at start
        self.replicas = ReplicaSets(self.journal, self.settings.ps_replicas,
                                    snapshot.ps_generations, snapshot.ps_backups)
        self.recent_ended: OrderedDict[int, tuple[str, int, str]] = OrderedDict()
        self.next_lease_id = snapshot.max_lease_id + 1
        self._piece_key = snapshot.max_piece_key
        self.started = clock()
        self.gate_open = self.settings.min_workers <= 0
        self._restore(snapshot)

    # ---- restore ----------------------------------------------------------------------------

    def _restore(self, snap: Snapshot) -> None:
        now = self.clock()
        for row in snap.workers:
            if row["state"] == "alive":
                # a restarted master gives every worker a fresh timeout: those that do not
                # come back are declared lost as usual and their leases requeued
                self.workers.add(Worker(
                    worker_id=row["worker_id"], num=row["num"], name=row["name"],
                    labels=json.loads(row["labels"] or "{}"), registered_ms=row["registered_ms"],
                    last_seen=now,
                ))
            else:
                self.workers.next_num = max(self.workers.next_num, row["num"] + 1)
                self.workers.gone[row["worker_id"]] = (
                    f"left ({row['reason']})" if row["state"] == "left" else "was declared lost"
                )
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
        for row in snap.ps:
            self.ps[row["idx"]] = dict(row)
        for lease in orphans:
            self._take_back(lease, "lost")
        was = "restarted" if snap.datasets or snap.workers or snap.ps else "fresh"
        self.journal.event(
            "master_started", cause=was,
            detail=f"{len(self.datasets)} datasets, {len(self.workers.alive)} workers, "
            f"{len(self.leases)} leases, {len(self.ps)} PS restored",
        )

    def _queue(self, spec: DatasetSpec) -> DatasetQueue:
        queue = DatasetQueue(spec, self.journal, self._next_piece_key,
                             self.settings.max_shard_failures)
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
            registered_ms=self.journal.now_ms(), last_seen=self.clock(),
        )
        self.workers.add(worker)
        self.journal.batch.insert("workers", worker.worker_id, worker.to_row())
        self.journal.event(
            "worker_registered", worker_id=worker.worker_id,
            detail=json.dumps({"name": name, "labels": worker.labels}, sort_keys=True),
        )
        self._open_gate()
        return worker

    def heartbeat(self, worker_id: str, progress: list[Report]) -> tuple[list[Result], list[Lease]]:
        """Apply progress reports; answer with every lease the worker holds."""
        worker = self.workers.get(worker_id, self.clock())
        self._check_reports(progress)
        results = self._apply_reports(worker, progress)
        return results, [self.leases[i] for i in sorted(worker.leases)]

    def leave_worker(self, worker_id: str, reason: str, reports: list[Report]) -> list[Result]:
        worker = self.workers.get(worker_id, self.clock())
        reason = check_reason(reason)
        self._check_reports(reports)
        results = self._apply_reports(worker, reports)
        for lease_id in sorted(worker.leases):
            # the worker reported its progress with the leave: the remainders are untrained
            self._take_back(self.leases[lease_id], reason, exact=True)
        self._remove_worker(worker, "left", reason, f"left ({reason})")
        self.journal.event("worker_left", worker_id=worker_id, cause=reason,
                           detail=f"name={worker.name}")
        return results

    def _remove_worker(self, worker: Worker, state: str, reason: str, why: str) -> None:
        self.workers.remove(worker, state, why)
        self.journal.batch.update(
            "workers", worker.worker_id,
            dict(state=state, reason=reason, ended_ms=self.journal.now_ms()),
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
            "dataset_created", dataset=spec.name,
            detail=f"{spec.num_records} records, {spec.num_shards} shards of {spec.shard_size}, "
            f"{spec.num_epochs} epochs, shuffle={spec.shuffle}",
        )
        return spec

    def get_shard(
        self, worker_id: str, dataset: str, max_shards: int, reports: list[Report]
    ) -> ShardGrant:
        worker = self.workers.get(worker_id, self.clock())
        queue = self._dataset(dataset)
        if max_shards < 0:
            raise invalid(f"max_shards must be >= 0 (0 means 1), got {max_shards}")
        self._check_reports(reports)
        results = self._apply_reports(worker, reports)
        if not self.gate_open:
            if self.settings.max_wait and self.clock() - self.started >= self.settings.max_wait:
                self.gate_open = True
            else:
                return ShardGrant("WAIT", [], results, self.settings.wait_retry_ms)
        leases = []
        for _ in range(min(max(max_shards, 1), self.settings.max_shards_per_call)):
            lease = queue.take(worker_id, self.next_lease_id)
            if lease is None:
                break
            self.next_lease_id += 1
            self.leases[lease.lease_id] = lease
            worker.leases.add(lease.lease_id)
            leases.append(lease)
        if leases:
            return ShardGrant("LEASED", leases, results)
        if queue.ended:
            return ShardGrant("END", [], results)
        return ShardGrant("WAIT", [], results, self.settings.wait_retry_ms)

    def report(self, worker_id: str, reports: list[Report]) -> list[Result]:
        worker = self.workers.get(worker_id, self.clock())
        self._check_reports(reports)
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
                f"unknown dataset {name!r}; create it first with CreateDataset "
                "(ElasticDataset does this for you)"
            )
        return queue

    @staticmethod
    def _check_reports(reports: list[Report]) -> None:
        if len(reports) > 4096:
            raise invalid(f"{len(reports)} reports in one call; send at most 4096")

    def _apply_reports(self, worker: Worker, reports: list[Report]) -> list[Result]:
        """Apply each report on its own: one bad report is refused alone, never the call."""
        return [self._apply_report(worker, r) for r in reports]

    def _apply_report(self, worker: Worker, r: Report) -> Result:
        lease = self.leases.get(r.lease_id)
        if lease is None:
            ended = self.recent_ended.get(r.lease_id)
            if ended is None:
                row = self.lookup_lease(r.lease_id)
                if row is not None:
                    ended = (row["dataset"], row["epoch"], row["worker_id"])
            if ended is None:
                return Result(r.lease_id, False, False, f"unknown lease {r.lease_id}")
            dataset, epoch, _ = ended
            queue = self.datasets.get(dataset)
            if queue is not None:
                queue.count_duplicate(epoch)
            return Result(
                r.lease_id, False, True,
                f"lease {r.lease_id} is no longer held (finished, or taken back and handed "
                "out again); nothing was counted",
            )
        if lease.worker_id != worker.worker_id:
            return Result(r.lease_id, False, False,
                          f"lease {r.lease_id} is held by worker {lease.worker_id}, "
                          f"not {worker.worker_id}")
        if r.outcome not in OUTCOMES:
            return Result(r.lease_id, False, False,
                          f"outcome {r.outcome!r} is not one of DONE, FAILED, PROGRESS")
        if not 0 <= r.records_done <= lease.size:
            return Result(r.lease_id, False, False,
                          f"records_done {r.records_done} is outside 0..{lease.size} "
                          f"for lease {r.lease_id}")
        queue = self.datasets[lease.dataset]
        if r.outcome == "PROGRESS":
            queue.progress(lease, r.records_done)
        elif r.outcome == "DONE":
            self._forget(lease)
            queue.done(lease)
        else:
            queue.progress(lease, r.records_done)
            self._take_back(lease, "failed", failed=True, error=r.message)
        return Result(r.lease_id, True)

    def _forget(self, lease: Lease) -> None:
        del self.leases[lease.lease_id]
        worker = self.workers.alive.get(lease.worker_id)
        if worker is not None:
            worker.leases.discard(lease.lease_id)
        self.recent_ended[lease.lease_id] = (lease.dataset, lease.epoch, lease.worker_id)
        if len(self.recent_ended) > RECENT_ENDED:
            self.recent_ended.popitem(last=False)

    def _take_back(self, lease: Lease, cause: str, failed: bool = False, error: str = "",
                   exact: bool = False) -> None:
        self._forget(lease)
        self.datasets[lease.dataset].requeue(lease, cause, failed=failed, error=error,
                                             exact=exact)

    # ---- time -------------------------------------------------------------------------------

    def tick(self) -> None:
        """Declare silent workers lost and take back leases past their deadline."""
        now = self.clock()
        for worker in self.workers.silent_since(now - self.settings.worker_timeout):
            for lease_id in sorted(worker.leases):
                self._take_back(self.leases[lease_id], "lost")
            self._remove_worker(worker, "lost", "lost", "was declared lost")
            self.journal.event(
                "worker_lost", worker_id=worker.worker_id, cause="lost",
                detail=f"no call for {now - worker.last_seen:.1f} s "
                f"(timeout {self.settings.worker_timeout} s)",
            )
        now_ms = self.journal.now_ms()
        for queue in self.datasets.values():
            # a dataset's leases are in hand-out order and share one timeout, so the first
            # one is always the next to expire
            while queue.leases:
                lease = next(iter(queue.leases.values()))
                if lease.deadline_ms > now_ms:
                    break
                self._take_back(lease, "timeout")

    # ---- parameter servers ------------------------------------------------------------------

    def register_ps(self, address: str, data_address: str, index: int, num_ps: int,
                    data_public_key: str = "", instance: str = "") -> int:
        return self.join_ps(address, data_address, index, num_ps, data_public_key,
                            instance).incarnation

    def join_ps(self, address: str, data_address: str, index: int, num_ps: int,
                data_public_key: str = "", instance: str = "") -> PSRegistration:
        """Register a PS process: as its index's primary, or (--ps-replicas) as a backup."""
        if not address or len(address) > 256 or len(data_address) > 256:
            raise invalid("PS address must be 1-256 characters (host:port)")
        if data_public_key and not is_curve_key(data_public_key):
            raise invalid("data_public_key must be a CURVE public key: 40 Z85 characters")
        if not 0 < num_ps <= 4096:
            raise invalid(f"num_ps must be in 1..4096, got {num_ps}")
        if not 0 <= index < num_ps:
            raise invalid(f"PS index {index} is outside 0..{num_ps - 1}")
        for other in self.ps.values():
            if other["num_ps"] != num_ps:
                raise precondition(
                    Reason.PS_SET_MISMATCH,
                    f"the PS set has num_ps={other['num_ps']} (PS {other['idx']} registered "
                    f"so); start this PS with --num-ps {other['num_ps']}"
                )
        check_instance(instance)
        previous = self.ps.get(index)
        join = self.replicas.decide(index, instance, address, previous, index in self.ps_lost)
        if join == Join.PROMOTE_THEN_BACKUP:
            # its old process is gone: an in-sync backup takes over and it follows that one
            promotion = self.replicas.promote(index, "restarted")
            self._promote(promotion)
            previous = self.ps[index]
            join = Join.BACKUP if promotion else Join.PRIMARY
        if join == Join.BACKUP:
            self.replicas.add_backup(index, instance, address, data_address, data_public_key)
            return PSRegistration(previous["incarnation"], Role.BACKUP,
                                  self.replicas.generation(index), previous)
        return PSRegistration(
            self._register_primary(address, data_address, index, num_ps, data_public_key),
            Role.PRIMARY, self.replicas.set_primary(index, instance), self.ps[index])

    def _register_primary(self, address: str, data_address: str, index: int, num_ps: int,
                          data_public_key: str = "") -> int:
        previous = self.ps.get(index)
        row = dict(
            idx=index, address=address, data_address=data_address, num_ps=num_ps,
            data_public_key=data_public_key,
            registered_ms=self.journal.now_ms(),
            incarnation=(previous["incarnation"] + 1) if previous else 1,
        )
        self.ps[index] = row
        self.ps_lost.discard(index)
        if previous:
            self.journal.batch.update("ps", index, row)
        else:
            self.journal.batch.insert("ps", index, row)
        self.journal.event(
            "ps_registered", cause="again" if previous else "new",
            detail=f"ps {index}/{num_ps} at {address} data {data_address} "
            f"incarnation {row['incarnation']}",
        )
        return row["incarnation"]

    def mark_ps_lost(self, index: int, incarnation: int, why: str) -> bool:
        """Record that PS `index` stopped answering; a no-op if it registered again since."""
        row = self.ps.get(index)
        if row is None or row["incarnation"] != incarnation or index in self.ps_lost:
            return False
        self.ps_lost.add(index)
        self.journal.event("ps_lost", cause="health_check",
                           detail=f"ps {index} at {row['address']}: {why}")
        # no backup in sync (or it would have been promoted sooner): the best one left serves
        self._promote(self.replicas.promote(index, "in_sync", allow_syncing=True))
        return True

    def promote_ps(self, index: int, incarnation: int, why: str) -> bool:
        """The primary of `index` (this incarnation) is failing: promote an in-sync backup."""
        row = self.ps.get(index)
        if row is None or row["incarnation"] != incarnation or index in self.ps_lost:
            return False
        promotion = self.replicas.promote(index, "in_sync")
        if promotion is None:
            return False
        self.journal.event("ps_lost", cause="failover",
                           detail=f"ps {index} at {row['address']}: {why}")
        self._promote(promotion)
        return True

    def _promote(self, promotion: Promotion | None) -> None:
        if promotion is None:
            return
        b = promotion.backup
        self._register_primary(b["address"], b["data_address"], promotion.index,
                               self.ps[promotion.index]["num_ps"], b["data_public_key"])

    def report_replicas(self, index: int, generation: int, instance: str,
                        in_sync: list[str]) -> int:
        return self.replicas.report(index, generation, instance, in_sync)

    def lose_ps_backup(self, index: int, instance: str, why: str) -> bool:
        return self.replicas.lose_backup(index, instance, why)

    def list_ps(self) -> tuple[list[dict], int, bool]:
        rows = [self.ps[i] for i in sorted(self.ps)]
        num_ps = rows[0]["num_ps"] if rows else 0
        return rows, num_ps, num_ps > 0 and len(rows) == num_ps
