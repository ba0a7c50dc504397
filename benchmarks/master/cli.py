"""Benchmark the master against its performance targets (docs/benchmarks.md), on 127.0.0.1 only."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import report as common
from benchmarks.master import servers
from benchmarks.master.cost import bench_cost
from benchmarks.master.events import bench_events
from benchmarks.master.progress import bench_progress
from benchmarks.master.report import render
from benchmarks.master.rss import bench_rss
from benchmarks.master.throughput import bench_throughput


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="about a minute: short runs, fewer ops")
    p.add_argument("--duration", type=float, help="seconds per throughput run (default 5)")
    p.add_argument("--rounds", type=int,
                   help="echo/two-calls/echo/batched rounds per client count "
                   "(default 2, 1 with --quick)")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 8, 32], help="client process counts (default 1,8,32)")
    p.add_argument("--only", choices=["throughput", "cost", "rss", "progress", "events"],
                   action="append",
                   help="run only these parts (repeatable)")
    p.add_argument("--json", help="also write the results as JSON to this path")
    p.add_argument("--py-spy", help="profile the master during the largest batched run into "
                   "this file (.txt raw stacks, .json speedscope, else flamegraph .svg)")
    p.add_argument("--py-spy-gil", action="store_true",
                   help="with --py-spy: sample only the thread holding the GIL")
    p.add_argument("--dlrover-python", help="python of a separate venv with dlrover==0.6.1 "
                   "(pip install --no-deps dlrover==0.6.1 grpcio protobuf psutil requests "
                   "kubernetes): also run DLRover's local master, side by side")
    p.add_argument("--master-src", help="a directory holding a (patched) copy of the "
                   "`master` package to benchmark instead of this checkout's")
    args = p.parse_args(argv)
    # SIGTERM unwinds like an exception, so every server started is stopped on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.master_src:
        servers.MASTER_SRC = Path(args.master_src).resolve()
        if not (servers.MASTER_SRC / "master" / "__main__.py").exists():
            p.error(f"--master-src {args.master_src}: no master/__main__.py there")
    if args.duration is None:
        args.duration = 2.0 if args.quick else 5.0
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    args.cost_sizes = [10**3, 10**5, 10**6]
    args.cost_rounds = {False: 2 if args.quick else 3, True: 5 if args.quick else 9}
    args.cost_ops_core = 2000 if args.quick else 5000
    args.cost_ops_durable = 200 if args.quick else 500
    args.rss_shards = 10**6
    args.rss_workers = 1000
    args.rss_holders = 1000
    args.rss_churn = 70_000
    args.progress_rounds = args.rounds + 1  # 3 by default: the ratio is the point here
    args.events = 100_000
    args.events_per_commit = 100
    args.events_single = 2_000 if args.quick else 10_000
    args.events_rounds = 1 if args.quick else 3
    parts = args.only or ["throughput", "progress", "events", "cost", "rss"]

    def log(msg: str) -> None:
        print(msg, flush=True)

    machine = common.machine()
    results: dict = {"machine": machine, "argv": sys.argv[1:], "started": time.time(),
                     "commit": common.git_commit("master")}
    log(f"bench_master: {machine}; commit {results['commit']}"
        + (f"; master from {servers.MASTER_SRC}" if servers.MASTER_SRC else ""))
    began = time.monotonic()
    results["load_average"] = {}

    def part(name: str, title: str) -> None:
        load = os.getloadavg()
        results["load_average"][name] = load
        log(f"{title} (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")

    with tempfile.TemporaryDirectory(prefix="bench-master-") as tmp:
        workdir = Path(tmp)
        if "throughput" in parts:
            part("throughput", "[1+2] throughput, alternating echo / ours:")
            results["throughput"] = bench_throughput(args, workdir, log)
        if "progress" in parts:
            part("progress", f"[5] cost of progress reports, {max(args.clients)} clients, "
                 "alternating:")
            results["progress"] = bench_progress(args, workdir, log)
        if "events" in parts:
            part("events", f"[6] append and read {args.events:,} events:")
            results["events"] = bench_events(args, workdir, log)
        if "cost" in parts:
            part("cost", "[3] cost per shard operation:")
            results["cost"] = bench_cost(args, workdir, log)
        if "rss" in parts:
            part("rss", "[4] master RSS:")
            results["rss"] = bench_rss(args, workdir, log)
    results["elapsed_s"] = time.monotonic() - began
    results["load_average_end"] = os.getloadavg()[0]
    log("")
    log(render(results, args))
    log(f"\n(total {results['elapsed_s']:.0f} s, load average at end "
        f"{results['load_average_end']:.2f})")
    if args.json:
        common.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
