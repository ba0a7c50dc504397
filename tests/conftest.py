"""Shared fixtures: real master processes on 127.0.0.1 (cluster.launch), killed at teardown."""
from __future__ import annotations

import pytest

from cluster.launch import CODE_ROOT, Launcher, MasterProc

REPO = CODE_ROOT


@pytest.fixture
def launcher(tmp_path):
    """A `cluster.launch.Launcher` logging under tmp_path: everything it started is killed at
    teardown."""
    with Launcher(tmp_path / "procs") as launcher:
        yield launcher


@pytest.fixture
def master_factory(launcher):
    """`master_factory(*flags, db=URL)` starts a master (on its own SQLite file unless `db`
    names a database); `kill()` (SIGKILL) and `start()` again restart it on the same database
    and port."""

    def start(*flags: str, db: str | None = None) -> MasterProc:
        return launcher.master(*flags, db=db)

    return start


@pytest.fixture
def master(master_factory) -> MasterProc:
    """A master with the default settings."""
    return master_factory()
