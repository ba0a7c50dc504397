"""The local engine: a job's processes on this machine, its markets labels under a trace.

Every process is started in a session of its own (a signal reaches all it starts) under a
small `sh` that writes the command's exit status next to its log, so a master that takes
over from a dead one (`adopt`) still learns how a process it did not start ended. A market's
capacity at `t` seconds after the job started comes from `capacity(market, t)` (a market
trace; None: no limit): a launch beyond it fails with `Refusal.NO_CAPACITY`, and when it
shrinks under what runs there the newest processes get a notice (SIGTERM to their group,
a `preempted` event with the deadline) and SIGKILL once `preempt_grace_s` passed. `poll()`
does one round of that (reap, enforce, kill at deadlines); `start()` runs it on a thread.
"""
from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import process
from .owner import Owner
from .port import EngineEvent, EventKind, Handle, LaunchFailed, Refusal, check_launch

log = logging.getLogger(__name__)

Capacity = Callable[[str, float], "int | None"]  # (market, seconds since the job started)
POLL_S = 0.1
LOOPBACK = "127.0.0.1"  # every process on this machine: a PS is reached on the loopback
# `sh -c WRAPPER LOG ARGV...`: runs ARGV as its child and writes its status to LOG.PID.exit
# (PID: sh's, the process the engine knows). The trap makes sh outlive a SIGTERM sent to the
# group until the command ended (POSIX runs a trap after the foreground command), and a
# trapped signal is reset at exec: the command itself gets the default action.
# It also writes its pid to LOG.pid first: a master that died between asking for a launch and
# recording the process's id lets the next one find it by name (`find`).
WRAPPER = ('echo $$ > "$0.pid.$$.sh" && mv "$0.pid.$$.sh" "$0.pid"; '
           'trap : TERM INT HUP; "$@"; rc=$?; '
           'echo $rc > "$0.$$.tmp" && mv "$0.$$.tmp" "$0.$$.exit"; exit $rc')


@dataclass
class _Proc:
    handle: Handle
    popen: subprocess.Popen | None  # None: adopted from another master
    pid: int
    exit_file: Path
    deadline: float | None = None  # when SIGKILL follows a notice or a graceful stop
    noticed: bool = False          # preempted: no longer counted against its market
    killed: bool = False           # we sent SIGKILL: an unknown status is ours, not a loss


def _write_pid(log_path: Path, pid: int) -> None:
    tmp = Path(f"{log_path}.pid.{pid}.tmp")
    try:
        tmp.write_text(f"{pid}\n")
        tmp.replace(f"{log_path}.pid")
    except OSError:
        log.warning("could not write %s.pid; a master taking over finds it once sh has",
                    log_path)


def _exit_file(log_path: str, pid: int) -> Path:
    return Path(f"{log_path}.{pid}.exit")


def _code(status: int | None, exit_file: Path) -> int | None:
    """The command's exit status: from the file sh wrote (128+N is killed by signal N), else
    from sh's own status when we are its parent; None when neither is known."""
    try:
        text = exit_file.read_text().strip()
    except OSError:
        text = ""
    if text.isdigit():
        code = int(text)
        return -(code - 128) if 128 < code < 160 else code
    return status


