"""The Ray demo's fallback and return claims (examples/ctr/ray_steps.py) hold on a run where
everything happened, and each fails when its part did not. Pure: the master's answers are
built as its messages, no Ray and no network."""
from __future__ import annotations

import json

from examples.ctr.controller import Run
from examples.ctr.ray_steps import Drain, Return, claims, claims_ok, describe, trained_by
from protos import master_pb2 as pb

DEADLINE = 1_700_000_060_000
IDS = {"w2": "w-1", "w3": "w-2", "w4": "w-3", "w5": "w-4", "w6": "w-5", "w7": "w-6"}


def proc(name: str, market: str, launched: int, cause: str = "", code: int | None = None):
    return pb.PlanProcess(name=name, role="worker", market=market, launched_ms=launched,
                          ended_ms=launched + 1 if cause else 0, cause=cause,
                          exited=code is not None, exit_code=code or 0)


def plan(**changes) -> pb.GetPlanResponse:
    procs = {"w2": proc("w2", "spot", 100, "preempted", 0),
             "w3": proc("w3", "spot", 100, "preempted", 0),
             "w4": proc("w4", "on-demand", 2000, "market_returned", 0),
             "w5": proc("w5", "on-demand", 2000, "market_returned", 0),
             "w6": proc("w6", "spot", 5000), "w7": proc("w7", "spot", 5000)}
    procs.update(changes)
    return pb.GetPlanResponse(processes=list(procs.values()), decisions_by_reason={
        "below_min": 2, "replace_preempted": 2, "market_returned": 2})


def events(deadline: int = DEADLINE, cause: str = "preempted") -> list:
    out = [pb.Event(kind="node_preempted", cause="preempted",
                    detail=json.dumps({"name": n, "deadline_ms": deadline}))
           for n in ("w2", "w3")]
    out += [pb.Event(kind="worker_left", worker_id=IDS[n], cause="preempted")
            for n in ("w2", "w3")]
    out += [pb.Event(kind="lease_requeued", worker_id=IDS["w2"], cause=cause)]
    return out


def steps() -> tuple[Drain, Return]:
    drain, back = Drain(0.25), Return(0.55)
    drain.victims, drain.deadline_ms = ["w2", "w3"], DEADLINE
    drain.replacements, drain.first_trained_s = ["w4", "w5"], 12.5
    back.joined_ms = 4000
    return drain, back


def check(events_=None, plan_=None, trained=None) -> dict:
    run = Run("on Ray", events=events() if events_ is None else events_)
    drain, back = steps()
    return claims(run, drain, back, plan() if plan_ is None else plan_, IDS,
                  {n: 100 for n in IDS} if trained is None else trained)


def test_a_run_where_everything_held_is_ok_and_says_so():
    c = check()
    assert claims_ok(c), c
    text = "\n".join(describe(c))
    assert "w2 (w-1) SIGTERMed by the drain: left (worker_left, preempted): True, exit " \
        "code 0" in text
    assert "drain to their first records trained: 12.5 s" in text
    assert c["back_on_spot"] == ["w6", "w7"]


def test_each_missing_part_fails_the_claims():
    broken = [
        check(events_=events(deadline=DEADLINE + 1)),          # not the drain's notice
        check(events_=events(cause="lost")),                   # a lease lost: a failure spent
        check(events_=[e for e in events() if e.kind != "worker_left"]),  # no hand-back
        check(plan_=plan(w3=proc("w3", "spot", 100, "lost"))),  # a drained worker lost
        check(plan_=plan(w2=proc("w2", "spot", 100, "preempted", 1))),  # exited 1
        check(trained={**{n: 100 for n in IDS}, "w5": 0}),     # a replacement never trained
        check(trained={**{n: 100 for n in IDS}, "w7": 0}),     # a returned one never trained
        check(plan_=plan(w6=proc("w6", "on-demand", 5000))),   # not back on spot
        check(plan_=plan(w4=proc("w4", "on-demand", 2000))),   # an on-demand one still runs
    ]
    assert [claims_ok(c) for c in broken] == [False] * len(broken)


def test_trained_counts_done_leases_whole_and_taken_back_ones_by_their_progress():
    leases = [{"worker_id": "w-1", "state": "done", "start_rec": 0, "end_rec": 256,
               "records_done": 0},
              {"worker_id": "w-1", "state": "requeued", "start_rec": 256, "end_rec": 512,
               "records_done": 100},
              {"worker_id": "w-3", "state": "doing", "start_rec": 512, "end_rec": 768,
               "records_done": 0}]
    assert trained_by(leases, {"w2": "w-1", "w4": "w-3", "w9": "w-9"}) == \
        {"w2": 356, "w4": 0, "w9": 0}
