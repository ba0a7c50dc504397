"""SIGTERM, the spot reclaim notice: hand the leases back with their progress, then exit 0.

What happens when the process gets SIGTERM while an ElasticDataset that handles it is open:

1. The handler (it runs in the main thread, between two bytecodes of whatever was running)
   only sets `stopping` and starts the `elastic-preempt` thread; it takes no lock. Any previous
   Python handler is then called too (chained).
2. From now on no sample is handed out: the next time the training loop asks an ElasticDataset
   for data it parks there (a safe point: its last step has finished, and in the "next" ack mode
   that request acknowledged it first). A GetShard retry loop or a WAIT sleep is abandoned.
3. The preempt thread waits until the loop is parked, or at most `GRACE_S` (a step in flight may
   still finish and push; no wait when the loop holds no unacknowledged record), then freezes every lease table (nothing may be acknowledged any more:
   a push that completes later does not count) and calls LeaveWorker(reason="preempted") with
   DONE for every fully trained lease and PROGRESS with the trained offset for the others. The
   master credits those records and requeues only the untrained remainder, at once, without
   counting it against the shard's failure budget.
4. The process exits with status 0: the parked loop raises SystemExit(0); if the main thread is
   elsewhere it is sent SIGTERM again (pthread_kill, so a blocking sleep or read is interrupted),
   which now raises SystemExit(0) wherever it is; if it
   still has not exited after `EXIT_DEADLINE_S` (stuck in a long C call, or it swallowed
   SystemExit), the thread calls os._exit(0).

The handler is installed only from the main thread, by datasets created with
`handle_sigterm=True` (the default), and removed (the previous one restored) when the last of
them is closed.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import weakref
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .ack import AckLedger

log = logging.getLogger(__name__)

GRACE_S = 2.0  # how long a training step in flight may take to finish and be acknowledged
EXIT_DEADLINE_S = 3.0  # after the leave: how long the process has to exit by itself
PARK_TIMEOUT_S = 15.0  # a parked loop never waits longer than this for the leave


class Member(Protocol):
    ledger: "AckLedger"  # where its records are acknowledged (flushed at the safe point)

    def _preempt_busy(self) -> bool: ...

    def _preempt_freeze(self) -> None: ...

    def _preempt_leave(self) -> None: ...


stopping = threading.Event()  # SIGTERM seen: hand out nothing more
_parked = threading.Event()  # a training loop reached a safe point and waits
_left = threading.Event()  # the leave is done: the loop may exit
_lock = threading.Lock()
_members: "weakref.WeakSet[Member]" = weakref.WeakSet()
_previous = None
_installed = False


class _State(str, Enum):
    IDLE = "idle"  # no SIGTERM yet
    STOPPING = "stopping"  # SIGTERM seen: waiting for the loop, then leaving
    LEFT = "left"  # the leases are handed back: the process exits


_state = _State.IDLE


def install(member: Member) -> bool:
    """Handle SIGTERM for `member`; False when that is impossible (not the main thread)."""
    global _previous, _installed
    if threading.current_thread() is not threading.main_thread():
        log.info("not installing the SIGTERM handler: ElasticDataset was created outside the "
                 "main thread (pass handle_sigterm=False to silence this)")
        return False
    with _lock:
        _members.add(member)
        if not _installed:
            _previous = signal.signal(signal.SIGTERM, _on_sigterm)
            _installed = True
    return True

    def __str__(self) -> str:  # the value in messages and logs
        return self.value


def uninstall(member: Member) -> None:
    global _installed
    with _lock:
        _members.discard(member)
        if _installed and not _members and _state == _State.IDLE:
            if threading.current_thread() is threading.main_thread():
                if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                    signal.signal(signal.SIGTERM, _previous)
                _installed = False


def checkpoint() -> None:
    """Called by the data iterators at every safe point: park and exit if we were told to."""
    if not stopping.is_set():
        return
    if not _parked.is_set():
        # the step before this safe point may still be pushing in the background: let its
        # push be answered (and acknowledged) so that the hand-back carries it
        with _lock:
            ledgers = {id(m.ledger): m.ledger for m in _members}
        for ledger in ledgers.values():
            ledger.flush(GRACE_S / 2)
    _parked.set()
    _left.wait(PARK_TIMEOUT_S)
    raise SystemExit(0)


def _on_sigterm(signum, frame) -> None:
    global _state
    if _state == _State.LEFT:
        raise SystemExit(0)
    if _state == _State.STOPPING:
        return
    _state = _State.STOPPING
    stopping.set()
    threading.Thread(target=_preempt, name="elastic-preempt", daemon=False).start()
    previous = _previous
    if callable(previous) and previous is not _on_sigterm:
        previous(signum, frame)


def _preempt() -> None:
    global _state
    members = list(_members)
    busy = any(member._preempt_busy() for member in members)  # a step holds our records
    if busy and not _parked.wait(GRACE_S):
        log.warning("SIGTERM: the training loop did not come back for data within %.1f s; "
                    "its step in flight will be redone elsewhere", GRACE_S)
    for member in members:  # first stop every acknowledgement, then report
        member._preempt_freeze()
    for member in members:
        try:
            member._preempt_leave()
        except Exception:  # noqa: BLE001 - leave what can be left; the master times out the rest
            log.exception("SIGTERM: could not hand the leases back")
    _state = _State.LEFT
    _left.set()
    main = threading.main_thread()
    if main.is_alive() and not _parked.is_set():
        # to the main thread itself: a process-wide signal may land on another thread and
        # leave a main thread blocked in sleep() or a socket undisturbed
        signal.pthread_kill(main.ident, signal.SIGTERM)  # now raises SystemExit(0) there
    main.join(EXIT_DEADLINE_S)
    if main.is_alive():
        log.warning("SIGTERM: the main thread did not exit within %.1f s; exiting now",
                    EXIT_DEADLINE_S)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(0)
