"""The one process launcher of tests, benchmarks and the demo.

It starts this project's processes (`python -m master`, `python -m ps`, workers, benchmark
roles) as children, waits for the line a server prints once it listens and reads its port
from it, signals them (SIGKILL, SIGTERM, SIGSTOP / SIGCONT), restarts a server on the same
port and database, and kills whatever it started: when a start fails, and for everything a
`Launcher` started when it is closed (also on errors and Ctrl-C, through the `with` block).

A child's stdout and stderr go to one log file (shown when a start fails); its environment is
this one without `ELASTIC_PS_*` settings (a child is configured by the flags it is given, not
by the caller's shell) and with this checkout's packages on PYTHONPATH, so a checkout runs
without being installed. Starting, reading the ready line and the environment are
engines.process's, the one launcher the master's local engine uses too.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from signal import SIGCONT, SIGKILL, SIGSTOP, SIGTERM

import grpc

from engines import process
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit import auth

CODE_ROOT = Path(__file__).resolve().parents[1]  # the directory that holds our packages
HOST = "127.0.0.1"
LISTENING = r"listening on (?:grpc )?\S*?:(?P<port>\d+)"
PS_LISTENING = r"listening on grpc (?P<grpc>\S+?:(?P<port>\d+)) data (?P<data>\S+)"
START_TIMEOUT_S = 60.0


class LaunchError(RuntimeError):
    """A child did not start: it exited or printed no ready line in time (its log attached)."""


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child: ours without ELASTIC_PS_* settings, unbuffered output, this
    checkout's packages first on PYTHONPATH, then `extra`."""
    return process.clean_env(extra, CODE_ROOT)


class Proc:
    """One child process, its output (stdout and stderr) appended to `log`.

    `start()` waits until a line of this start's output matches `ready` (None: no wait) and
    reads the port from its `port` group; a server started again (`start()` after `kill()`,
    or `restart()`) is told the same port through its `--port` flag. A start that fails kills
    the child and raises LaunchError with the end of the log. `cpus`: the CPUs the child (and
    every thread it starts) may run on (`os.sched_setaffinity`, set before it runs any code);
    None: all of them."""

    def __init__(self, argv: list[str], log: Path, *, ready: str | None = LISTENING,
                 port: int = 0, cwd: Path | None = None, env: dict[str, str] | None = None,
                 cpus: set[int] | None = None):
        self.argv = list(argv)
        self.cpus = set(cpus) if cpus else None
        self.log = Path(log)
        self.ready = ready
        self.port = port
        self.cwd = cwd or CODE_ROOT
        self.env = child_env(**(env or {}))
        self.popen: subprocess.Popen | None = None
        self.match: re.Match | None = None
        self.starts = 0
        self._offset = 0  # where this start's output begins in the log

    @property
    def name(self) -> str:
        return self.log.stem

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def start(self, timeout: float = START_TIMEOUT_S) -> "Proc":
        if self.alive:
            raise LaunchError(f"{self.name} is running already (pid {self.pid})")
        argv = list(self.argv)
        if self.port and "--port" in argv:  # a restart: the port it had
            argv[argv.index("--port") + 1] = str(self.port)
        self.starts += 1
        self._offset = process.log_size(self.log)
        self.popen = process.spawn(argv, self.log, cwd=self.cwd, env=self.env, cpus=self.cpus)
        if self.ready is not None:
            try:
                self.match = self.wait_for(self.ready, timeout)
            except LaunchError:
                self.kill()
                raise
            if "port" in self.match.groupdict():
                self.port = int(self.match.group("port"))
        return self

    def restart(self, timeout: float = START_TIMEOUT_S) -> "Proc":
        """SIGKILL and start again: the same arguments, port and database."""
        self.kill()
        return self.start(timeout)

    def output(self, tail: int = 0) -> str:
        """What the child printed (all its starts); the last `tail` characters when given."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-tail:] if tail else text

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT_S) -> re.Match:
        """The first match of `pattern` in a line of this start's output; LaunchError when the
        child exits or `timeout` passes first."""
        try:
            return process.wait_for_line(self.popen, self.log, self._offset, pattern, timeout)
        except process.StartTimeout as exc:
            raise LaunchError(f"{self.name} printed no line matching {pattern!r} ({exc.why}): "
                              f"{self.argv}\n{exc.text[-3000:]}") from None

    def signal(self, sig: int) -> None:
        if self.alive:
            self.popen.send_signal(sig)

    def pause(self) -> None:
        self.signal(SIGSTOP)

    def resume(self) -> None:
        self.signal(SIGCONT)

    def wait(self, timeout: float | None = 60.0) -> int:
        return self.popen.wait(timeout)

    def kill(self, sig: int = SIGKILL, timeout: float = 20.0) -> int | None:
        """Send `sig` (SIGKILL by default) and wait for the exit; SIGKILL if it does not come
        within `timeout`. The exit code (None: never started)."""
        if self.popen is None:
            return None
        if self.alive:
            self.popen.send_signal(sig)
            if sig != SIGKILL:
                self.popen.send_signal(SIGCONT)  # a stopped child cannot act on it
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait(timeout)

    def terminate(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (a clean stop, or a spot reclaim notice), SIGKILL after `timeout`."""
        return self.kill(SIGTERM, timeout)

    stop = terminate

    def close(self) -> None:
        self.kill()


