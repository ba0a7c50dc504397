"""A leader that takes a job over (master/job/driver.py `adopt`), against a real database, a
real core and committer, and the real local engine with real processes: a process the old
leader recorded is adopted; one it launched but died before recording is found by its name;
one it never launched is recorded as a failed launch. Nothing is launched twice."""
from __future__ import annotations

import json
import sys
import time

import pytest

from engines import process
from engines.local import LocalEngine
from master.job.book import JobBook, ProcState
from master.job.driver import JobDriver
from master.job.spec import parse_spec

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
SPEC = {"name": "t", "workers": {"command": "true", "min": 1, "max": 3,
                                 "markets": [{"name": "spot", "price": 0.3},
                                             {"name": "on-demand", "price": 1.0}]}}


def test_a_new_leader_adopts_resolves_and_launches_nothing_twice(tmp_path, leader_parts):
    store, core, committer = leader_parts
    run = tmp_path / "run"
    old = LocalEngine(run)
    book = committer.call(lambda: JobBook(core.journal))
    committer.call(lambda: book.begin("t", "{}", "127.0.0.1:1"))
    recorded = committer.call(lambda: book.launching("worker", "spot"))
    handle = old.launch("worker", recorded.name, "spot", SLEEP, process.clean_env())
    committer.call(lambda: book.launched(recorded, handle))
    unrecorded = committer.call(lambda: book.launching("worker", "spot"))
    old.launch("worker", unrecorded.name, "spot", SLEEP, process.clean_env())  # then it died
    never = committer.call(lambda: book.launching("worker", "on-demand"))
    old.close()

    row, procs = store.job()
    new = LocalEngine(run)
    try:
        book2 = committer.call(lambda: JobBook(core.journal, row, procs))
        assert {p.name: p.state for p in book2.procs.values()} == {
            recorded.name: "running", unrecorded.name: "launching", never.name: "launching"}
        driver = JobDriver(parse_spec(SPEC), core, committer, book2, new, masters="m:1",
                           workdir=run)
        driver.adopt()
        assert sorted(h.name for h in new.running()) == sorted([recorded.name,
                                                                 unrecorded.name])
        assert book2.procs[unrecorded.name].engine_id  # found by its name, now recorded
        assert never.name not in book2.procs
        _, rows = store.job()
        states = {r["name"]: (r["state"], r["cause"]) for r in rows}
        assert states[never.name] == ("failed", "launch not confirmed")
        assert states[unrecorded.name][0] == "running"
        failed = [json.loads(e["detail"]) for e in store.events_of_kind("node_launch_failed")]
        assert [e["name"] for e in failed] == [never.name]
        assert committer.call(lambda: book2.launches) == 3  # no name is ever used again
        # a process that ends is seen by the new leader, its status read from its file
        process.signal_group(int(handle.id.split(":")[0]), 15)
        deadline = time.monotonic() + 30
        while recorded.name in book2.procs and time.monotonic() < deadline:
            driver.step()
            time.sleep(0.1)
        _, rows = store.job()
        ended = {r["name"]: r for r in rows}[recorded.name]
        assert (ended["state"], ended["exit_code"]) == (ProcState.EXITED, -15)
    finally:
        new.stop_all(graceful=False)
        new.close()
