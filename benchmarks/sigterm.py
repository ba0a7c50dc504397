"""Worker SIGTERM (a spot reclaim notice) -> the worker process has exited.

A real job on this machine: a master, 2 PS and CTR workers (`examples.ctr.train`, the real
model and SDK). Once the victim holds a lease (it is training), it gets SIGTERM; the time until
its process has exited is the hand-back (finish or abandon the step, LeaveWorker with exact
offsets, exit 0). "quiet": the victim is the only worker; "load": it trains beside
`--load-workers` others, all sharing the machine's cores with the master and the PS.
Each trial starts a fresh victim; its exit code must be 0.

    python scripts/bench_sigterm.py --trials 5 --load-workers 3
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path

from cluster.local import LocalCluster
from examples.ctr import data as ctr_data


def trial(cluster: LocalCluster, settle_s: float) -> tuple[float, int]:
    name = cluster.add_worker()
    cluster._wait(lambda: cluster.training(name), 120, f"{name} to train")
    time.sleep(settle_s)  # a few steps in: a push and a prefetch are in flight
    proc = cluster.workers[name]
    started = time.perf_counter()
    proc.signal(signal.SIGTERM)
    code = proc.wait(60)
    return time.perf_counter() - started, code


def run(mode: str, trials: int, load_workers: int, data: Path, workdir: Path) -> dict:
    args = ("--epochs", "50", "--batch-size", "256", "--shard-size", "2000", "--log-every",
            "60")
    with LocalCluster(workdir / mode, data, worker_module="examples.ctr.train", num_ps=2,
                      train_args=args) as cluster:
        for _ in range(load_workers if mode == "load" else 0):
            name = cluster.add_worker()
            cluster._wait(lambda: cluster.training(name), 120, f"{name} to train")
        times, codes = [], []
        for _ in range(trials):
            seconds, code = trial(cluster, settle_s=1.5)
            times.append(seconds)
            codes.append(code)
    return dict(mode=mode, trials=trials, load_workers=load_workers if mode == "load" else 0,
                seconds=[round(t, 3) for t in times], exit_codes=codes,
                min=round(min(times), 3), median=round(statistics.median(times), 3),
                max=round(max(times), 3))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--load-workers", type=int, default=3)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sigterm-") as tmp:
        work = Path(tmp)
        ctr_data.main(["--out", str(work / "data"), "--records", str(args.records),
                       "--test-records", "1000", "--seed", "3"])
        results = [run(mode, args.trials, args.load_workers, work / "data", work)
                   for mode in ("quiet", "load")]
    for r in results:
        print(f"{r['mode']:>5} ({r['load_workers']} other workers): SIGTERM -> exit "
              f"min {r['min']:.2f} / median {r['median']:.2f} / max {r['max']:.2f} s over "
              f"{r['trials']} trials, exit codes {sorted(set(r['exit_codes']))}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if all(c == 0 for r in results for c in r["exit_codes"]) else 1
