"""SIGTERM (a spot reclaim notice) and SIGINT (Ctrl-C): hand the leases back with their
progress, then exit (0 after SIGTERM, 130 after SIGINT, without a traceback).

Both signals take the same path; only the leave's reason and the exit status differ: SIGTERM
leaves with reason "preempted" and exits 0, SIGINT with "interrupted" and exits 130 (the
shell's status for Ctrl-C). Neither counts against a shard's failure budget: the leases go back
with their exact offsets, so the master requeues only their untrained rest, which it does not
count as redone. (Without the handler, KeyboardInterrupt would fire wherever the main thread
is, mid-push included, and a push broken that way used to be reported as a failed step.)

What happens when the process gets SIGTERM (or SIGINT) while an ElasticDataset that handles it
is open:

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
4. The process exits with status 0 (130 after SIGINT): the parked loop raises SystemExit; if the
   main thread is elsewhere it is sent the signal again (pthread_kill, so a blocking sleep or
   read is interrupted), which now raises SystemExit wherever it is; if it still has not exited
   after `EXIT_DEADLINE_S` (stuck in a long C call, or it swallowed SystemExit), the thread
   calls os._exit with that status. A second signal while the leases are being handed back is
   ignored.

The handlers are installed only from the main thread, by datasets created with
`handle_sigterm=True` (the default), and removed (the previous ones restored) when the last of
them is closed. A previous Python handler of either signal is chained, except Python's default
SIGINT handler (it would raise KeyboardInterrupt mid-step, the very thing avoided here).
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

from .pieces import LeaveReason

log = logging.getLogger(__name__)

GRACE_S = 2.0  # how long a training step in flight may take to finish and be acknowledged
EXIT_DEADLINE_S = 3.0  # after the leave: how long the process has to exit by itself
PARK_TIMEOUT_S = 15.0  # a parked loop never waits longer than this for the leave


class Member(Protocol):
    ledger: "AckLedger"  # where its records are acknowledged (flushed at the safe point)

    def _preempt_busy(self) -> bool: ...

    def _preempt_freeze(self) -> None: ...

    def _preempt_leave(self, reason: LeaveReason) -> None: ...


# per signal: the leave's reason (the master's requeue cause) and the exit status
EXITS = {signal.SIGTERM: (LeaveReason.PREEMPTED, 0),
         signal.SIGINT: (LeaveReason.INTERRUPTED, 130)}

stopping = threading.Event()  # SIGTERM or SIGINT seen: hand out nothing more
_parked = threading.Event()  # a training loop reached a safe point and waits
_left = threading.Event()  # the leave is done: the loop may exit
_lock = threading.Lock()
_members: "weakref.WeakSet[Member]" = weakref.WeakSet()
_previous: dict = {}  # signal -> the handler installed before ours
_installed = False
_signum = signal.SIGTERM  # the signal being handled


class _State(str, Enum):
    def __str__(self) -> str:  # the value in messages and logs
        return self.value

    IDLE = "idle"  # no signal yet
    STOPPING = "stopping"  # signal seen: waiting for the loop, then leaving
    LEFT = "left"  # the leases are handed back: the process exits


_state = _State.IDLE


def reason() -> LeaveReason:
    """The leave's reason for the signal being handled (preempted, interrupted)."""
    return EXITS[_signum][0]


def exit_status() -> int:
    return EXITS[_signum][1]


def install(member: Member) -> bool:
    """Handle SIGTERM and SIGINT for `member`; False when that is impossible (not the main
    thread)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        log.info("not installing the SIGTERM/SIGINT handler: ElasticDataset was created outside "
                 "the main thread (pass handle_sigterm=False to silence this)")
        return False
    with _lock:
        _members.add(member)
        if not _installed:
            for signum in EXITS:
                _previous[signum] = signal.signal(signum, _on_signal)
            _installed = True
    return True


def uninstall(member: Member) -> None:
    global _installed
    with _lock:
        _members.discard(member)
        if _installed and not _members and _state == _State.IDLE:
            if threading.current_thread() is threading.main_thread():
                for signum in EXITS:
                    if signal.getsignal(signum) is _on_signal:
                        signal.signal(signum, _previous.get(signum, signal.SIG_DFL))
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
    raise SystemExit(exit_status())


def _on_signal(signum, frame) -> None:
    global _state, _signum
    if _state == _State.LEFT:
        raise SystemExit(exit_status())
    if _state == _State.STOPPING:
        return  # a second Ctrl-C while handing back: the exit is seconds away
    _state, _signum = _State.STOPPING, signum
    stopping.set()
    threading.Thread(target=_preempt, name="elastic-preempt", daemon=False).start()
    previous = _previous.get(signum)
    if (callable(previous) and previous is not _on_signal
            and previous is not signal.default_int_handler):
        previous(signum, frame)


def _preempt() -> None:
    global _state
    members = list(_members)
    name = signal.Signals(_signum).name
    log.info("%s: handing the leases back (%s), then exiting with status %d", name, reason(),
             exit_status())
    busy = any(member._preempt_busy() for member in members)  # a step holds our records
    if busy and not _parked.wait(GRACE_S):
        log.warning("%s: the training loop did not come back for data within %.1f s; its step "
                    "in flight is not acknowledged (trained again elsewhere)", name, GRACE_S)
    for member in members:  # first stop every acknowledgement, then report
        member._preempt_freeze()
    for member in members:
        try:
            member._preempt_leave(reason())
        except Exception:  # noqa: BLE001 - leave what can be left; the master times out the rest
            log.exception("%s: could not hand the leases back", name)
    _state = _State.LEFT
    _left.set()
    main = threading.main_thread()
    if main.is_alive() and not _parked.is_set():
        # to the main thread itself: a process-wide signal may land on another thread and
        # leave a main thread blocked in sleep() or a socket undisturbed
        signal.pthread_kill(main.ident, _signum)  # now raises SystemExit there
    main.join(EXIT_DEADLINE_S)
    if main.is_alive():
        log.warning("%s: the main thread did not exit within %.1f s; exiting now", name,
                    EXIT_DEADLINE_S)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(exit_status())
