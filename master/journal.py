"""Where the core writes what it decided: the collecting batch, the event sequence and the clock."""
from __future__ import annotations

import time
from typing import Callable

from .batch import Batch


class Journal:
    def __init__(self, clock: Callable[[], float] = time.time, next_event_seq: int = 1):
        self.clock = clock
        self.batch = Batch()
        self.next_event_seq = next_event_seq
        # rows to serialise once per batch rather than at every change (hot counters)
        self._touched: dict[tuple, Callable[[], dict]] = {}

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def touch(self, table: str, key, row: Callable[[], dict]) -> None:
        """Update `table[key]` to `row()` as it is when the batch is handed over."""
        self._touched[(table, key)] = row

    def pending(self) -> bool:
        return bool(self._touched) or bool(self.batch)

    def swap(self) -> Batch:
        """Hand the collecting batch to the committer and start a fresh one."""
        for (table, key), row in self._touched.items():
            self.batch.update(table, key, row())
        self._touched.clear()
        batch, self.batch = self.batch, Batch()
        return batch

    def event(
        self,
        kind: str,
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
                kind=kind,
                worker_id=worker_id,
                dataset=dataset,
                epoch=epoch,
                shard_index=shard_index,
                cause=cause,
                detail=detail,
            )
        )
