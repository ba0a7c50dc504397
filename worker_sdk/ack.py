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

Each ElasticDataset keeps its own table of leases (`worker_sdk.leases.LeaseTable`) and registers
it here; the ledger only numbers deliveries process-wide (so a mark covers every dataset) and
fans `trained()` out to the tables. Thread-safe.
"""
from __future__ import annotations

import threading
import weakref
from typing import Protocol


class _Table(Protocol):
    def mark_trained(self, upto: int | None = None) -> int: ...

    def fail_in_flight(self, message: str) -> int: ...


_lock = threading.Lock()
_tables: "weakref.WeakSet[_Table]" = weakref.WeakSet()
_flushers: "weakref.WeakSet" = weakref.WeakSet()  # PSClients with pushes in flight
_delivered = 0  # records delivered in this process so far: the next delivery's sequence number
_push_acks = False


def trained(mark: int | None = None) -> int:
    """Acknowledge delivered records as trained; returns how many were newly acknowledged.

    With no argument, every record delivered so far (in every ElasticDataset of the process).
    With `mark` (from `mark()`), only the records delivered before that mark: an asynchronous
    pusher takes a mark when it captures a step's gradients and passes it once the push is done.
    """
    with _lock:
        tables = list(_tables)
    return sum(table.mark_trained(mark) for table in tables)


def mark() -> int:
    """The delivery position now: `trained(mark())` later acknowledges exactly what was
    delivered up to this moment, not what the loop fetched after it."""
    with _lock:
        return _delivered


def abandon(message: str) -> int:
    """A push failed: the records in flight (delivered, not acknowledged) will never be
    acknowledged. Their leases are reported FAILED with what was trained before, so a later
    push cannot acknowledge them by its mark. Returns how many leases were failed."""
    with _lock:
        tables = list(_tables)
    return sum(table.fail_in_flight(message) for table in tables)


def register_flusher(owner) -> None:
    """`owner.flush(timeout_s)` waits for its pushes in flight (PSClient registers itself)."""
    with _lock:
        _flushers.add(owner)


def flush(timeout_s: float | None = None) -> None:
    """Wait for every push in flight to be answered (and so acknowledged, or failed): at the
    tail of a pass, before closing, before handing leases back on SIGTERM."""
    with _lock:
        owners = list(_flushers)
    for owner in owners:
        try:
            owner.flush(timeout_s)
        except Exception:  # noqa: BLE001 - the failure is raised at the owner's next call
            pass


def use_push_acks(enabled: bool = True) -> None:
    """Declare that this process acknowledges records by pushes (PSClient calls this).

    ElasticDatasets in ack mode "auto" then wait for `trained()` instead of acknowledging a
    step when the loop asks for the next one.
    """
    global _push_acks
    with _lock:
        _push_acks = enabled


def push_acks_enabled() -> bool:
    return _push_acks


# ---- for ElasticDataset's lease tables ---------------------------------------------------------

def register(table: _Table) -> None:
    with _lock:
        _tables.add(table)


def unregister(table: _Table) -> None:
    with _lock:
        _tables.discard(table)


def take_sequence(n: int) -> int:
    """Reserve `n` consecutive delivery sequence numbers; returns the first."""
    global _delivered
    with _lock:
        first = _delivered
        _delivered += n
        return first
