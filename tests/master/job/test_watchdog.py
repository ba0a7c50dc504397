"""A master's watch on the elastic-job run that started it (master/job/watchdog.py), on a real
database and a real process: nothing happens while the owner runs; once it is gone, a leader's
driver is asked to stop the job (once per term), and the master exits only when the job's
durable state says it ended."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from sqlalchemy import insert, update

from engines import process
from master.job.watchdog import OwnerWatch
from master.persistence import schema
from master.persistence.store import Store


class Driver:
    """A leader's driver as the watch sees it: what it was asked."""

    def __init__(self):
        self.asked: list[str] = []

    def request_stop(self, reason: str) -> None:
        self.asked.append(reason)


def set_state(store: Store, state: str, new: bool = False) -> None:
    row = dict(id=1, name="t", spec="", state=state, started_ms=0, changed_ms=0, policy="",
               targets="{}", decisions="{}", launches=0, masters="")
    with store.engine.begin() as conn:
        conn.execute(insert(schema.job).values(**row) if new else
                     update(schema.job).values(state=state))


def test_the_watch_stops_the_job_once_its_owner_is_gone_and_exits_once_it_ended(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store.upgrade()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = process.identity(owner.pid)
    driver: list = [None]  # a standby first
    watch = OwnerWatch(ident, store, lambda: driver[0], threading.Event())
    try:
        assert ident and not watch.check() and not watch.gone
    finally:
        owner.kill()
        owner.wait()
    assert not watch.check() and watch.gone  # gone, but no job row yet: stay
    set_state(store, "running", new=True)
    assert not watch.check()
    driver[0] = Driver()  # it leads now: the job is asked to stop, once
    assert not watch.check() and not watch.check()
    assert driver[0].asked == ["owner-gone"]
    set_state(store, "stopping")
    assert not watch.check()
    set_state(store, "stopped")
    assert watch.check()
    store.close()


def test_a_reused_pid_is_not_taken_for_the_owner(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    store.upgrade()
    set_state(store, "finished", new=True)
    pid, ticks = process.identity(os.getpid()).split(":")
    # this very pid, started at another time: not the owner, which is gone
    watch = OwnerWatch(f"{pid}:{int(ticks) + 1}", store, lambda: None, threading.Event())
    assert watch.check()
    store.close()
