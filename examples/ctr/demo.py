"""The main job: a CTR model trained by workers that come and go, against one that is not.

1. Generates a click log from a planted model (the best reachable AUC is known).
2. Starts two masters on one SQLite file (a leader and a standby; every client is given both
   addresses), 2 parameter servers and a backup of each (`--ps-replicas 1`), then trains
   while a schedule of steps changes the job, one after another, each fired by the fraction
   of the records trained (examples/ctr/schedule.py, examples/ctr/steps.py):

       3 %  scale up 1 -> 4 workers (warm standbys join)
       6 %  resize-ps 3: PS 2 and its backup start, slots move to it live
      20 %  SIGKILL a worker holding leases (declared lost, its leases requeued)
      30 %  SIGKILL the master leader (the standby takes over within the leader lease)
      40 %  SIGTERM a worker holding leases (a spot reclaim notice: it hands its leases
            back with their progress and exits 0)
      50 %  SIGKILL the primary of a PS whose backup is in sync (the backup is promoted)
       --   right after: the old primary starts again and must join as a backup, fenced
      65 %  resize-ps 2: the slots move back, PS 2 and its backup exit 0

   A step fires once its fraction is reached and its precondition holds (a worker holding
   leases, a backup in sync, no resize under way), and the next waits until the last one's
   effect was seen. Nothing waits: a step starts what it starts and returns, and readiness is
   polled. The workers train at a pace that spreads the records over `--pace-s` seconds, and
   training is held where it would run past a step that could not fire yet (and at 90 %
   until the last step settled), so every step fires with training running and has training
   left to show its effect, on a slow or busy machine too. A step that cannot happen fails
   the run, with why. A machine too small for 4 workers is told up front and the job scaled
   to 3 (1 -> 3 -> 1).
3. Trains the same model on the same set of processes with a single worker, at full speed
   and nothing killed, for comparison.
4. Prints the summary: every step of the schedule fired and its effect seen; every record of
   every epoch counted done exactly once (the master's lease history, read with GetLeases,
   tiles each epoch); the SIGKILLed worker declared lost and its leases requeued
   (`worker_lost`, `lease_requeued` with cause lost), the SIGTERMed one left and exited 0;
   no update lost (`updates_lost` of the ledger); the killed PS index's generation up by one,
   the old primary a backup, every in-sync backup holding its primary's versions, the leader
   changed; the time from each kill to the takeover and to training flowing again (first
   shard handed out after the master kill, first push answered after the PS kill); each
   resize's events in order (`ps_resize_started`, `ps_slots_moved`, `ps_resize_finished`),
   the PS that left exited 0, the set back at 2 PS; AUC against the planted optimum and the
   calm run, hand-outs against shards per epoch, duplicates, records redone, goodput.
   `--json PATH` also writes it as JSON (the tests read it); the exit status is 0 only when
   every claim held.

Nothing is left running when it ends or is interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path

from cluster.local import LocalCluster
from examples.ctr import data as ctr_data
from examples.ctr import resize
from examples.ctr.controller import Job, Run, interrupted, train
from examples.ctr.evaluate import HeldOutAUC
from examples.ctr.schedule import Schedule, Step
from examples.ctr.resize import Grow, Shrink
from examples.ctr.steps import KillLeader, KillPrimary, KillWorker, Rejoin, ScaleUp, StopWorker
from examples.ctr.summary import (churn_claims, churn_ok, describe, describe_churn,
                                  describe_ha, describe_schedule, ha_claims, ha_ok, run_json)

__all__ = ["Run", "main"]

END = 0.9  # training is held here until the last step settled
# what one process of the demo takes, resident, on this job (measured: docs/benchmarks.md)
WORKER_GIB, PS_GIB, MASTER_GIB, DRIVER_GIB = 0.55, 0.5, 0.1, 0.6
SERVERS_GIB = 7 * PS_GIB + 2 * MASTER_GIB  # PS and backups at 3 PS, the old primary again


def steps_for(workers: int, churn: bool, ha: bool, grow: bool) -> list[Step]:
    """The schedule (docstring above), without the parts turned off."""
    steps: list[Step] = []
    if churn:
        steps.append(ScaleUp(0.03, workers - 1))
    if grow:
        steps.append(Grow(0.06, 3))
    if churn:
        steps.append(KillWorker(0.20))
    if ha:
        steps.append(KillLeader(0.30))
    if churn:
        steps.append(StopWorker(0.40))
    if ha:
        primary = KillPrimary(0.50)
        steps += [primary, Rejoin(None, primary)]
    if grow:
        steps.append(Shrink(0.65, 2))
    return steps


def fit(workers: int, cpus: int, available_gib: float | None) -> tuple[int, list[str]]:
    """The peak number of workers this machine holds, and what was scaled and why. The
    schedule needs 3 at least (one SIGKILLed, one SIGTERMed, one to finish); 0: not even
    that fits."""
    notes = []
    need = lambda w: w * WORKER_GIB + SERVERS_GIB + DRIVER_GIB  # noqa: E731
    if cpus < 2 and workers > 3:
        notes.append(f"{cpus} CPU: scaled to 3 workers at the peak (1 -> 3 -> 1)")
        workers = 3
    if available_gib is not None:
        while workers >= 3 and need(workers) > available_gib:
            workers -= 1
        if workers < 3:
            notes.append(f"{available_gib:.1f} GiB of memory available, the smallest schedule "
                         f"(3 workers) needs about {need(3):.1f} GiB")
            return 0, notes
        if need(4) > available_gib:
            notes.append(f"{available_gib:.1f} GiB of memory available: scaled to {workers} "
                         f"workers at the peak (1 -> {workers} -> {workers - 2})")
    return workers, notes


def available_gib() -> float | None:
    """MemAvailable (Linux), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local (default): the processes on this machine, as above; ray: the "
                   "job through `elastic-job run` on a local multi-node Ray the demo starts, "
                   "its spot node drained mid-training and spot given back later "
                   "(examples/ctr/ray_demo.py; needs the ray extra). Takes --records, "
                   "--epochs, --batch-size, --shard-size, --pace-s (defaults 8000, 1, 128, "
                   "256, 40), --workdir, --timeout and --json")
    p.add_argument("--records", type=int, default=None, help="default 60000")
    p.add_argument("--epochs", type=int, default=None, help="default 2")
    p.add_argument("--batch-size", type=int, default=None, help="default 256")
    p.add_argument("--shard-size", type=int, default=None, help="default 1024")
    p.add_argument("--workers", type=int, default=4,
                   help="workers at the peak of the churn (default 4; at least 3: one is "
                   "SIGKILLed, one SIGTERMed, one finishes; fewer when the machine is small)")
    p.add_argument("--pace-s", type=float, default=None,
                   help="the run with churn spreads its records over about this many seconds "
                   "(default 60; holds for the schedule come on top), so that its steps fit "
                   "in the training; 0: full speed")
    p.add_argument("--workdir", default="demo-run", help="where data, databases and logs go")
    p.add_argument("--eval-every", type=float, default=2.0, help="seconds between AUC checks")
    p.add_argument("--no-baseline", action="store_true", help="skip the run without churn")
    p.add_argument("--baseline-workers", type=int, default=1,
                   help="workers of the run without churn (default 1)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a run may train before the demo gives up (default 600)")
    p.add_argument("--no-ha", action="store_true",
                   help="one master and no PS backups; only workers churn")
    p.add_argument("--no-worker-churn", action="store_true",
                   help="one worker throughout; only the master leader and a PS primary die")
    p.add_argument("--no-resize", action="store_true",
                   help="keep 2 PS throughout (no grow to 3 and back)")
    p.add_argument("--leader-lease-s", type=float, default=5.0,
                   help="the masters' leader lease: a standby takes over within it plus a "
                   "second (default 5, as elastic-master's)")
    p.add_argument("--json", metavar="PATH", help="also write the summary as JSON to PATH")
    args = p.parse_args(argv)
    if args.engine == "ray":
        if (args.records or 1000) < 1000 or (args.epochs or 1) < 1 or (args.pace_s or 0) < 0 \
                or args.timeout <= 0:
            p.error("--records must be 1000 or more, --epochs 1 or more, --pace-s 0 or more, "
                    "--timeout above 0")
        return args  # the Ray demo's own defaults (examples/ctr/ray_demo.py)
    for name, default in (("records", 60_000), ("epochs", 2), ("batch_size", 256),
                          ("shard_size", 1024), ("pace_s", 60.0)):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.workers < 3 and not args.no_worker_churn:
        p.error("--workers: the churn needs 3 at least (one SIGKILLed, one SIGTERMed, one "
                "to finish)")
    if args.records < 1000 or args.epochs < 1 or args.pace_s < 0 or args.timeout <= 0:
        p.error("--records must be 1000 or more, --epochs 1 or more, --pace-s 0 or more, "
                "--timeout above 0")
    return args


