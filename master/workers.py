"""The worker registry: who is alive, what each holds, and who has gone quiet."""
from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

from rpckit.errors import Reason, not_found, quote
from .states import WorkerState

# Why a departed worker is gone, for the NOT_FOUND it gets when it calls again: kept for the
# newest departures only. Older ones still get NOT_FOUND (WORKER_GONE): worker ids are numbered
# in order, so an id below the next number was handed out and is simply gone.
MAX_GONE_KEPT = 10_000


@dataclass
class Worker:
    worker_id: str
    num: int
    name: str
    labels: dict[str, str]
    registered_ms: int
    last_seen: float  # monotonic seconds of the last call (wall-clock steps do not matter)
    last_seen_ms: int = 0  # the same call's wall-clock time, to show
    state: WorkerState = WorkerState.ALIVE
    leases: set[int] = field(default_factory=set)

    def to_row(self) -> dict:
        return dict(
            worker_id=self.worker_id, num=self.num, name=self.name,
            labels=json.dumps(self.labels, sort_keys=True), registered_ms=self.registered_ms,
            state=str(self.state), reason="", ended_ms=0,
        )


class WorkerRegistry:
    """Live workers in order of their last call, so finding the silent ones is O(1) each."""

    def __init__(self) -> None:
        self.alive: OrderedDict[str, Worker] = OrderedDict()
        self.gone: OrderedDict[str, str] = OrderedDict()  # worker_id -> why, newest last
        self.next_num = 1

    def add(self, worker: Worker) -> None:
        self.alive[worker.worker_id] = worker
        self.next_num = max(self.next_num, worker.num + 1)

    def find(self, worker_id: str) -> Worker:
        """The live worker `worker_id`; NOT_FOUND (WORKER_GONE) otherwise."""
        worker = self.alive.get(worker_id)
        if worker is None:
            why = self.gone.get(worker_id) or (
                "has left or was declared lost" if self._was_issued(worker_id) else "")
            if why:
                raise not_found(Reason.WORKER_GONE,
                                f"worker {quote(worker_id)} {why}; register again")
            raise not_found(Reason.WORKER_GONE, f"unknown worker {quote(worker_id)}; "
                            "register with RegisterWorker first")
        return worker

    def seen(self, worker: Worker, now: float, now_ms: int) -> None:
        worker.last_seen, worker.last_seen_ms = now, now_ms
        self.alive.move_to_end(worker.worker_id)

    def _was_issued(self, worker_id: str) -> bool:
        number = worker_id[2:] if worker_id.startswith("w-") else ""
        return number.isascii() and number.isdigit() and len(number) < 19 and 0 < int(number) < self.next_num

    def silent_since(self, deadline: float) -> list[Worker]:
        """Live workers whose last call was before `deadline`."""
        silent = []
        for worker in self.alive.values():
            if worker.last_seen >= deadline:
                break
            silent.append(worker)
        return silent

    def remove(self, worker: Worker, state: WorkerState, why: str) -> None:
        worker.state = state
        del self.alive[worker.worker_id]
        self.note_gone(worker.worker_id, why)

    def note_gone(self, worker_id: str, why: str) -> None:
        self.gone[worker_id] = why
        self.gone.move_to_end(worker_id)
        if len(self.gone) > MAX_GONE_KEPT:
            self.gone.popitem(last=False)
