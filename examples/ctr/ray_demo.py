"""`scripts/demo --engine ray`: the CTR job on a local multi-node Ray that the demo starts
(examples/ctr/ray_job.py: a head with no CPUs, an on-demand node and a spot node, every Ray
process on 127.0.0.1), handed to the master with `elastic-job run` (engine ray, workers min 2
/ max 2, spot first). The schedule (examples/ctr/ray_steps.py) drains the spot node for
preemption mid-training, removes it, and later adds a new spot node; training is paced and
held for it as in the default demo (examples/ctr/pace.py, schedule.py, controller.loop).

The summary claims what the default demo claims of its job (every record of every epoch
counted done exactly once, from the master's lease history; the ledger's updates_lost 0;
nothing left running, in Ray or outside it), plus the fallback (the drained workers noticed
with the drain's deadline, handed back exactly and exited 0, no failure spent, replacements
trained on on-demand) and the return (workers back on spot once the new node joined, the
on-demand ones handed back). Exit 0 only when every claim held; the cluster is stopped on
every way out (a failed claim, an error, Ctrl-C, SIGTERM).
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path

from examples.ctr import data as ctr_data
from examples.ctr.controller import Job, Progress, Run, interrupted, loop, read_final
from examples.ctr.schedule import Schedule, State
from examples.ctr import ray_steps
from examples.ctr.summary import describe, describe_schedule, run_json

END = 0.9
RECORDS, EPOCHS, PACE_S = 8000, 1, 40.0  # small: the whole demo fits a 2-core machine
BATCH, SHARD = 128, 256


def main(args: argparse.Namespace) -> int:
    """`args`: examples.ctr.demo's, with --engine ray."""
    try:
        from examples.ctr.ray_job import RayJob  # first: it keeps Ray on 127.0.0.1
        import ray  # noqa: F401 - the ray extra (with psutil, which ray_job imports)
    except ImportError as exc:
        print(f"--engine ray needs the ray extra (pip install -e \".[ray]\"): {exc}",
              file=sys.stderr)
        return 2

    def on_signals() -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, interrupted)
    on_signals()
    records, epochs = args.records or RECORDS, args.epochs or EPOCHS
    pace_s = PACE_S if args.pace_s is None else args.pace_s
    work = Path(args.workdir).resolve() / "ray"
    shutil.rmtree(work / "job", ignore_errors=True)
    (work / "job").mkdir(parents=True)
    data = work / "ctr"
    if not (data / "meta.json").exists() or \
            f'"records": {records},' not in (data / "meta.json").read_text():
        ctr_data.main(["--out", str(data), "--records", str(records), "--test-records", "2000"])
    drain, back = ray_steps.Drain(0.25), ray_steps.Return(0.55)
    steps = [drain, ray_steps.Reclaim(None, drain), back]
    print(f"schedule on Ray ({records * epochs} records paced over about {pace_s:g} s; "
          "training is held where a step is not ready yet):")
    for step in steps:
        print(f"  {f'{step.at:4.0%}' if step.at is not None else '  --'}  {step.describe()}")
    job = Job(records * epochs, args.batch_size or BATCH, pace_s=pace_s,
              pace_file=work / "job" / "pace.json", workers=2, timeout=args.timeout)
    train = ["--data", str(data), "--epochs", str(epochs), "--batch-size", str(job.batch_size),
             "--shard-size", str(args.shard_size or SHARD), "--log-every", "10",
             "--pace-file", str(job.pace_file)]
    ray_job = RayJob(work / "job", train)
    started = time.monotonic()
    try:
        try:
            addresses = ray_job.start_cluster()
            on_signals()  # Ray's driver set its own SIGTERM handler (it aborts the process)
            print(f"\nRay: a head with no CPUs, an on-demand node, a spot node at "
                  f"{ray_job.address}; every node at {', '.join(addresses)}", flush=True)
            if addresses != ["127.0.0.1"]:
                print("FAIL: a Ray node is not on 127.0.0.1", file=sys.stderr)
                return 1
            ray_job.start_job(work / "job" / "summary.json")
            print(f"elastic-job run {ray_job.workdir / 'job.yaml'} (engine ray; logs in "
                  f"{ray_job.workdir})", flush=True)
            run, ctx, plan = train_on(ray_job, job, Schedule(steps, end=END))
            code = ray_job.wait_job(180)
            in_ray = ray_job.left_in_ray() if code is not None else ["elastic-job still runs"]
        finally:
            ray_job.close()
        outside = ray_job.left_outside()
    except KeyboardInterrupt:
        print("\ninterrupted: the job and the Ray cluster have been stopped", file=sys.stderr)
        return 130
    run.wall_s = time.monotonic() - started
    summary = summarize(run, ctx, plan, drain, back, code, in_ray, outside,
                        work / "job" / "summary.json")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0 if summary["ok"] else 1


