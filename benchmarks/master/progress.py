"""[5] The cost of progress reports: at the largest client count, batched-path shards/s
without and with PROGRESS reports, alternating run by run on fresh masters."""
from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.master.load import Clients
from benchmarks.master.servers import create_dataset, start_master
from cluster.launch import Launcher

PROGRESS_KINDS = ("batched", "progress-heartbeat", "progress-piggyback")


def bench_progress(args, workdir: Path, log) -> dict:
    """Batched path at the largest client count, with and without PROGRESS reports, alternating
    run by run (batched, with heartbeats, piggybacked, batched, ...), each on a fresh master."""
    k = max(args.clients)
    clients = Clients(k)
    launcher = Launcher(workdir)
    runs = []
    try:
        for rnd in range(args.progress_rounds):
            for kind in PROGRESS_KINDS:
                server = start_master(launcher, f"progress-{kind}-r{rnd}")
                try:
                    create_dataset(server.port, "bench", 10_000_000, 10, 1000)
                    r = clients.run(k, kind, server.port, "bench", args.duration, server.pid)
                finally:
                    code = server.stop()
                r.update(round=rnd, server_exit=code)
                runs.append(r)
                log(f"  {kind:18s} {k:2d} clients: {r['shards_per_s']:7.0f} shards/s "
                    f"{r['calls_per_s']:7.0f} calls/s p50 {r['p50_ms']:.2f} ms p99 "
                    f"{r['p99_ms']:.2f} ms server CPU {r['server_cpu']:.2f} cores, "
                    f"refused {r['refused']}, errors {r['errors']}"
                    + (f" ({r['first_error']})" if r["first_error"] else ""))
    finally:
        clients.close()
        launcher.close()
    rows = []
    base = [r for r in runs if r["kind"] == "batched"]
    for kind in PROGRESS_KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        shards = statistics.mean(r["shards_per_s"] for r in mine)
        # per round against the batched run of the same round (run just before it)
        per_round = [r["shards_per_s"] / b["shards_per_s"] for r, b in zip(mine, base)
                     if b["shards_per_s"]]
        rows.append(dict(
            kind=kind, clients=k, rounds=len(mine), shards_per_s=shards,
            shards_per_s_runs=[r["shards_per_s"] for r in mine],
            calls_per_s=statistics.mean(r["calls_per_s"] for r in mine),
            p50_ms=statistics.mean(r["p50_ms"] for r in mine),
            p99_ms=statistics.mean(r["p99_ms"] for r in mine),
            server_cpu=statistics.mean(r["server_cpu"] for r in mine),
            # server CPU per shard acknowledged: what the progress reports add
            server_us_per_shard=statistics.mean(
                r["server_cpu"] * 1e6 / r["shards_per_s"] for r in mine if r["shards_per_s"]),
            ratio=shards / statistics.mean(b["shards_per_s"] for b in base),
            ratio_rounds=per_round,
            refused=sum(r["refused"] for r in mine), errors=sum(r["errors"] for r in mine),
        ))
    return {"runs": runs, "summary": rows}
