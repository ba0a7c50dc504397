"""Launch helpers: start a server process, read the port it prints, signal it, restart it."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ADDRESS = re.compile(r"listening on (?:grpc )?\S*?:(\d+)")


class Proc:
    """A child process whose first line matching `listening on HOST:PORT` gives its port."""

    def __init__(self, args: list[str], name: str, env: dict | None = None):
        self.args = args
        self.name = name
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.popen: subprocess.Popen | None = None
        self.port = 0
        self.output: list[str] = []

    def start(self, timeout: float = 30.0) -> "Proc":
        self.popen = subprocess.Popen(
            self.args, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )
        found = threading.Event()

        def pump(stream):
            for line in stream:
                self.output.append(line)
                match = _ADDRESS.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=pump, args=(self.popen.stdout,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} did not start:\n{self.log()}")
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return "".join(self.output[-60:])

    def signal(self, sig: int) -> None:
        if self.popen and self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.popen:
            self.popen.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        self.signal(signal.SIGTERM)
        return self.popen.wait(timeout)


def master_args(db_url: str, *extra: str, port: int = 0) -> list[str]:
    return [sys.executable, "-m", "master", "--host", "127.0.0.1", "--port", str(port),
            "--db", db_url, *extra]
