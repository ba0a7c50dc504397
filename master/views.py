"""The status view: GetStatus's answer, computed from the core's counters (no scan of shards)."""
from __future__ import annotations

from protos import master_pb2 as pb

from .convert import ps_to_pb, spec_to_pb, to_lease
from .core import MasterCore
from .shards import DatasetQueue, EpochStats


def epoch_view(queue: DatasetQueue, stats: EpochStats) -> pb.EpochStatus:
    return pb.EpochStatus(
        epoch=stats.epoch, todo=queue.todo_count(stats.epoch),
        doing=queue.doing_count(stats.epoch), done=stats.shards_done,
        records_done=stats.records_done, records_total=queue.spec.num_records,
        handouts=stats.handouts, duplicates=stats.duplicates, requeues=stats.requeues,
        records_redone=stats.records_redone, records_rehanded=stats.records_rehanded,
        quarantined=stats.quarantined_shards,
        finished=bool(stats.finished_ms), rehanded_shards=stats.rehanded_shards,
        max_handouts=stats.max_handouts,
    )


def dataset_view(queue: DatasetQueue) -> pb.DatasetStatus:
    spec = queue.spec
    epochs = [epoch_view(queue, queue.epochs[e]) for e in sorted(queue.epochs)]
    current = queue.current_epoch()
    shown = epochs[min(current, len(epochs) - 1)] if epochs else pb.EpochStatus()
    quarantined = [
        pb.QuarantinedShard(
            shard=pb.Shard(epoch=p.epoch, index=p.index, start=p.start, end=p.end),
            failures=p.failures, errors=p.errors,
        )
        for p in sorted(queue.quarantine.values(), key=lambda p: (p.epoch, p.index))
    ]
    return pb.DatasetStatus(
        spec=spec_to_pb(spec), epoch=current, todo=shown.todo, doing=shown.doing,
        done=shown.done, records_done=shown.records_done, records_total=spec.num_records,
        handouts=shown.handouts, duplicates=shown.duplicates, requeues=shown.requeues,
        quarantined=quarantined, epochs=epochs, finished=current >= spec.num_epochs,
    )


def status_view(core: MasterCore) -> pb.GetStatusResponse:
    workers = [
        pb.WorkerStatus(
            worker_id=w.worker_id, name=w.name, labels=w.labels,
            last_heartbeat_ms=int(w.last_seen * 1000), state=w.state,
            registered_ms=w.registered_ms,
            leases=[to_lease(core.leases[i]) for i in sorted(w.leases)],
        )
        for w in sorted(core.workers.alive.values(), key=lambda w: w.num)
    ]
    return pb.GetStatusResponse(
        datasets=[dataset_view(core.datasets[n]) for n in sorted(core.datasets)],
        workers=workers,
        ps=[ps_to_pb(core.ps[i], i in core.ps_lost, core.replicas) for i in sorted(core.ps)],
        time_ms=core.journal.now_ms(),
    )
