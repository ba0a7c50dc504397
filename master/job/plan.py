"""`GetPlan`'s answer: the job's targets, processes, its last decisions and why, bounded.

Read from the driver's book (in memory, under the committer's lock) and the store (the
`scale_decided` events, every process row for the process-seconds); the answer holds at most
MAX_DECISIONS decisions and MAX_PROCESSES processes, so it stays far under the 4 MiB limit.
"""
from __future__ import annotations

import json
from collections import Counter

from protos import master_pb2 as pb

from ..states import EventKind
from .book import ProcState

DEFAULT_DECISIONS = 20
MAX_DECISIONS = 200
MAX_PROCESSES = 1000


def plan_view(driver, store, request: pb.GetPlanRequest, now_ms: int) -> pb.GetPlanResponse:
    book, spec = driver.book, driver.spec
    limit = min(request.decisions or DEFAULT_DECISIONS, MAX_DECISIONS)
    targets, state = driver.committer.read(lambda: (dict(book.targets), str(book.state)))
    _, rows = store.job()
    reply = pb.GetPlanResponse(
        job=book.name, state=state, started_ms=book.started_ms, masters=book.masters,
        time_ms=now_ms, ps_market=spec.ps.market,
        prices={m.name: m.price for m in spec.workers.markets},
        decisions_by_reason=dict(book.decisions))
    running = Counter((r["role"], r["market"]) for r in rows
                      if ProcState(r["state"]).live)
    keys = {tuple(k.split("/", 1)) for k in targets} | set(running)
    for role, market in sorted(keys):
        reply.targets.append(pb.PlanTarget(role=role, market=market,
                                           target=targets.get(f"{role}/{market}", 0),
                                           running=running[(role, market)]))
    for event in store.events_of_kind(str(EventKind.SCALE_DECIDED), limit):
        d = json.loads(event["detail"])
        reply.decisions.append(pb.PlanDecision(
            seq=event["seq"], time_ms=event["time_ms"], role=d["role"], market=d["market"],
            from_count=d["from"], to_count=d["to"], reason=d["reason"],
            signals=json.dumps(d.get("signals", {}), sort_keys=True)))
    shown = [r for r in rows if request.ended or ProcState(r["state"]).live]
    shown = shown[-MAX_PROCESSES:]
    reply.processes_not_shown = (len(rows) if request.ended else
                                 sum(ProcState(r["state"]).live for r in rows)) - len(shown)
    for r in shown:
        reply.processes.append(pb.PlanProcess(
            name=r["name"], role=r["role"], market=r["market"], slot=r["slot"],
            state=r["state"], engine_id=r["engine_id"], launched_ms=r["launched_ms"],
            ended_ms=r["ended_ms"], exited=r["exit_code"] is not None,
            exit_code=r["exit_code"] or 0, cause=r["cause"]))
    seconds = Counter()
    for r in rows:
        if r["state"] == ProcState.FAILED:
            continue
        end = r["ended_ms"] or now_ms
        seconds[(r["role"], r["market"])] += max(0, end - r["launched_ms"]) / 1000
    for (role, market), s in sorted(seconds.items()):
        reply.process_seconds.append(pb.ProcessSeconds(role=role, market=market, seconds=s))
    return reply
