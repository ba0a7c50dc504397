#!/usr/bin/env python3
"""The CTR job on Ray against the local engine, and through a drained spot node (issue 40).

Starts a local multi-node Ray (`ray.cluster_utils.Cluster`: a head with no CPUs, an
`on-demand` node, a `spot` node, every Ray process on 127.0.0.1), then runs the same CTR job
(`examples.ctr.train`, workers min 2 / max 2, spot first) twice with `elastic-job run`: on the
local engine, and on Ray, where the spot node is drained for preemption once `--drain-at` of
the records are trained and removed once its workers handed back. From the master's database,
polled while the job runs:

- records/s of each run over the same stretch (from 10% of the records trained to
  `--drain-at`: before any drain), and their ratio (the issue's target: Ray >= 0.8x local);
- on Ray: seconds from the drain to the replacements' first trained records (the first
  progress the master recorded from an on-demand worker), and each run's whole-job records/s;
- every record trained (epochs exact), nothing left running.

    python scripts/bench_ray.py --records 30000 --json ray.json
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray: loopback only
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from cluster.launch import CODE_ROOT, child_env  # noqa: E402
from examples.ctr import data as ctr_data  # noqa: E402

HEALTH_CHECK = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000,
                "health_check_failure_threshold": 3}
POLL_S = 0.25


def write_job(work: Path, data: Path, engine: str, args, address: str = "") -> Path:
    spec = {
        "name": "bench",
        "engine": engine,
        "engine_options": {"address": address} if engine == "ray" else {},
        "master": {"db": f"sqlite:///{work / 'master.db'}", "port": 0, "standbys": 0},
        "ps": {"count": 1},
        "workers": {"command": [sys.executable, "-m", "examples.ctr.train", "--data", str(data),
                                "--epochs", "1", "--log-every", "50"],
                    "min": 2, "max": 2,
                    "markets": [{"name": "spot", "price": 0.12},
                                {"name": "on-demand", "price": 0.40}]},
        "scaling": {"interval_s": args.interval, "spot_wait_s": args.spot_wait},
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _query(db: Path, sql: str, *params) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        return []  # not created yet, or a migration runs


def trained(db: Path) -> int:
    # a lease handed back on a notice keeps what it trained (records_done; the rest requeued)
    rows = _query(db, "select coalesce(sum(records_done), 0) from leases "
                      "where state in ('done', 'doing', 'requeued')")
    return int(rows[0][0]) if rows else 0


def ondemand_progress(db: Path) -> bool:
    """Whether an on-demand worker has trained a record the master knows of."""
    return bool(_query(db, "select 1 from leases l join workers w on l.worker_id = w.worker_id "
                           "where w.labels like '%on-demand%' and (l.records_done > 0 or "
                           "l.state = 'done') limit 1"))


def follow(proc: subprocess.Popen, db: Path, records: int, on_drain=None,
           drain_at: float = 1.0) -> dict:
    """Poll the job until `elastic-job` exits: its progress timeline, and (with `on_drain`)
    the drain at `drain_at` of the records and the first replacement progress after it."""
    timeline, drained_at, replaced_at = [], None, None
    while proc.poll() is None:
        now, done = time.monotonic(), trained(db)
        timeline.append((now, done))
        if on_drain and drained_at is None and done >= drain_at * records:
            on_drain()
            drained_at = time.monotonic()
        if drained_at is not None and replaced_at is None and ondemand_progress(db):
            replaced_at = time.monotonic()
        time.sleep(POLL_S)
    return {"timeline": timeline, "drained_at": drained_at, "replaced_at": replaced_at}


def rate(timeline: list[tuple[float, int]], lo: float, hi: float) -> float | None:
    """Records/s between the first polls at or above `lo` and `hi` records."""
    a = next((p for p in timeline if p[1] >= lo), None)
    b = next((p for p in timeline if p[1] >= hi), None)
    if a is None or b is None or b[0] <= a[0]:
        return None
    return (b[1] - a[1]) / (b[0] - a[0])


def run_job(spec: Path, work: Path, env: dict, args, on_drain=None) -> dict:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "master.job.cli", "run", str(spec),
                             "--json", str(work / "summary.json")], cwd=CODE_ROOT, env=env,
                            stdout=open(work / "elastic-job.log", "w"),
                            stderr=subprocess.STDOUT)
    try:
        seen = follow(proc, work / "master.db", args.records, on_drain, args.drain_at)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    wall = time.monotonic() - started
    summary = json.loads((work / "summary.json").read_text()) \
        if (work / "summary.json").exists() else {}
    out = {"exit_code": code, "epochs_exact": bool(summary.get("epochs_exact")),
           "records": summary.get("records"), "wall_s": round(wall, 1),
           "steady_rps": rate(seen["timeline"], 0.1 * args.records,
                              args.drain_at * args.records),
           "job_rps": rate(seen["timeline"], 1, args.records)}
    if seen["drained_at"] is not None:
        out["drain_to_replacement_progress_s"] = None if seen["replaced_at"] is None else \
            round(seen["replaced_at"] - seen["drained_at"], 1)
    return out


def ray_run(work: Path, data: Path, args) -> dict:
    import ray
    from ray.cluster_utils import Cluster
    from ray.core.generated import autoscaler_pb2

    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False,
                                      "_system_config": HEALTH_CHECK})
    nodes = {m: cluster.add_node(num_cpus=n, labels={"market": m})
             for m, n in (("on-demand", 4), ("spot", 2))}
    try:
        cluster.wait_for_nodes()
        cluster.connect()
        loopback = {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        gcs = ray._raylet.GcsClient(address=cluster.address)

        def drain() -> None:
            deadline_ms = int((time.time() + args.drain_deadline_s) * 1000)
            accepted, why = gcs.drain_node(
                nodes["spot"].node_id,
                autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                "bench: spot reclaimed", deadline_ms)
            if not accepted:
                raise RuntimeError(f"the drain was refused: {why}")

        spec = write_job(work, data, "ray", args, cluster.address)
        env = {**child_env(), "RAY_ADDRESS": cluster.address}
        out = run_job(spec, work, env, args, on_drain=drain)
        out["all_ray_processes_on_loopback"] = loopback
        return out
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=30_000)
    p.add_argument("--interval", type=float, default=2.0, help="scaling.interval_s")
    p.add_argument("--spot-wait", type=float, default=180.0,
                   help="spot_wait_s: above a worker's start-up on this machine, so both "
                        "runs train on spot until the drain")
    p.add_argument("--drain-at", type=float, default=0.4,
                   help="drain the spot node once this share of the records is trained")
    p.add_argument("--drain-deadline-s", type=float, default=30.0)
    p.add_argument("--workdir", help="keep everything here (default: a temporary folder)")
    p.add_argument("--json", help="write the measurements here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        root = Path(args.workdir or tmp).resolve()
        data = root / "data"
        if not (data / "meta.json").exists():
            ctr_data.main(["--out", str(data), "--records", str(args.records),
                           "--test-records", "5000"])
        local = run_job(write_job(root / "local", data, "local", args), root / "local",
                        child_env(), args)
        on_ray = ray_run(root / "ray", data, args)
    ratio = on_ray["steady_rps"] / local["steady_rps"] \
        if on_ray["steady_rps"] and local["steady_rps"] else None
    result = {"local": local, "ray": on_ray,
              "ray_over_local_steady_rps": None if ratio is None else round(ratio, 3),
              "settings": vars(args)}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = all(r["exit_code"] == 0 and r["epochs_exact"] for r in (local, on_ray))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
