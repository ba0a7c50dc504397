"""Real `python -m master` and `python -m ps` processes for end-to-end tests.

Every process is started with 127.0.0.1 and port 0, its stderr goes to a file (shown when a
start fails), and `Procs.close()` (a fixture finalizer) kills whatever is still running.
"""
from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_PS_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Proc:
    def __init__(self, args: list[str], log: Path):
        self.args = args
        self.log = log
        self._err = open(log, "wb")
        self.popen = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(),
                                      stdout=subprocess.PIPE, stderr=self._err)
        self.line = ""

    def wait_line(self, pattern: str, timeout: float = START_TIMEOUT_S) -> re.Match:
        """Read stdout until a line matches; fails with the stderr log if the process ends."""
        sel = selectors.DefaultSelector()
        sel.register(self.popen.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        buf = b""
        try:
            while time.monotonic() < deadline:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self.popen.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    m = re.search(pattern, line)
                    if m:
                        self.line = line
                        return m
        finally:
            sel.close()
        raise AssertionError(f"{self.args} printed no line matching {pattern!r} "
                             f"(exit {self.popen.poll()}): {buf!r}\n{self.stderr()}")

    def stderr(self) -> str:
        self._err.flush()
        return self.log.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        if self.popen.stdout:
            self.popen.stdout.close()
        self._err.close()


class Procs:
    """Starts masters and PS under one temporary directory and kills them all at the end."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.started: list[Proc] = []

    def _start(self, name: str, args: list[str]) -> Proc:
        proc = Proc(args, self.tmp / f"{name}-{len(self.started)}.log")
        self.started.append(proc)
        return proc

    def master(self, db: str = "m.db", port: int = 0) -> tuple[Proc, str]:
        proc = self._start("master", ["-m", "master", "--host", "127.0.0.1", "--port", str(port),
                                      "--db", f"sqlite:///{self.tmp / db}"])
        m = proc.wait_line(r"elastic-master listening on [\d.]+:(\d+)")
        return proc, f"127.0.0.1:{m.group(1)}"

    def start_ps(self, master: str | None, index: int = 0, num_ps: int = 1,
                 checkpoint_dir: str = "ck", *extra: str) -> Proc:
        args = ["-m", "ps", "--host", "127.0.0.1", "--port", "0", "--data-port", "0",
                "--index", str(index), "--num-ps", str(num_ps),
                "--checkpoint-dir", str(self.tmp / checkpoint_dir), *extra]
        args += ["--master", master] if master else ["--standalone"]
        return self._start(f"ps{index}", args)

    @staticmethod
    def ready(proc: Proc) -> tuple[Proc, str, str]:
        """Wait for a PS's start line: (proc, grpc address, data address)."""
        m = proc.wait_line(r"listening on grpc (\S+) data (\S+)")
        return proc, m.group(1), m.group(2)

    def ps(self, master: str | None, index: int = 0, num_ps: int = 1,
           checkpoint_dir: str = "ck", *extra: str) -> tuple[Proc, str, str]:
        return self.ready(self.start_ps(master, index, num_ps, checkpoint_dir, *extra))

    def run(self, args: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(), capture_output=True,
                              text=True, timeout=timeout)

    def close(self) -> None:
        for proc in self.started:
            proc.kill()


def term(proc: Proc, timeout: float = 30.0) -> int:
    proc.signal(signal.SIGTERM)
    return proc.wait(timeout)
