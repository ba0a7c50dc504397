"""The process-wide acknowledgement ledger: which delivered records have been trained.

THE ACK RULE. A record counts as trained, and is reported to the master (as PROGRESS offsets or
a lease's DONE), only after the training step that consumed it has finished:

* A record is *delivered* when the SDK hands it to the training loop: returned from the sample
  iterator (to your loop or to a `DataLoader(num_workers=0)` building a batch), or as part of a
  batch from `ElasticDataset.batches()`. Samples read ahead inside the SDK are not delivered.
* A delivered record becomes *trained* when the SDK is told its step finished:
  - `trained()` below, which `PSClient.push` calls after a successful push, and which
    `ElasticDataset.mark_trained()` calls for one dataset; it acknowledges every record
    delivered before the call (or before `mark`, see `mark()`);
  - in the "next" ack mode (a plain synchronous loop, no PSClient), when the loop asks for the
    next step's data: a synchronous loop has finished its step by then.
* Records are delivered and trained in order, so what a lease has trained is always a prefix
  of it: the offset `records_done` the master keeps.

Each ElasticDataset keeps its own table of leases (`worker_sdk.data.leases.LeaseTable`) and registers
it here; the ledger only numbers deliveries process-wide (so a mark covers every dataset) and
fans `trained()` out to the tables. Thread-safe.
"""
from __future__ import annotations

import threading
import weakref
from typing import Protocol


class _Table(Protocol):
    def mark_trained(self, upto: int | None = None) -> int: ...

    def fail_in_flight(self, message: str, released: bool = False) -> int: ...


class AckLedger:
    """Which delivered records were trained, over the lease tables registered with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: "weakref.WeakSet[_Table]" = weakref.WeakSet()
        # the same tables as weak references, remade when one registers or leaves: iterating a
        # WeakSet is Python code (about 25 us, and `trained` runs once a training step); a
        # table that was collected since answers None and is skipped
        self._refs: tuple = ()
        self._flushers: "weakref.WeakSet" = weakref.WeakSet()  # PSClients with pushes in flight
        self._delivered = 0  # records delivered so far: the next delivery's sequence number
        self._push_acks = False

    def trained(self, mark: int | None = None) -> int:
        """Acknowledge delivered records as trained; returns how many were newly acknowledged.

        With no argument, every record delivered so far (in every table of this ledger). With
        `mark` (from `mark()`), only the records delivered before that mark: an asynchronous
        pusher takes a mark when it captures a step's gradients and passes it once the push
        is done."""
        newly = 0
        for ref in self._refs:  # a tuple, replaced whole: read without the lock
            table = ref()
            if table is not None:
                newly += table.mark_trained(mark)
        return newly

    def mark(self) -> int:
        """The delivery position now: `trained(mark())` later acknowledges exactly what was
        delivered up to this moment, not what the loop fetched after it."""
        with self._lock:
            return self._delivered

    def abandon(self, message: str, released: bool = False) -> int:
        """A push failed: the records in flight (delivered, not acknowledged) will never be
        acknowledged. Their leases go back to the master with what was trained before, so a
        later push cannot acknowledge them by its mark: FAILED, or with `released` RELEASED
        (the push was refused as stale or no PS answered it: no fault of the data, so it
        never spends a shard's failure budget). Returns how many leases were handed back."""
        with self._lock:
            tables = list(self._tables)
        return sum(table.fail_in_flight(message, released=released) for table in tables)

    def register_flusher(self, owner) -> None:
        """`owner.flush(timeout_s)` waits for its pushes in flight (a PSClient registers)."""
        with self._lock:
            self._flushers.add(owner)

    def flushers(self) -> list:
        with self._lock:
            return list(self._flushers)

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait for every push in flight to be answered (and so acknowledged, or failed): at
        the tail of a pass, before closing, before handing leases back on SIGTERM."""
        for owner in self.flushers():
            try:
                owner.flush(timeout_s)
            except Exception:  # noqa: BLE001 - the failure is raised at the owner's next call
                pass

    def use_push_acks(self, enabled: bool = True) -> None:
        """Declare that records are acknowledged by pushes (PSClient calls this).

        ElasticDatasets in ack mode "auto" then wait for `trained()` instead of acknowledging
        a step when the loop asks for the next one."""
        with self._lock:
            self._push_acks = enabled

    def push_acks_enabled(self) -> bool:
        return self._push_acks

    # -- for ElasticDataset's lease tables -------------------------------------------------

    def register(self, table: _Table) -> None:
        with self._lock:
            self._tables.add(table)
            self._refs = tuple(weakref.ref(t) for t in self._tables)

    def unregister(self, table: _Table) -> None:
        with self._lock:
            self._tables.discard(table)
            self._refs = tuple(weakref.ref(t) for t in self._tables)

    def take_sequence(self, n: int) -> int:
        """Reserve `n` consecutive delivery sequence numbers; returns the first."""
        with self._lock:
            first = self._delivered
            self._delivered += n
            return first


LEDGER = AckLedger()  # the process's ledger: the default of every dataset and PSClient

trained = LEDGER.trained
mark = LEDGER.mark
abandon = LEDGER.abandon
register_flusher = LEDGER.register_flusher
flush = LEDGER.flush
use_push_acks = LEDGER.use_push_acks
push_acks_enabled = LEDGER.push_acks_enabled
register = LEDGER.register
unregister = LEDGER.unregister
take_sequence = LEDGER.take_sequence
