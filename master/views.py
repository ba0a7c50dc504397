"""The status view: GetStatus's answer, from the core's counters, bounded in work and bytes.

Work: O(what is listed) under the lock, never a scan of every epoch, lease, quarantined piece
or worker (the queues keep per-epoch counts as things move). Bytes: the answer stays under
STATUS_BYTES (clients accept 4 MiB): epochs, quarantined pieces and a worker's leases are
listed up to small bounds, and datasets and workers until the byte budget is spent; what is
left out is counted in the `*_not_shown` fields.
"""
from __future__ import annotations

import heapq
from itertools import islice

from protos import master_pb2 as pb

from .convert import layout_to_pb, ps_to_pb, spec_to_pb, to_lease
from .core import MasterCore
from .ps.layout import resize_waits
from .datasets.shards import DatasetQueue, EpochStats
from .workers import Worker

STATUS_BYTES = 3 << 20
EPOCHS_SHOWN = 16
QUARANTINED_SHOWN = 32
LEASES_SHOWN = 16


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


def shown_epochs(queue: DatasetQueue, current: int) -> list[int]:
    """The current epoch and those after it that started, then the newest finished ones
    before it, EPOCHS_SHOWN at most, in order."""
    newest = queue.frontier
    high = min(newest, current + EPOCHS_SHOWN - 1)
    low = max(0, high - EPOCHS_SHOWN + 1)
    return [e for e in range(low, high + 1) if e in queue.epochs]


def dataset_view(queue: DatasetQueue) -> pb.DatasetStatus:
    spec = queue.spec
    current = queue.current_epoch()
    numbers = shown_epochs(queue, current)
    epochs = [epoch_view(queue, queue.epochs[e]) for e in numbers]
    shown = next((e for e in epochs if e.epoch == current), epochs[-1] if epochs else None)
    shown = shown or pb.EpochStatus()
    pieces = list(islice(queue.quarantine.values(), QUARANTINED_SHOWN))
    quarantined = [
        pb.QuarantinedShard(
            shard=pb.Shard(epoch=p.epoch, index=p.index, start=p.start, end=p.end),
            failures=p.failures, errors=p.errors,
        )
        for p in sorted(pieces, key=lambda p: (p.epoch, p.index))
    ]
    return pb.DatasetStatus(
        spec=spec_to_pb(spec), epoch=current, todo=shown.todo, doing=shown.doing,
        done=shown.done, records_done=shown.records_done, records_total=spec.num_records,
        handouts=shown.handouts, duplicates=shown.duplicates, requeues=shown.requeues,
        quarantined=quarantined, epochs=epochs, finished=current >= spec.num_epochs,
        epochs_not_shown=len(queue.epochs) - len(epochs),
        quarantined_not_shown=len(queue.quarantine) - len(quarantined),
    )


def worker_view(core: MasterCore, w: Worker) -> pb.WorkerStatus:
    return pb.WorkerStatus(
        worker_id=w.worker_id, name=w.name, labels=w.labels,
        last_heartbeat_ms=w.last_seen_ms, state=str(w.state),
        registered_ms=w.registered_ms, leases_held=len(w.leases),
        leases=[to_lease(core.leases[i]) for i in heapq.nsmallest(LEASES_SHOWN, w.leases)],
    )


def status_view(core: MasterCore, budget: int = STATUS_BYTES) -> pb.GetStatusResponse:
    now_ms = core.journal.now_ms()
    reply = pb.GetStatusResponse(
        ps=[ps_to_pb(core.ps[i], i in core.ps_lost, core.replicas, core.layout)
            for i in sorted(core.ps)],
        time_ms=now_ms, layout=layout_to_pb(core.layout, resize_waits(core.layout, core.ps_set.rows,
                                                            core.ps_lost)),
    )
    budget -= reply.ByteSize()
    for queue in core.datasets.values():
        view = dataset_view(queue)
        budget -= view.ByteSize() + 8
        if budget < 0:
            break
        reply.datasets.append(view)
    reply.datasets_not_shown = len(core.datasets) - len(reply.datasets)
    workers = []
    for worker in core.workers.alive.values():  # the longest silent first
        view = worker_view(core, worker)
        budget -= view.ByteSize() + 8
        if budget < 0:
            break
        workers.append(view)
    reply.workers.extend(sorted(workers, key=lambda w: int(w.worker_id[2:])))
    reply.workers_not_shown = len(core.workers.alive) - len(workers)
    return reply
