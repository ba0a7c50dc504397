"""The job's durable record (master/job/book.py): rows written before a launch, states, and a
book rebuilt from the rows keeps exactly the live processes."""
from __future__ import annotations

import json

from engines.port import Handle
from master.job.book import JobBook, JobState, ProcState
from master.persistence.journal import Journal


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


def rows(journal: Journal, table: str) -> dict:
    batch = journal.swap()
    out = {k: dict(v) for k, v in batch.inserts[table].items()}
    for key, row in batch.updates[table].items():
        out.setdefault(key, {}).update(row)
    return out


def test_a_process_has_its_row_before_its_launch_and_its_end_after():
    journal = Journal(clock=Clock())
    book = JobBook(journal)
    book.begin("ctr", "{}", "127.0.0.1:1")
    proc = book.launching("worker", "spot")
    assert proc.name == "ctr-worker-1" and proc.state == ProcState.LAUNCHING
    written = rows(journal, "job_processes")
    assert written["ctr-worker-1"]["state"] == "launching"
    assert written["ctr-worker-1"]["engine_id"] == ""
    job = rows(journal, "job")  # nothing pending after the swap: the counter went out before
    assert job == {}

    book.launched(proc, Handle("worker", proc.name, "spot", "42:7", 5, "/logs/x.log"))
    book.mark(proc, ProcState.PREEMPTING, "preempted")
    assert [p.name for p in book.live("worker", "spot")] == ["ctr-worker-1"]
    book.end(proc, ProcState.EXITED, 0)
    written = rows(journal, "job_processes")["ctr-worker-1"]
    assert written == {"engine_id": "42:7", "log": "/logs/x.log", "state": "exited",
                       "cause": "preempted", "exit_code": 0, "ended_ms": 1000_000}
    assert book.live() == []


def test_a_book_rebuilt_from_its_rows_keeps_the_live_processes_and_counts_on():
    journal = Journal(clock=Clock())
    book = JobBook(journal)
    book.begin("ctr", "{}", "m:1")
    ps = book.launching("ps", "on-demand", slot=0)
    w1 = book.launching("worker", "spot")
    w2 = book.launching("worker", "spot")
    book.launched(ps, Handle("ps", ps.name, "on-demand", "1:1"))
    book.end(w2, ProcState.FAILED, None, "no_capacity")
    book.record({"workers": 2}, {"worker/spot": 2}, ["below_min", "below_min"])
    book.set_state(JobState.FINISHING)
    batch = journal.swap()
    job_row = {**batch.inserts["job"][1], **batch.updates["job"].get(1, {})}
    procs = [dict(r, **batch.updates["job_processes"].get(k, {}))
             for k, r in batch.inserts["job_processes"].items()]

    again = JobBook(Journal(clock=Clock()), job_row, procs)
    assert again.exists and again.state == JobState.FINISHING and again.started_ms == 1000_000
    assert sorted(again.procs) == [ps.name, w1.name]  # the failed launch is not live
    assert again.procs[ps.name].engine_id == "1:1"
    assert again.procs[w1.name].state == ProcState.LAUNCHING  # unconfirmed: to resolve
    assert again.decisions == {"below_min": 2} and again.policy == {"workers": 2}
    assert json.loads(job_row["targets"]) == {"worker/spot": 2}
    assert again.launching("worker", "spot").name == "ctr-worker-4"  # never a name again