def train_on(ray_job, job: Job, schedule: Schedule):
    """The default demo's loop on the Ray job, then what the summary proves, read from the
    master as soon as training ended (elastic-job stops it a little later)."""
    run = Run("on Ray, spot drained and back")
    ctx = ray_steps.RayContext(ray_job, run, active=2)
    progress = Progress(run.name, job.total)
    try:
        loop(ray_job, job, schedule, ctx, None, progress, time.monotonic())
    finally:
        progress.close()
    run.steps = schedule.to_json()
    for step in schedule.steps:
        if step.state == State.FAILED:
            run.skipped.append(f"{step.describe()}: {step.why}")
    plan = None
    try:
        leases = read_final(run, ray_job, 30)
        plan = ray_job.plan()
        ctx.status()  # the last workers' ids
        ctx.trained_now = ray_steps.trained_by(leases, ctx.worker_ids)
    except Exception as exc:  # noqa: BLE001 - the master went away: the claims fail, said why
        run.skipped.append(f"reading the master once training ended: {type(exc).__name__}: "
                           f"{exc}"[:300])
        ctx.trained_now = {}
    return run, ctx, plan


def summarize(run: Run, ctx, plan, drain, back, code, in_ray: list[str], outside: list[str],
              job_json: Path) -> dict:
    print("\nSUMMARY")
    print("\n".join(describe(run)))
    print("\n".join(describe_schedule(run)))
    for why in run.skipped:
        print(f"  not done: {why}")
    claims = ray_steps.claims(run, drain, back, plan, ctx.worker_ids, ctx.trained_now)
    print("\n".join(ray_steps.describe(claims)))
    updates_lost = run.ledger.updates_lost if run.ledger is not None else None
    job_summary = json.loads(job_json.read_text()) if job_json.exists() else {}
    print(f"  updates lost (the ledger's updates_lost): {updates_lost}")
    print(f"  elastic-job exit code {code}, its summary's epochs exact: "
          f"{job_summary.get('epochs_exact')}")
    print(f"  left in Ray once the job ended (named actors, CPUs held): {in_ray or 'nothing'}")
    print(f"  left running once the cluster stopped: {outside or 'nothing'}")
    summary = {"runs": [run_json(run)], "exactly_once": run.exactly_once,
               "steps": run.steps, "held_s": round(run.held_s, 2),
               "every_step_fired_and_settled": all(s["state"] == "settled" for s in run.steps),
               "ray": claims, "ray_ok": ray_steps.claims_ok(claims),
               "updates_lost": updates_lost, "elastic_job_exit_code": code,
               "left_in_ray": in_ray, "left_outside": outside,
               "job_summary": job_summary}
    summary["ok"] = bool(summary["exactly_once"] and summary["every_step_fired_and_settled"]
                         and summary["ray_ok"] and updates_lost == 0 and code == 0
                         and job_summary.get("epochs_exact") and not in_ray and not outside)
    print(f"  every step fired and settled: {summary['every_step_fired_and_settled']}")
    print(f"  every claim above held: {summary['ok']}")
    return summary
