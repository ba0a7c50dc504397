"""Shared fixtures: a real master process on 127.0.0.1, killed at teardown."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"elastic-master listening on \S+:(\d+) \(pid (\d+)\)")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child process that imports this repository's packages."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class MasterProcess:
    """`python -m master` on 127.0.0.1 with a SQLite file under the test's tmp_path.

    `kill()` (SIGKILL) and `start()` again restart it on the same database and port."""

    def __init__(self, workdir: Path, *args: str, db: str | None = None):
        self.workdir = workdir
        self.db = db or f"sqlite:///{workdir / 'm.db'}"
        self.args = list(args)
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._channel: grpc.Channel | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "MasterProcess":
        self.starts += 1
        out = self.workdir / f"master-{self.starts}.out"
        err = self.workdir / f"master-{self.starts}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "master", "--host", "127.0.0.1", "--port", str(self.port),
                 "--db", self.db, *self.args],
                stdout=stdout, stderr=stderr, cwd=REPO, env=subprocess_env(),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _LISTENING.search(out.read_text())
            if match:
                self.port = int(match.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the master exited with {self.proc.returncode}:\n"
                                   f"{err.read_text()[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the master did not start within {timeout} s:\n"
                           f"{err.read_text()[-3000:]}")

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 20.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout)

    def stop(self) -> int | None:
        return self.kill(signal.SIGTERM)

    def stub(self) -> pb_grpc.MasterStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.address)
        return pb_grpc.MasterStub(self._channel)

    def status(self, timeout: float = 10.0) -> pb.GetStatusResponse:
        return self.stub().GetStatus(pb.GetStatusRequest(), timeout=timeout)

    def events(self, since: int = 0) -> list[pb.Event]:
        return list(self.stub().GetEvents(pb.GetEventsRequest(since=since, limit=10000),
                                          timeout=10).events)

    def dataset(self, name: str) -> pb.DatasetStatus:
        for ds in self.status().datasets:
            if ds.spec.name == name:
                return ds
        raise KeyError(name)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self.kill()


@pytest.fixture
def master_factory(tmp_path):
    """`master_factory(*flags, db=URL)` starts a master (each in its own directory, on its own
    SQLite file unless `db` names a database); all are killed at teardown."""
    masters: list[MasterProcess] = []

    def start(*args: str, db: str | None = None) -> MasterProcess:
        workdir = tmp_path / f"master{len(masters)}"
        workdir.mkdir()
        m = MasterProcess(workdir, *args, db=db)
        masters.append(m)
        return m.start()

    yield start
    for m in masters:
        m.close()


@pytest.fixture
def master(master_factory) -> MasterProcess:
    """A master with the default settings."""
    return master_factory()
