"""Where the core writes what it decided: one call's changes, the collecting batch, the clock.

The core writes each call's changes into `batch` (that call's own). When the call returns,
`end_call` folds them into the collecting batch the committer will commit; when it raises,
`discard_call` drops them, so a refused or broken call leaves nothing behind to be committed
with the next batch. Hot counter rows are `touch`ed: serialised once at the end of the call
however often the call changed them.
"""
from __future__ import annotations

import time
from typing import Callable

from .batch import Batch
from ..states import EventKind


class Journal:
    def __init__(self, clock: Callable[[], float] = time.time, next_event_seq: int = 1):
        self.clock = clock
        self.batch = Batch()  # the current call's changes
        self._collected = Batch()  # finished calls' changes, not yet handed to the committer
        self.next_event_seq = next_event_seq
        self._call_seq = next_event_seq  # next_event_seq when the current call began
        self._touched: dict[tuple, Callable[[], dict]] = {}

    def now_ms(self) -> int:
        """Wall-clock Unix ms: what is stored and shown (deadlines run on a monotonic clock)."""
        return int(self.clock() * 1000)

    def touch(self, table: str, key, row: Callable[[], dict]) -> None:
        """Update `table[key]` to `row()` as it is when the current call ends."""
        self._touched[(table, key)] = row

    def begin_call(self) -> None:
        self._call_seq = self.next_event_seq

    def end_call(self) -> None:
        """Keep the current call's changes: they go out with the next commit."""
        if self._touched:
            for (table, key), row in self._touched.items():
                self.batch.update(table, key, row())
            self._touched.clear()
        if not self.batch:
            return
        if self._collected:
            self.batch.merge_into(self._collected)
            self.batch = Batch()
        else:
            self._collected, self.batch = self.batch, self._collected
        self._call_seq = self.next_event_seq

    def discard_call(self) -> None:
        """Drop the current call's changes, as if it had never run."""
        self.batch = Batch()
        self._touched.clear()
        self.next_event_seq = self._call_seq

    def pending(self) -> bool:
        return bool(self._collected) or bool(self.batch) or bool(self._touched)

    def swap(self) -> Batch:
        """Hand everything kept so far to the committer and start collecting afresh."""
        self.end_call()
        batch, self._collected = self._collected, Batch()
        return batch

    def event(
        self,
        kind: EventKind | str,
        *,
        worker_id: str = "",
        dataset: str = "",
        epoch: int = -1,
        shard_index: int = -1,
        cause: str = "",
        detail: str = "",
    ) -> None:
        seq = self.next_event_seq
        self.next_event_seq += 1
        self.batch.event(
            dict(
                seq=seq,
                time_ms=self.now_ms(),
                kind=str(kind),
                worker_id=worker_id,
                dataset=dataset,
                epoch=epoch,
                shard_index=shard_index,
                cause=str(cause),
                detail=detail,
            )
        )
