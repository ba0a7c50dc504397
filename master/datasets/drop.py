"""Dropping a dataset (`DropDataset`, `elastic-ctl drop`): the decision on the core.

Datasets of failed attempts, or finished ones to run again under the same name, would stay in
`status` forever otherwise. A drop forgets the spec, every epoch's counters, the quarantine and
the lease history (so the ledger no longer counts it); the events stay, the timeline is
history. It is refused while leases of the dataset are out (their workers are training it),
unless forced: then those leases end with it, and a worker's later report of one is answered
as a duplicate and counted nowhere. A worker still running on a force-dropped dataset will
create it again from its spec at its next GetShard (the SDK does that for an unknown dataset),
starting over from epoch 0: stop the workers first.

Runs under the committer's lock like every core call; the drop is durable when the call is
answered (the journal's batch deletes the rows, master/persistence/batch.py `drop_dataset`).
"""
from __future__ import annotations

from dataclasses import dataclass

from rpckit.errors import Reason, precondition, quote

from ..core import MasterCore
from ..states import EventKind


@dataclass
class Dropped:
    leases_ended: int
    epochs: int
    finished: bool


def drop_dataset(core: MasterCore, name: str, force: bool) -> Dropped:
    queue = core._dataset(name)  # NOT_FOUND (UNKNOWN_DATASET) for an unknown name
    leases = list(queue.leases.values())
    if leases and not force:
        workers = sorted({lease.worker_id for lease in leases})
        raise precondition(
            Reason.DATASET_BUSY,
            f"dataset {quote(name)} has {len(leases)} leases out (workers "
            f"{', '.join(workers[:5])}{', ...' if len(workers) > 5 else ''}); stop its "
            "workers first, or drop it anyway with --force (force=true)")
    for lease in leases:
        core.leases.pop(lease.lease_id, None)
        worker = core.workers.alive.get(lease.worker_id)
        if worker is not None:
            worker.leases.discard(lease.lease_id)
    # ended leases of this dataset are no longer counted anywhere, not even as duplicates
    # (a dataset created again under the name must not inherit them): bounded by
    # RECENT_ENDED, and a drop is rare
    for lease_id in [i for i, ended in core.recent_ended.items() if ended[0] == name]:
        del core.recent_ended[lease_id]
    finished = queue.current_epoch() >= queue.spec.num_epochs
    epochs = len(queue.epochs)
    del core.datasets[name]
    core.journal.batch.drop_dataset(name)
    core.journal.event(
        EventKind.DATASET_DROPPED, dataset=name, cause="forced" if leases else "",
        detail=f"{epochs} epochs started, finished={finished}, {len(leases)} leases ended",
    )
    return Dropped(leases_ended=len(leases), epochs=epochs, finished=finished)