def plan(args: argparse.Namespace) -> tuple[list[Step], int] | None:
    """The schedule this machine holds, said up front; None when it holds none."""
    workers = 1
    if not args.no_worker_churn:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
        workers, notes = fit(args.workers, cpus, available_gib())
        for note in notes:
            print(f"this machine: {note}")
        if not workers:
            print("this machine is too small for the demo's schedule: its claims cannot be "
                  "shown here", file=sys.stderr)
            return None
    steps = steps_for(workers, not args.no_worker_churn, not args.no_ha, not args.no_resize)
    print(f"schedule of the run with churn ({args.records * args.epochs} records paced over "
          f"about {args.pace_s:g} s; training is held where a step is not ready yet):")
    for step in steps:
        at = f"{step.at:4.0%}" if step.at is not None else "  --"
        print(f"  {at}  {step.describe()}")
    return steps, workers


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.engine == "ray":
        from examples.ctr import ray_demo  # ray only when asked for

        return ray_demo.main(args)
    # Ctrl-C and SIGTERM stop every process of the demo (the `with` blocks close them), also
    # when it was started where SIGINT is ignored (a background job of a script)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupted)
    planned = plan(args)
    if planned is None:
        return 2
    steps, workers = planned
    work = Path(args.workdir).resolve()
    data = work / "ctr"
    if not (data / "meta.json").exists() or \
            f'"records": {args.records},' not in (data / "meta.json").read_text():
        ctr_data.main(["--out", str(data), "--records", str(args.records), "--test-records",
                       str(max(5000, args.records // 5))])
    optimum = json.loads((data / "meta.json").read_text())["optimal_test_auc"]
    total = args.records * args.epochs
    # the run without churn has the same processes (standby, backups), so the comparison
    # measures what the kills and the churn cost, not what a backup costs
    ha = {} if args.no_ha else {"standbys": 1, "ps_replicas": 1}
    lease = ("--leader-lease-s", f"{args.leader_lease_s:g}")
    calm = f"{args.baseline_workers} worker{'s' if args.baseline_workers > 1 else ''}, no churn"
    runs = []
    try:
        for name, schedule_steps in [("with churn", steps)] + \
                ([] if args.no_baseline else [(calm, [])]):
            directory = work / ("churn" if schedule_steps else "calm")
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            job = Job(total, args.batch_size, eval_every=args.eval_every, timeout=args.timeout)
            train_args = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                          "--shard-size", str(args.shard_size), "--log-every", "30"]
            if schedule_steps:
                job.pace_s, job.pace_file = args.pace_s, directory / "pace.json"
                job.standbys = workers - 1 if not args.no_worker_churn else 0
                train_args += ["--pace-file", str(job.pace_file)]
            else:
                job.workers = args.baseline_workers
            with LocalCluster(directory, data, worker_module="examples.ctr.train", num_ps=2,
                              train_args=tuple(train_args), master_flags=lease,
                              **ha) as cluster, \
                    HeldOutAUC(cluster.master_address, data) as auc:
                print(f"\n{name}: {len(cluster.masters)} master(s) on {cluster.db}, 2 PS"
                      + (" with a backup each" if cluster.backups else "")
                      + f", logs in {directory}", flush=True)
                runs.append(train(cluster, auc, name, job, Schedule(steps=list(schedule_steps),
                                                                     end=END)))
    except KeyboardInterrupt:
        print("\ninterrupted: every process of the demo has been stopped", file=sys.stderr)
        return 130
    summary = summarize(runs, optimum, args)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0 if summary["ok"] else 1


def summarize(runs: list[Run], optimum: float, args: argparse.Namespace) -> dict:
    print("\nSUMMARY")
    print(f"  best reachable AUC (the planted model): {optimum:.4f}")
    for run in runs:
        print("\n".join(describe(run)))
    churn = runs[0]
    print("\n".join(describe_schedule(churn)))
    kills = [e for e in churn.events if e.kind in ("worker_lost", "worker_left")]
    print("  churn seen by the master: " + ", ".join(
        f"{e.worker_id} {e.kind.split('_')[1]} ({e.cause})" for e in kills))
    if churn.auc_failures:
        print(f"  AUC checks that failed during the run: {len(churn.auc_failures)} (first: "
              f"{churn.auc_failures[0]})")
    if len(runs) == 2:
        base = runs[1]
        print(f"  AUC with churn {churn.auc:.4f} vs without {base.auc:.4f} "
              f"(difference {churn.auc - base.auc:+.4f}); optimum {optimum:.4f} (the run "
              "with churn is paced for its schedule, so its wall time is not comparable)")
    summary = {"optimum": optimum, "runs": [run_json(run) for run in runs],
               "exactly_once": all(run.exactly_once for run in runs),
               "steps": churn.steps, "held_s": round(churn.held_s, 2),
               "every_step_fired_and_settled": all(s["state"] == "settled"
                                                   for s in churn.steps)}
    if not args.no_ha:
        claims = ha_claims(churn, ["master", "ps"])
        print("\n".join(describe_ha(claims)))
        summary["ha"] = claims
        summary["ha_ok"] = ha_ok(claims)
    if not args.no_worker_churn:
        claims = churn_claims(churn, 1, 1)
        print("\n".join(describe_churn(claims)))
        summary["churn"] = claims
        summary["churn_ok"] = churn_ok(claims)
    if not args.no_resize:
        claims = resize.claims(churn.resizes, churn.events, churn.final_num_ps,
                               churn.resize_skipped, churn.ledger.updates_lost
                               if churn.ledger is not None else None)
        print("\n".join(resize.describe(claims)))
        summary["resize"] = claims
        summary["resize_ok"] = resize.ok(claims)
    summary["ok"] = summary["exactly_once"] and summary["every_step_fired_and_settled"] and \
        summary.get("ha_ok", True) and summary.get("churn_ok", True) and \
        summary.get("resize_ok", True)
    print(f"  every step fired and settled: {summary['every_step_fired_and_settled']}")
    print(f"  every claim above held: {summary['ok']}")
    return summary


if __name__ == "__main__":
    sys.exit(main())
