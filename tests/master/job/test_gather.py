"""One interval's Signals from the job's book (master/job/gather.py), without a network: who
is running, pending or under a notice, records/s and each PS's CPU share from two readings."""
from __future__ import annotations

from collections import Counter

from engines.port import Handle
from master.job.book import JobBook, ProcState
from master.job.gather import Gatherer, Since
from master.persistence.journal import Journal


def book_with(*procs: tuple[str, str, str]) -> JobBook:
    """(role, market, state) each; names JOB-ROLE-N."""
    book = JobBook(Journal(clock=lambda: 1000.0))
    book.begin("j", "{}", "m:1")
    for role, market, state in procs:
        proc = book.launching(role, market, 0 if role == "ps" else -1)
        if state != ProcState.LAUNCHING:
            book.launched(proc, Handle(role, proc.name, market, f"{proc.name}:1"))
            if state != ProcState.RUNNING:
                book.mark(proc, ProcState(state))
    return book


def test_running_pending_and_noticed_processes_are_told_apart():
    book = book_with(("worker", "spot", "running"), ("worker", "spot", "running"),
                     ("worker", "spot", "preempting"), ("worker", "on-demand", "launching"),
                     ("worker", "on-demand", "stopping"), ("ps", "on-demand", "running"))
    up = {"j-worker-1", "j-ps0-6"}  # registered; j-worker-2 launched and not registered yet
    since = Since(preempted=Counter({("worker", "spot"): 1}))
    s = Gatherer().signals(book, since, records=0, up=up, markets=["spot", "on-demand"],
                           admits={"on-demand"}, cpu={}, now=10.0)
    assert dict(s.running) == {("worker", "spot"): 1, ("ps", "on-demand"): 1}
    assert dict(s.pending) == {("worker", "spot"): 1, ("worker", "on-demand"): 1}
    assert dict(s.preempting) == {("worker", "spot"): 1}  # the stopping one counts nowhere
    assert dict(s.preempted) == {("worker", "spot"): 1}
    assert s.admits == frozenset({"on-demand"})


def test_rates_come_from_two_readings():
    book = book_with(("worker", "spot", "running"), ("worker", "spot", "running"))
    up = {"j-worker-1", "j-worker-2"}
    g = Gatherer()
    first = g.signals(book, Since(), 1000, up, ["spot"], {"spot"},
                      {"j-ps0-9": 5.0, "j-ps1-9": 1.0}, now=100.0)
    assert first.records_per_s == 0.0 and first.ps_cpu == ()  # nothing to compare with yet
    second = g.signals(book, Since(), 3000, up, ["spot"], {"spot"},
                       {"j-ps0-9": 9.0, "j-ps1-9": 1.5, "j-ps2-9": 0.0}, now=110.0)
    assert second.records_per_s == 200.0 and second.worker_rps == 100.0
    assert second.ps_cpu == (0.4, 0.05)  # busy share of each PS seen twice; the new one next
    third = g.signals(book, Since(), 3000, up, ["spot"], {"spot"}, {"j-ps0-9": 9.0},
                      now=120.0)
    assert third.records_per_s == 0.0 and third.ps_cpu == (0.0,)
