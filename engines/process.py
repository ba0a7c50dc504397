"""Starting and watching one child process on this machine: the project's one launcher.

`spawn` starts a command with its output appended to a log file, optionally pinned to CPUs
(set in the child before it execs) and in a session of its own (so a signal reaches every
process it starts: `signal_group`); `wait_for_line` reads the log until a line matches, the
child exits or time runs out. `start_ticks` identifies a process across masters: its pid and
the kernel's start time together are never reused, so a master that takes over recognises
the processes another one started (`alive`). Used by cluster.launch (tests, benchmarks, the
demo) and engines.local (the jobs a master drives).
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path


class StartTimeout(Exception):
    """No line matched before the child exited or the timeout passed (`text`: its output)."""

    def __init__(self, why: str, text: str):
        super().__init__(why)
        self.why, self.text = why, text


def clean_env(extra: dict[str, str] | None = None, code_root: Path | str | None = None,
              base: dict[str, str] | None = None) -> dict[str, str]:
    """A child's environment: `base` (ours) without ELASTIC_PS_* settings (a child is set up
    by what it is given, not by the caller's shell), unbuffered output, `code_root` first on
    PYTHONPATH (a checkout runs without being installed), then `extra`."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("ELASTIC_PS_")}
    if code_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code_root), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _preexec(cpus: set[int] | None):
    if not cpus:
        return None

    def pin() -> None:  # in the child before it execs: its first instruction already runs there
        os.sched_setaffinity(0, cpus)
    return pin


def spawn(argv: list[str], log: Path | str, *, cwd: Path | str | None = None,
          env: dict[str, str] | None = None, cpus: set[int] | None = None,
          session: bool = False) -> subprocess.Popen:
    """Start `argv`, stdout and stderr appended to `log`. `session`: in a new session (its pid
    is its process group's), so `signal_group` reaches its children too. Raises OSError when
    the command cannot be started."""
    with open(log, "ab") as out:
        # a process of its own session reads no terminal: it must not take the caller's input
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL if session else None, cwd=cwd, env=env,
                                preexec_fn=_preexec(cpus), start_new_session=session)


def log_size(log: Path | str) -> int:
    path = Path(log)
    return path.stat().st_size if path.exists() else 0


def wait_for_line(popen: subprocess.Popen, log: Path | str, offset: int, pattern: str,
                  timeout: float) -> re.Match:
    """The first match of `pattern` in a line the child wrote to `log` after `offset`;
    StartTimeout when it exits or `timeout` passes first."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        exited = popen.poll() is not None  # before reading: its last lines count
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        for line in text.splitlines():
            match = regex.search(line)
            if match:
                return match
        if exited or time.monotonic() > deadline:
            why = f"exited with {popen.returncode}" if exited else \
                f"still running after {timeout:g} s"
            raise StartTimeout(why, text)
        time.sleep(0.02)


def free_ports(host: str, n: int, taken: tuple[int, ...] = ()) -> list[int]:
    """`n` distinct ports free on `host` of this machine now, none of them in `taken`: all
    held open together while picked, so none is picked twice."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        # each socket holds its own port: at most len(taken) picks are skipped
        for _ in range(n + len(taken)):
            if len(ports) == n:
                break
            s = socket.socket(family)
            socks.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in taken:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def signal_group(pid: int, sig: int) -> bool:
    """Send `sig` to the process group led by `pid` (a child started with session=True);
    False when it is gone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    if sig not in (signal.SIGKILL, signal.SIGCONT):
        try:
            os.killpg(pid, signal.SIGCONT)  # a stopped process cannot act on it
        except (ProcessLookupError, PermissionError):
            pass
    return True


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None when there is no such
    process or it has exited (a zombie)."""
    # the command name (2nd field) is in parentheses and may hold spaces: split after it
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return stat[stat.rindex(")") + 2:].split()


def cpu_seconds(pid: int, depth: int = 3) -> float | None:
    """User and system CPU seconds of `pid` and its descendants (`depth` levels: the
    wrapper, the command, what the command starts); None when `pid` is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    ticks = int(fields[11]) + int(fields[12])
    total = ticks / os.sysconf("SC_CLK_TCK")
    if depth > 0:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        for child in children:
            total += cpu_seconds(int(child), depth - 1) or 0.0
    return total


def identity(pid: int) -> str:
    """"PID:START_TICKS" of a running process ('' when it is not running)."""
    ticks = start_ticks(pid)
    return "" if ticks is None else f"{pid}:{ticks}"


def alive(ident: str) -> bool:
    """Whether the process `identity` named is still the one running."""
    pid, _, ticks = ident.partition(":")
    return bool(ticks) and pid.isdigit() and start_ticks(int(pid)) == int(ticks)