class LocalEngine(Owner):
    """See the module docstring. `workdir` holds the logs and exit files; `started_s` is the
    job's start (wall clock, what the trace counts from); `clock` the wall clock; `host` the
    address a PS it runs listens on and advertises (`ps_host_flags`)."""

    def __init__(self, workdir: str | Path, *, capacity: Capacity | None = None,
                 started_s: float | None = None, preempt_grace_s: float = 30.0,
                 stop_grace_s: float = 30.0, cwd: str | Path | None = None,
                 clock: Callable[[], float] = time.time, host: str = LOOPBACK):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.capacity = capacity
        self.clock = clock
        self.started_s = clock() if started_s is None else started_s
        self.preempt_grace_s = preempt_grace_s
        self.stop_grace_s = stop_grace_s
        self.cwd = cwd
        self.host = host
        self.ps_host_flags = ["--host", host]
        super().__init__()
        self._procs: dict[str, _Proc] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    # ---- the port -----------------------------------------------------------------------------

    def launch(self, role: str, name: str, market: str, command: list[str],
               env: dict[str, str]) -> Handle:
        """Start `command` with `env` (the whole environment: see process.clean_env)."""
        with self._lock:
            check_launch(name, command, self._closed, self.admits(market),
                         f"market {market!r} admits no more processes now "
                         f"(capacity {self._limit(market)})")
            log_path = self.workdir / f"{name}.log"
            try:
                popen = process.spawn(["sh", "-c", WRAPPER, str(log_path), *command], log_path,
                                      cwd=self.cwd, env=env, session=True)
            except OSError as exc:
                raise LaunchFailed(Refusal.START_FAILED, f"{name}: cannot start: {exc}") from exc
            # sh writes it too, but only once it runs: under load a master taking over a moment
            # after this launch would not find the process by name yet
            _write_pid(log_path, popen.pid)
            exit_file = _exit_file(str(log_path), popen.pid)
            ident = process.identity(popen.pid) or f"{popen.pid}:0"
            handle = Handle(role=str(role), name=name, market=market, id=ident,
                            started_ms=int(self.clock() * 1000), log=str(log_path))
            self._procs[ident] = _Proc(handle, popen, popen.pid, exit_file)
            self._emit(EventKind.STARTED, handle)
            return handle

    def reserve(self, names: list[str], market: str,
                port: int = 0) -> list[tuple[str, int]]:
        """Where the processes to be launched as `names` listen: `host` (every process is on
        this machine), `port` for the first (0: a free one) and free ports for the rest."""
        first = [port] if port and names else []
        rest = process.free_ports(self.host, len(names) - len(first), tuple(first))
        return [(self.host, p) for p in first + rest]

    def _signal(self, proc: _Proc, sig: int) -> None:
        process.signal_group(proc.pid, sig)

    def admits(self, market: str) -> bool:
        limit = self._limit(market)
        return limit is None or self._counted(market) < limit

    def adopt(self, handle: Handle) -> bool:
        """Watch a process another engine (a master that died) started; True when it still
        runs. One that ended meanwhile is reported as exited (or lost) by the next poll."""
        with self._lock:
            if handle.id in self._procs:
                return True
            pid = int(handle.id.partition(":")[0])
            self._procs[handle.id] = _Proc(handle, None, pid,
                                           _exit_file(handle.log, pid) if handle.log else
                                           Path("/nonexistent"))
            return process.alive(handle.id)

    def find(self, role: str, name: str, market: str) -> Handle | None:
        """The process launched as `name` (by any engine on this workdir) if it still runs:
        for a launch whose id was never recorded."""
        log_path = self.workdir / f"{name}.log"
        try:
            pid = int((self.workdir / f"{name}.log.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        ident = process.identity(pid)
        if not ident:
            return None
        return Handle(role=str(role), name=name, market=market, id=ident,
                      started_ms=int(self.clock() * 1000), log=str(log_path))

    def cpu_seconds(self, handle: Handle) -> float | None:
        """CPU seconds the process and its children used so far (None: gone)."""
        return process.cpu_seconds(int(handle.id.partition(":")[0]))

    # ---- the round ----------------------------------------------------------------------------

    def poll(self) -> list[EngineEvent]:
        """One round: reap the processes that ended, notice those beyond their market's
        capacity, SIGKILL those past their deadline. The events it produced (also queued)."""
        with self._lock:
            before = len(self._events)
            self._reap()
            self._enforce()
            now = self.clock()
            for proc in self._procs.values():
                if proc.deadline is not None and now >= proc.deadline:
                    self._kill(proc)
            return list(self._events)[before:]

    def _reap(self) -> None:
        for ident, proc in list(self._procs.items()):
            if proc.popen is not None:
                status = proc.popen.poll()
                if status is None:
                    continue
            elif process.alive(ident):
                continue
            else:
                status = None
            del self._procs[ident]
            code = _code(status, proc.exit_file)
            if code is None and proc.killed:
                code = -signal.SIGKILL  # sh died with it: no status file, but we know
            if code is None:
                self._emit(EventKind.LOST, proc.handle,
                           detail="gone; its exit status could not be read")
            else:
                self._emit(EventKind.EXITED, proc.handle, code=code)

    def _enforce(self) -> None:
        if self.capacity is None:
            return
        markets = {p.handle.market for p in self._procs.values()}
        now = self.clock()
        for market in sorted(markets):
            limit = self._limit(market)
            if limit is None:
                continue
            counted = sorted((p for p in self._procs.values()
                              if p.handle.market == market and not p.noticed),
                             key=lambda p: (p.handle.started_ms, p.handle.id))
            for proc in counted[max(limit, 0):][::-1]:  # the newest go first
                proc.noticed = True
                deadline = now + self.preempt_grace_s
                proc.deadline = deadline if proc.deadline is None else min(proc.deadline,
                                                                           deadline)
                self._signal(proc, signal.SIGTERM)
                self._emit(EventKind.PREEMPTED, proc.handle,
                           deadline_ms=int(proc.deadline * 1000),
                           detail=f"market {market} capacity is now {limit}")

    def _limit(self, market: str) -> int | None:
        if self.capacity is None:
            return None
        return self.capacity(market, self.clock() - self.started_s)

    def _counted(self, market: str) -> int:
        return sum(1 for p in self._procs.values() if p.handle.market == market and not p.noticed)

    # ---- lifetime -----------------------------------------------------------------------------

    def start(self, period_s: float = POLL_S) -> "LocalEngine":
        """Poll on a thread of its own every `period_s` until `close()`."""
        def run() -> None:
            while not self._stop.wait(period_s):
                try:
                    self.poll()
                except Exception:  # noqa: BLE001 - the next round tries again
                    log.exception("local engine: a poll failed")
        self._thread = threading.Thread(target=run, name="local-engine", daemon=True)
        self._thread.start()
        return self

    def _overdue(self, late_s: float, timeout: float) -> None:
        for proc in self._procs.values():  # again each round: a SIGCONT'd child may linger
            self._kill(proc)

    def close(self) -> None:
        """Stop polling and refuse launches; the processes are left as they are (a master
        that stops hands them to the next; `stop_all` ends them)."""
        with self._lock:
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
