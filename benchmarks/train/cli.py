"""bench_train: records/s of the CTR job through elastic-ps against a local torch loop.

    python scripts/bench_train.py                  # 3 rounds, batch 256 and 1024
    python scripts/bench_train.py --rounds 1 --records 50000 --batches 1024

Per round and batch size, alternating, the same data, model, optimizer and epochs:
local tensor loop, local record-by-record loop, elastic-ps with 1 worker, with 2 workers
(each elastic run: its own master and 2 PS). Printed: records/s, the ratio to the local tensor
loop of the same round (medians over rounds), the final held-out AUC of each run, and the step
timeline of the elastic runs (share of worker wall time reading, waiting on pulls, computing,
waiting on pushes). Floors (docs/benchmarks.md, issue 15): 1 worker >= 0.5x at batch 1024, >= 0.35x at
batch 256, AUC within 0.005 of the local loop.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import report
from benchmarks.train import elastic, local

RUNS = ("local-tensor", "local-record", "elastic-1w", "elastic-2w", "elastic-1w-plain",
        "elastic-1w-backup", "elastic-1w-inflight1")
DEFAULT_RUNS = RUNS[:4]
FLOORS = {256: 0.35, 1024: 0.5}


def make_data(out: Path, records: int, test_records: int, seed: int = 2026) -> None:
    from examples.ctr.data import main as make

    make(["--out", str(out), "--records", str(records), "--test-records", str(test_records),
          "--seed", str(seed)])


def one(kind: str, data: str, tmp: Path, batch: int, epochs: int, lr: float,
        max_inflight: int, prefetch_ahead: int) -> dict:
    if kind == "local-tensor":
        return local.train(data, batch, epochs, lr, records=False)
    if kind == "local-record":
        return local.train(data, batch, epochs, lr, records=True)
    workers = int(kind.split("-")[1][0])
    if kind.endswith("inflight1"):
        max_inflight = prefetch_ahead = 1
    return elastic.run(data, tmp / f"{kind}-{batch}", batch, epochs, lr, workers=workers,
                       plain=kind.endswith("plain"), backups=int(kind.endswith("backup")),
                       max_inflight=max_inflight, prefetch_ahead=prefetch_ahead)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--test-records", type=int, default=50_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-inflight", type=int, default=2,
                   help="pushes in flight of the elastic workers (one I/O lane each)")
    p.add_argument("--prefetch-ahead", type=int, default=1,
                   help="batches ahead whose data the elastic workers prefetch: 2 lets two "
                   "steps' messages overlap, and the parameters then miss two pushes")
    p.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), choices=RUNS,
                   help="elastic-1w-plain: one worker without prefetch, synchronous pushes; "
                   "elastic-1w-backup: one worker, a backup per PS index (--ps-replicas 1); "
                   "elastic-1w-inflight1: one worker, one push in flight, prefetching one "
                   "batch ahead")
    p.add_argument("--json", help="write every measurement here")
    a = p.parse_args(argv)
    print(f"bench_train on {report.machine()}, commit {report.git_commit('worker_sdk')}")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        data = str(tmp / "data")
        make_data(Path(data), a.records, a.test_records)
        for r in range(a.rounds):
            for batch in a.batches:
                for kind in a.runs:
                    got = one(kind, data, tmp / f"round{r}", batch, a.epochs, a.lr,
                              a.max_inflight, a.prefetch_ahead)
                    results.setdefault(batch, {}).setdefault(kind, []).append(got)
                    print(f"round {r + 1} batch {batch:5d} {kind:13s} "
                          f"{got['records_per_s']:9.0f} records/s  AUC {got['auc']:.4f}"
                          + (_timeline(got) if "timeline" in got else ""), flush=True)
    print(summary(results))
    if a.json:
        report.write_json(a.json, {str(k): v for k, v in results.items()})
    return 0


def _timeline(got: dict) -> str:
    t = got["timeline"]
    return (f"  read {t['read']:.0%} pull {t['pull']:.0%} compute {t['compute']:.0%} "
            f"push {t['push']:.0%}")


def summary(results: dict) -> str:
    lines = ["", "| batch | run | records/s (median) | ratio to local tensor (median of "
             "rounds) | AUC (median) | timeline: read / pull / compute / push |",
             "| --- | --- | --- | --- | --- | --- |"]
    for batch, runs in sorted(results.items()):
        base = runs.get("local-tensor")
        for kind, got in runs.items():
            rate = statistics.median(g["records_per_s"] for g in got)
            ratio = (statistics.median(g["records_per_s"] / b["records_per_s"]
                                       for g, b in zip(got, base)) if base else float("nan"))
            auc = statistics.median(g["auc"] for g in got)
            tl = ""
            if "timeline" in got[0]:
                tl = " / ".join(f"{np.median([g['timeline'][k] for g in got]):.0%}"
                                for k in ("read", "pull", "compute", "push"))
            lines.append(f"| {batch} | {kind} | {rate:,.0f} | {ratio:.2f} | {auc:.4f} | {tl} |")
        if base and "elastic-1w" in runs:
            ratio = statistics.median(g["records_per_s"] / b["records_per_s"]
                                      for g, b in zip(runs["elastic-1w"], base))
            gap = abs(statistics.median(g["auc"] for g in runs["elastic-1w"])
                      - statistics.median(g["auc"] for g in base))
            floor = FLOORS.get(batch)
            if floor:
                lines.append(f"|  | floor 1 worker >= {floor}x: "
                             f"{'met' if ratio >= floor else 'MISSED'} ({ratio:.2f}x); AUC gap "
                             f"{gap:.4f} ({'met' if gap <= 0.005 else 'MISSED'}) | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
