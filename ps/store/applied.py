"""The applied-request table: each mutation (client_id, seq) takes effect at most once.

A client numbers its requests (`seq` grows) and repeats the same (client_id, seq) when it
retries after a lost reply. For each client the table keeps the last mutation it saw and the
answer given; a request with a seq at or below that is a duplicate and gets the stored answer
back (for the same seq) or a plain "superseded" answer (for an older one) without being
applied again. A retry that arrives while the first try is still being applied waits for it.

The table is bounded (least recently used clients are forgotten first) and goes into every
checkpoint, so the promise survives a PS restart for the mutations the checkpoint contains.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict

IN_PROGRESS_WAIT_S = 60.0


class _Entry:
    __slots__ = ("seq", "answer")

    def __init__(self, seq: int, answer: dict | None = None):
        self.seq = seq
        self.answer = answer  # None while the mutation is being applied


class Duplicate(Exception):
    """Raised by `begin` for a request already applied: `answer` is what to send back."""

    def __init__(self, answer: dict):
        super().__init__("duplicate request")
        self.answer = answer


class AppliedTable:
    def __init__(self, capacity: int = 100_000):
        self.capacity = capacity
        self._lock = threading.Lock()
        # a retry waiting for its first try waits on this (one for the table, not an Event
        # per entry: every mutation would build one and set it, for a wait that is rare)
        self._done = threading.Condition(self._lock)
        self._waiting = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.duplicates = 0

    def begin(self, client_id: str, seq: int) -> "_Entry | None":
        """Claim (client_id, seq) for applying; raise Duplicate if it was seen before.

        An empty client_id opts out (nothing is remembered, the request is always applied).
        """
        if not client_id:
            return None
        with self._lock:
            entry = self._entries.get(client_id)
            if entry is None or seq > entry.seq:
                new = _Entry(seq)
                self._entries[client_id] = new
                self._entries.move_to_end(client_id)
                self._evict()
                return new
            self.duplicates += 1
            if seq == entry.seq:
                self._wait(entry)
        if seq < entry.seq:
            raise Duplicate({"code": "OK", "message": f"request {seq} of client {client_id} "
                             f"was superseded by request {entry.seq}; not applied again"})
        if entry.answer is None:
            raise Duplicate({"code": "UNAVAILABLE", "reason": "UNAVAILABLE",
                             "message": f"request {seq} of client {client_id} is still being "
                             "applied; retry"})
        raise Duplicate(entry.answer)

    def _wait(self, entry: _Entry) -> None:
        """Under the lock: wait for `entry`'s first try to finish, IN_PROGRESS_WAIT_S at most."""
        deadline = time.monotonic() + IN_PROGRESS_WAIT_S
        self._waiting += 1
        try:
            while entry.answer is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._done.wait(left)
        finally:
            self._waiting -= 1

    def _set(self, entry: _Entry, answer: dict) -> None:
        """Under the lock."""
        entry.answer = answer
        if self._waiting:
            self._done.notify_all()

    def finish(self, entry: _Entry | None, answer: dict) -> None:
        if entry is None:
            return
        with self._lock:
            self._set(entry, answer)

    def abandon(self, client_id: str, entry: _Entry | None) -> None:
        """The claimed request failed before changing anything: forget the claim."""
        if entry is None:
            return
        with self._lock:
            if self._entries.get(client_id) is entry:
                del self._entries[client_id]
            self._set(entry, {"code": "UNAVAILABLE", "reason": "UNAVAILABLE",
                              "message": "the first try failed; retry"})

    def _evict(self) -> None:
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    # checkpoints -----------------------------------------------------------------------------

    def export(self) -> list[list]:
        """[client_id, seq, answer] of every finished entry, oldest first (call it under the
        store's exclusive gate, so no entry is half applied)."""
        with self._lock:
            return [[cid, e.seq, dict(e.answer)] for cid, e in self._entries.items()
                    if e.answer is not None]

    def restore(self, rows: list[list]) -> None:
        with self._lock:
            self._entries.clear()
            for cid, seq, answer in rows:
                self._entries[str(cid)] = _Entry(int(seq), dict(answer))
            self._evict()

    def seen(self, client_id: str, seq: int) -> bool:
        """Whether (client_id, seq) was applied here already, or superseded (a later seq was)."""
        if not client_id:
            return False
        with self._lock:
            entry = self._entries.get(client_id)
            return entry is not None and seq <= entry.seq

    def __len__(self) -> int:
        return len(self._entries)
