"""bench_resize: the PS set resized 2 -> 4 -> 2 while a worker trains, live and
stop-the-world, side by side in one run (issue 25; docs/benchmarks.md, "Live PS resize").

A master (1024 slots), 2 PS and one worker (benchmarks/resize/worker.py: 1 M rows of dim 16
with Adagrad, an MLP, pushing every step). After `--steps` steps of training it resizes live
2 -> 4, trains, resizes live 4 -> 2, trains, then the same two resizes stop-the-world, trains,
and stops the worker, which checks that every pushed value is exact. Printed: per resize the
time to finish, records/s during it against the `--steps` steps before, the longest step wait
during it, the slots moved, the rows held after it, the exit codes of the PS that left.

    python scripts/bench_resize.py                    # 1 M rows
    python scripts/bench_resize.py --rows 100000 --steps 100 --json out.json
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from ..report import git_commit, machine, write_json
from . import report
from .run import Bench

PLAN = [("live", 4), ("live", 2), ("stop-the-world", 4), ("stop-the-world", 2)]


def run(args, workdir: Path) -> dict:
    worker_args = ["--rows", str(args.rows), "--batch", str(args.batch)]
    phases = []
    with Bench(workdir, worker_args) as bench:
        load_s = bench.start(num_ps=2)
        print(f"{args.rows} rows loaded into 2 PS in {load_s:.1f} s; training", flush=True)
        bench.go()
        bench.train(args.steps)
        for way, target in [(w, t) for w, t in PLAN if w in args.ways]:
            phase = bench.live(target) if way == "live" else bench.stop_the_world(target)
            phases.append(phase)
            print(f"  {way} {phase.before} -> {phase.after}: {phase.seconds:.2f} s, "
                  f"{phase.slots_moved} slots moved", flush=True)
            bench.train(args.steps)
        result = bench.stop_worker()
    rows = [report.measure(p, result, args.steps) for p in phases]
    return {"resizes": rows, "check": {k: v for k, v in result.items()
                                    if k not in ("end", "wait", "push", "resumes")},
            "load_s": load_s, "max_wait_outside_pauses_s": _longest_outside(phases, result)}


def _longest_outside(phases, result) -> float:
    pauses = [(p.started, p.finished) for p in phases if p.way != "live"]
    waits = [w for e, w in zip(result["end"], result["wait"])
             if not any(a <= e <= b + 0.5 for a, b in pauses)]
    return round(max(waits, default=0.0), 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help='rows of the table "emb"')
    p.add_argument("--steps", type=int, default=300,
                   help="steps trained before each resize (the records/s before it)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--ways", default="live,stop-the-world", type=lambda v: v.split(","),
                   help="which ways to resize (comma-separated; default both)")
    p.add_argument("--workdir", default="", help="keep logs here (default: a temporary dir)")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    where, commit = machine(), git_commit("ps")
    print(f"machine: {where}; commit {commit}", flush=True)
    started = time.monotonic()
    if args.workdir:
        results = run(args, Path(args.workdir))
    else:
        with tempfile.TemporaryDirectory(prefix="bench-resize-") as tmp:
            results = run(args, Path(tmp))
    results.update(machine=where, commit=commit, table_rows=args.rows,
                   steps=args.steps, batch=args.batch, wall_s=round(time.monotonic() - started))
    print("\n".join(report.table(results["resizes"], args.rows)))
    check = results["check"]
    print(f"exact: {check['exact']} ({check.get('answered')} steps answered, "
          f"{check.get('verify_pushes')} verify-row pushes, {check.get('verify_rows_wrong')} "
          f"rows and {check.get('counters_wrong')} counters wrong); longest step wait "
          f"outside the stop-the-world pauses {results['max_wait_outside_pauses_s']:.3f} s; "
          f"{results['wall_s']} s in all")
    if not check["exact"] and check.get("diagnosis"):
        print(report.diagnosis(check["diagnosis"]))
    if args.json:
        write_json(args.json, results)
    rows_ok = all(r["rows_after"] == args.rows for r in results["resizes"])
    exits_ok = all(c == 0 for r in results["resizes"] for c in r["exit_codes"].values())
    return 0 if check["exact"] and rows_ok and exits_ok else 1


if __name__ == "__main__":
    sys.exit(main())
