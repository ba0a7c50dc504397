"""The worker registry: who is alive, what each holds, and who has gone quiet."""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

from rpckit.errors import Reason, invalid, not_found

MAX_LABELS = 32
MAX_LABEL_LEN = 256
MAX_REASON_LEN = 64


@dataclass
class Worker:
    worker_id: str
    num: int
    name: str
    labels: dict[str, str]
    registered_ms: int
    last_seen: float  # clock seconds of the last call
    state: str = "alive"  # alive, left, lost
    leases: set[int] = field(default_factory=set)

    def to_row(self) -> dict:
        return dict(
            worker_id=self.worker_id, num=self.num, name=self.name,
            labels=json.dumps(self.labels, sort_keys=True), registered_ms=self.registered_ms,
            state=self.state, reason="", ended_ms=0,
        )


def check_labels(labels: dict[str, str]) -> None:
    if len(labels) > MAX_LABELS:
        raise invalid(f"{len(labels)} labels given; at most {MAX_LABELS} are kept")
    for key, value in labels.items():
        if not key or len(key) > 63:
            raise invalid(f"label key {key!r} must be 1-63 characters")
        if len(value) > MAX_LABEL_LEN:
            raise invalid(f"label {key!r} is {len(value)} characters; at most {MAX_LABEL_LEN}")


def check_reason(reason: str) -> str:
    reason = reason.strip() or "unspecified"
    if len(reason) > MAX_REASON_LEN or not all(c.isalnum() or c in "-_." for c in reason):
        raise invalid(
            f"leave reason {reason[:80]!r} must be up to {MAX_REASON_LEN} letters, digits or "
            "-_. (e.g. preempted, scaled-down, finished)"
        )
    return reason


class WorkerRegistry:
    """Live workers in order of their last call, so finding the silent ones is O(1) each."""

    def __init__(self) -> None:
        self.alive: OrderedDict[str, Worker] = OrderedDict()
        self.gone: dict[str, str] = {}  # worker_id -> why (left: reason / lost), this run only
        self.next_num = 1

    def add(self, worker: Worker) -> None:
        self.alive[worker.worker_id] = worker
        self.next_num = max(self.next_num, worker.num + 1)

    def get(self, worker_id: str, now: float) -> Worker:
        """The live worker `worker_id`, marked as seen now; NOT_FOUND otherwise."""
        worker = self.alive.get(worker_id)
        if worker is None:
            why = self.gone.get(worker_id)
            if why:
                raise not_found(Reason.WORKER_GONE, f"worker {worker_id!r} {why}; register again")
            raise not_found(Reason.WORKER_GONE, f"unknown worker {worker_id!r}; register with RegisterWorker first")
        worker.last_seen = now
        self.alive.move_to_end(worker_id)
        return worker

    def silent_since(self, deadline: float) -> list[Worker]:
        """Live workers whose last call was before `deadline`."""
        silent = []
        for worker in self.alive.values():
            if worker.last_seen >= deadline:
                break
            silent.append(worker)
        return silent

    def remove(self, worker: Worker, state: str, why: str) -> None:
        worker.state = state
        del self.alive[worker.worker_id]
        self.gone[worker.worker_id] = why
