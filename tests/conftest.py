"""Shared fixtures: real master processes on 127.0.0.1 (cluster.launch), killed at teardown,
and a leader's parts in this process (a real database, core and committer)."""
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


@pytest.fixture
def leader_parts(tmp_path):
    """(store, core, committer) as a leader runs them, on a SQLite file under tmp_path: the
    core loaded from the upgraded store, the committer started. A fatal commit error fails the
    test at teardown."""
    from master.core import MasterCore
    from master.persistence.committer import Committer
    from master.persistence.store import Store

    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store.upgrade()
    fatal = []
    core = MasterCore(snapshot=store.load())
    committer = Committer(core, store, fatal.append)
    committer.start()
    yield store, core, committer
    committer.stop()
    store.close()
    assert fatal == []