class MasterProc(Proc):
    """`python -m master`, with a client: `status()`, `dataset(name)`, `events()` (over TLS
    verified by `tls_ca` and with `token` when given, for a master started with them)."""

    def __init__(self, argv: list[str], log: Path, db: str, *, tls_ca: str = "",
                 token: str = "", **kw):
        super().__init__(argv, log, **kw)
        self.db = db
        self.tls_ca, self.token = tls_ca, token
        self._channel: grpc.Channel | None = None

    def stub(self) -> pb_grpc.MasterStub:
        if self._channel is None:
            self._channel = auth.channel(self.address, tls_ca=self.tls_ca, token=self.token)
        return pb_grpc.MasterStub(self._channel)

    def status(self, timeout: float = 10.0) -> pb.GetStatusResponse:
        return self.stub().GetStatus(pb.GetStatusRequest(), timeout=timeout)

    def dataset(self, name: str) -> pb.DatasetStatus:
        for ds in self.status().datasets:
            if ds.spec.name == name:
                return ds
        raise KeyError(name)

    def events(self, since: int = 0) -> list[pb.Event]:
        return list(self.stub().GetEvents(pb.GetEventsRequest(since=since, limit=10000),
                                          timeout=10).events)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self.kill()


class PSProc(Proc):
    """`python -m ps`: its gRPC control address and ZeroMQ data endpoint, once started."""

    @property
    def grpc_address(self) -> str:
        return self.match.group("grpc")

    @property
    def data_address(self) -> str:
        return self.match.group("data")

    @property
    def index(self) -> int:
        return int(self.argv[self.argv.index("--index") + 1])

    def leave_num_ps_out(self) -> None:
        """Start again without `--num-ps`: the master's layout says, and it may have been
        resized since the first start (a `--num-ps` that no longer matches is refused)."""
        if "--num-ps" in self.argv:
            at = self.argv.index("--num-ps")
            del self.argv[at:at + 2]


class Launcher:
    """Starts processes whose logs go to `workdir`, and kills every one of them on `close()`
    (or on leaving its `with` block), whatever happened."""

    def __init__(self, workdir: str | Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.started: list[Proc] = []

    def __enter__(self) -> "Launcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def log_path(self, name: str) -> Path:
        """A log file of its own for `name` (name-2.log, ... when taken)."""
        path, n = self.workdir / f"{name}.log", 1
        while path.exists() or any(p.log == path for p in self.started):
            n += 1
            path = self.workdir / f"{name}-{n}.log"
        return path

    def launch(self, proc: Proc, timeout: float = START_TIMEOUT_S, start: bool = True) -> Proc:
        """Own `proc` (killed on close) and start it unless `start` is False."""
        self.started.append(proc)
        return proc.start(timeout) if start else proc

    def python(self, *args: str, name: str, ready: str | None = None,
               timeout: float = START_TIMEOUT_S, **kw) -> Proc:
        """`python ARGS...` (this interpreter unless `python=` is given)."""
        python = kw.pop("python", sys.executable)
        return self.launch(Proc([python, *args], self.log_path(name), ready=ready, **kw),
                           timeout)

    def master(self, *flags: str, db: str | None = None, port: int = 0, name: str = "master",
               timeout: float = START_TIMEOUT_S, **kw) -> MasterProc:
        """`python -m master` on 127.0.0.1 (port 0: a free one) on `db` (default: an SQLite
        file of its own in workdir)."""
        log = self.log_path(name)
        db = db or f"sqlite:///{log.with_suffix('.db')}"
        argv = [sys.executable, "-m", "master", "--host", HOST, "--port", str(port),
                "--db", db, *flags]
        return self.launch(MasterProc(argv, log, db, **kw), timeout)

    def ps(self, master: str | None, *flags: str, index: int = 0, num_ps: int = 1,
           checkpoint_dir: str | Path | None = None, wait: bool = True,
           timeout: float = START_TIMEOUT_S, **kw) -> PSProc:
        """`python -m ps` on 127.0.0.1, free ports, registered with `master` (None:
        --standalone); `num_ps=0` leaves --num-ps out (the master's layout says); `wait=False`
        returns at once (`proc.start()` was called, `wait_ready` waits for its line)."""
        name = f"ps{index}"
        ckpt = Path(checkpoint_dir) if checkpoint_dir else self.workdir / f"{name}-ckpt"
        if not ckpt.is_absolute():
            ckpt = self.workdir / ckpt
        argv = [sys.executable, "-m", "ps", "--host", HOST, "--port", "0", "--data-port", "0",
                "--index", str(index), *(["--num-ps", str(num_ps)] if num_ps else []),
                "--checkpoint-dir", str(ckpt),
                *(["--master", master] if master else ["--standalone"]), *flags]
        proc = PSProc(argv, self.log_path(name), ready=PS_LISTENING if wait else None, **kw)
        self.launch(proc, timeout)
        if not wait:
            proc.ready = PS_LISTENING
        return proc

    @staticmethod
    def wait_ready(proc: Proc, timeout: float = START_TIMEOUT_S) -> Proc:
        """Wait for the ready line of a process started with `wait=False`."""
        try:
            proc.match = proc.wait_for(proc.ready, timeout)
        except LaunchError:
            proc.kill()
            raise
        proc.port = int(proc.match.group("port"))
        return proc

    def run(self, *args: str, timeout: float = 60.0, **kw) -> subprocess.CompletedProcess:
        """`python ARGS...` to completion, output captured (a command line that exits)."""
        return subprocess.run([sys.executable, *args], cwd=CODE_ROOT, env=child_env(**kw),
                              capture_output=True, text=True, timeout=timeout)

    def close(self) -> None:
        for proc in reversed(self.started):  # workers before the servers they talk to
            proc.close()
