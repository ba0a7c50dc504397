"""A finished (or stopped) job's summary, from what the master answers: records and epochs
(GetStatus), goodput and worker-seconds by market (GetLedger, as `elastic-ctl report` and
`cost` read them), the processes and decisions (GetPlan, as `elastic-ctl plan`).

Workers are priced by their `market=NAME` label's worker-seconds in the ledger (what
`elastic-ctl cost` prices), the PS set by its processes' seconds, the masters by how long
each ran; all at the spec's price per process-hour of their market.
"""
from __future__ import annotations

import json
from collections import Counter

from protos import master_pb2 as pb


def epochs_exact(ds: pb.DatasetStatus) -> bool:
    """Every epoch finished with each record counted once, none quarantined."""
    n = ds.spec.num_records
    return (len(ds.epochs) == ds.spec.num_epochs and
            all(e.records_done == n and e.finished and e.quarantined == 0
                for e in ds.epochs))


def summarize(status: pb.GetStatusResponse, ledger: pb.GetLedgerResponse,
              plan: pb.GetPlanResponse, master_seconds: float, wall_s: float) -> dict:
    prices = dict(plan.prices)
    cost: Counter = Counter()
    hours: Counter = Counter()
    for label in ledger.worker_seconds:
        key, _, market = label.label.partition("=")
        if key == "market" and market in prices:
            hours[f"worker/{market}"] += label.worker_seconds / 3600
            cost[market] += label.worker_seconds / 3600 * prices[market]
    for row in plan.process_seconds:
        if row.role != "worker" and row.market in prices:
            hours[f"{row.role}/{row.market}"] += row.seconds / 3600
            cost[row.market] += row.seconds / 3600 * prices[row.market]
    if plan.ps_market in prices:
        hours[f"master/{plan.ps_market}"] += master_seconds / 3600
        cost[plan.ps_market] += master_seconds / 3600 * prices[plan.ps_market]
    datasets = {ds.spec.name: {"records": sum(e.records_done for e in ds.epochs),
                               "epochs": len(ds.epochs), "num_epochs": ds.spec.num_epochs,
                               "records_per_epoch": ds.spec.num_records,
                               "epochs_exact": epochs_exact(ds)}
                for ds in status.datasets}
    records = sum(d["records"] for d in datasets.values())
    ended = Counter(p.cause for p in plan.processes if p.ended_ms)
    total = sum(cost.values())
    return {
        "job": plan.job, "state": plan.state, "seconds": round(wall_s, 1),
        "records": records, "datasets": datasets,
        "epochs_exact": bool(datasets) and all(d["epochs_exact"] for d in datasets.values()),
        "goodput": round(ledger.goodput, 4),
        "cost_by_market": {m: round(c, 6) for m, c in sorted(cost.items())},
        "cost": round(total, 6),
        "cost_per_million_records": round(total / records * 1e6, 4) if records else None,
        "hours": {k: round(h, 6) for k, h in sorted(hours.items())},
        "decisions_by_reason": dict(sorted(plan.decisions_by_reason.items())),
        "processes_ended": dict(sorted(ended.items())),
        "launches": len(plan.processes) + plan.processes_not_shown,
        # a command that exits at once is relaunched only after a growing wait
        "crashed_at_start": ended.get("crashed", 0),
    }


def format_summary(s: dict) -> str:
    exact = "yes" if s["epochs_exact"] else "NO"
    lines = [f"job {s['job']}: {s['state']} in {s['seconds']:.0f} s",
             f"  records      {s['records']} (epochs exact: {exact})"]
    for name, d in s["datasets"].items():
        lines.append(f"    {name}: {d['records']} records, {d['epochs']}/{d['num_epochs']} "
                     f"epochs of {d['records_per_epoch']}")
    lines.append(f"  goodput      {s['goodput']:.3f}")
    per_m = s["cost_per_million_records"]
    lines.append(f"  cost         {s['cost']:.4f} "
                 f"({', '.join(f'{m} {c:.4f}' for m, c in s['cost_by_market'].items()) or '-'})"
                 f"; per million records: {per_m if per_m is not None else '-'}")
    lines.append("  hours        " + (", ".join(f"{k} {h:.4f}" for k, h in s["hours"].items())
                                      or "-"))
    lines.append("  decisions    " + (", ".join(f"{r} {n}" for r, n in
                                                s["decisions_by_reason"].items()) or "-"))
    lines.append("  ended        " + (", ".join(f"{c} {n}" for c, n in
                                                s["processes_ended"].items()) or "-"))
    if s["crashed_at_start"]:
        lines.append(f"  note         {s['crashed_at_start']} processes exited at start-up; "
                     "relaunched after a growing wait (see node_exited events)")
    return "\n".join(lines)


def write_json(path: str, summary: dict) -> None:
    with open(path, "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
        f.write("\n")
