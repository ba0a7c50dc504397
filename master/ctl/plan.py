"""`elastic-ctl plan [--json]`: the job the master drives, its targets per role and market,
the last decisions and why (GetPlan); and the job's market prices `elastic-ctl cost` uses
when no --price is given."""
from __future__ import annotations

import json
from datetime import datetime

import grpc

from protos import master_pb2 as pb
from rpckit.errors import reason_of


def plan_dict(r: pb.GetPlanResponse) -> dict:
    return {
        "job": r.job, "state": r.state, "started_ms": r.started_ms, "masters": r.masters,
        "targets": [{"role": t.role, "market": t.market, "target": t.target,
                     "running": t.running} for t in r.targets],
        "decisions": [{"seq": d.seq, "time_ms": d.time_ms, "role": d.role, "market": d.market,
                       "from": d.from_count, "to": d.to_count, "reason": d.reason,
                       "signals": json.loads(d.signals or "{}")} for d in r.decisions],
        "decisions_by_reason": dict(sorted(r.decisions_by_reason.items())),
        "processes": [{"name": p.name, "role": p.role, "market": p.market, "slot": p.slot,
                       "state": p.state, "cause": p.cause,
                       "exit_code": p.exit_code if p.exited else None}
                      for p in r.processes],
        "processes_not_shown": r.processes_not_shown,
        "prices": dict(sorted(r.prices.items())),
    }


def _rows(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in [headers, *rows]]


def format_plan(r: pb.GetPlanResponse) -> str:
    out = [f"JOB {r.job}: {r.state} (masters {r.masters})", "", "TARGETS"]
    out += _rows(["role", "market", "target", "running", "price/hour"],
                 [[t.role, t.market, str(t.target), str(t.running),
                   f"{r.prices.get(t.market, 0):.4f}"] for t in r.targets]) \
        if r.targets else ["  (none yet)"]
    out += ["", "LAST DECISIONS"]
    out += _rows(["time", "role", "market", "from", "to", "reason"],
                 [[f"{datetime.fromtimestamp(d.time_ms / 1000):%H:%M:%S}", d.role, d.market,
                   str(d.from_count), str(d.to_count), d.reason] for d in r.decisions]) \
        if r.decisions else ["  (none yet)"]
    by_reason = ", ".join(f"{k} {v}" for k, v in sorted(r.decisions_by_reason.items()))
    out += ["", f"DECISIONS BY REASON: {by_reason or '-'}", "", "PROCESSES"]
    out += _rows(["name", "role", "market", "state"],
                 [[p.name, p.role, p.market, p.state] for p in r.processes]) \
        if r.processes else ["  (none live)"]
    if r.processes_not_shown:
        out.append(f"  (not shown: {r.processes_not_shown} processes)")
    return "\n".join(out)


def cmd_plan(stub, args) -> int:
    r = stub.GetPlan(pb.GetPlanRequest(decisions=args.decisions, ended=args.ended),
                     timeout=args.timeout)
    print(json.dumps(plan_dict(r), indent=2) if args.json else format_plan(r))
    return 0


def job_prices(stub, timeout: float) -> dict[str, float]:
    """{"market=NAME": price per hour} of the job the master drives ({} without a job)."""
    try:
        r = stub.GetPlan(pb.GetPlanRequest(decisions=1), timeout=timeout)
    except grpc.RpcError as exc:
        if reason_of(exc) == "NO_JOB":
            return {}
        raise
    return {f"market={m}": p for m, p in r.prices.items()}


def add_parser(sub) -> None:
    pl = sub.add_parser("plan", help="the job the master drives: targets per role and market, "
                        "the last decisions and why")
    pl.add_argument("--json", action="store_true", help="print it as JSON")
    pl.add_argument("--decisions", type=int, default=20,
                    help="how many of the last decisions (at most 200)")
    pl.add_argument("--ended", action="store_true", help="also the processes that ended")
    pl.set_defaults(fn=cmd_plan)
