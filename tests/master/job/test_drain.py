"""A drained worker's process after it left the master (master/job/driver.py `_kill_left`):
against a real database, core and committer, and the real local engine with a real process
that ignores SIGTERM (a worker whose teardown lingers). While it is registered it is left to
the engine's grace; once it has left (its leases handed back) it is killed LEFT_GRACE_S later
on the driver's clock, long before the engine's stop grace."""
from __future__ import annotations

import json
import sys
import time

from engines import process
from engines.local import LocalEngine
from master.job.book import JobBook, JobState
from master.job.driver import LEFT_GRACE_S, JobDriver
from master.job.spec import parse_spec

# a worker that ignores SIGTERM (then says so in the file named by its argument): only a kill
# ends it within the test
STUBBORN = [sys.executable, "-c", "import pathlib, signal, sys, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); "
            "time.sleep(120)"]
SPEC = {"name": "t", "workers": {"command": "true", "min": 1, "max": 1,
                                 "markets": [{"name": "spot", "price": 0.3},
                                             {"name": "on-demand", "price": 1.0}]}}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_drained_worker_is_killed_once_it_has_left_the_master(tmp_path, leader_parts):
    store, core, committer = leader_parts
    engine = LocalEngine(tmp_path / "run", stop_grace_s=600.0)  # its own SIGKILL: far away
    clock = Clock()
    try:
        book = committer.call(lambda: JobBook(core.journal))
        committer.call(lambda: book.begin("t", "{}", "127.0.0.1:1"))
        proc = committer.call(lambda: book.launching("worker", "on-demand"))
        ready = tmp_path / "ignoring"
        handle = engine.launch("worker", proc.name, "on-demand", [*STUBBORN, str(ready)],
                               process.clean_env())
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the worker never started"
        committer.call(lambda: book.launched(proc, handle))
        worker = committer.call(lambda: core.register_worker(proc.name, {"market": "on-demand"}))
        driver = JobDriver(parse_spec(SPEC), core, committer, book, engine, masters="m:1",
                           workdir=tmp_path / "run", clock=clock)
        # the job is being stopped: the driver drains its worker (SIGTERM, ignored here)
        committer.call(lambda: book.set_state(JobState.STOPPING))
        driver.step()
        assert book.procs[proc.name].state == "stopping"
        clock.now += 60.0
        for _ in range(5):  # still registered: no kill, however long it takes
            driver.step()
            time.sleep(0.05)
        assert process.alive(handle.id)
        committer.call(lambda: core.leave_worker(worker.worker_id, "preempted", []))
        driver.step()  # seen gone from the master: the grace starts
        clock.now += LEFT_GRACE_S - 0.5
        driver.step()
        time.sleep(0.2)
        assert process.alive(handle.id)
        clock.now += 0.5
        deadline = time.monotonic() + 30
        while proc.name in book.procs and time.monotonic() < deadline:
            driver.step()
            time.sleep(0.05)
        assert proc.name not in book.procs and not process.alive(handle.id)
        _, rows = store.job()
        ended = {r["name"]: r for r in rows}[proc.name]
        assert (ended["state"], ended["exit_code"], ended["cause"]) == ("exited", -9,
                                                                        "job_stopped")
        exits = [json.loads(e["detail"]) for e in store.events_of_kind("node_exited")]
        assert [(e["name"], e["code"]) for e in exits] == [(proc.name, -9)]
    finally:
        engine.stop_all(graceful=False)
        engine.close()
