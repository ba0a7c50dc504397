"""The main job: a CTR model trained by workers that come and go, against one that is not.

1. Generates a click log from a planted model (the best reachable AUC is known).
2. Starts two masters on one SQLite file (a leader and a standby; every client is given both
   addresses), 2 parameter servers and a backup of each (`--ps-replicas 1`), then trains with
   worker processes scaled 1 -> 4 -> 2 while training: one worker holding leases is killed with
   SIGKILL (its shards come back after the worker timeout), one is stopped with SIGTERM (a spot reclaim
   notice: it hands its leases back with their progress and exits). Every role dies once: the
   master leader is SIGKILLed (the standby takes over within the leader lease) and so is a PS
   primary whose backup is in sync (the backup is promoted); the old primary then starts again
   and must join as a backup of the new one. The PS set grows from 2 to 3 while training
   runs (`resize-ps 3`, the new index and its backup started; slots move to it live) and
   shrinks back to 2 (its slots move back, and it and its backup exit 0). Live progress:
   epoch, shards, samples/s, workers, AUC.
3. Trains the same model on the same set of processes with a single worker and nothing killed,
   for comparison.
4. Prints the summary: every record of every epoch counted done exactly once (the master's
   lease history, read with GetLeases, tiles each epoch), the SIGKILLed worker declared lost
   and its leases requeued (`worker_lost`, `lease_requeued` with cause lost), no update lost (`updates_lost` of the ledger), the killed
   PS index's generation up by one, the old primary a backup, every in-sync backup holding its
   primary's versions, the leader changed, the time from each kill to training
   flowing again (first shard handed out after the master kill, first push answered after the
   PS kill), AUC against the planted optimum and the no-churn run, time to the target AUC,
   hand-outs against shards per epoch, duplicates, records redone, goodput; each resize's
   events in order (`ps_resize_started`, `ps_slots_moved`, `ps_resize_finished`), the PS that
   left exited 0, the set back at 2 PS. `--json PATH` also
   writes it as JSON (the test reads it); the exit status is 0 only when every claim held.

Nothing is left running when it ends or is interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from tqdm import tqdm

from cluster.local import LocalCluster, records_done
from examples.ctr import data as ctr_data
from examples.ctr import failover
from examples.ctr import resize
from examples.ctr.audit import exactly_once
from examples.ctr.evaluate import HeldOutAUC
from examples.ctr.summary import (churn_claims, churn_ok, describe_churn, describe_ha,
                                  ha_claims, ha_ok, run_json)


@dataclass
class Run:
    name: str
    wall_s: float = 0.0
    auc: float = 0.0
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, AUC)
    epochs: list = field(default_factory=list)
    ledger: object = None
    events: list = field(default_factory=list)
    exit_codes: dict = field(default_factory=dict)
    exactly_once: bool = False
    audit: dict = field(default_factory=dict)     # epoch -> what the lease history says is wrong
    kills: list = field(default_factory=list)     # failover.Kill, in order
    sigkilled: list = field(default_factory=list)  # (name, worker_id) of each SIGKILLed worker
    skipped: list = field(default_factory=list)   # HA steps that could not be taken, and why
    generations: dict = field(default_factory=dict)        # PS index -> generation, at start
    generations_after: dict = field(default_factory=dict)  # ... and at the end
    leaders: list = field(default_factory=list)   # the leading master's address, at start / end
    backups_compared: int = 0                     # in-sync backups compared with their primary
    backups_differ: list = field(default_factory=list)  # ... and what differed
    resizes: list = field(default_factory=list)   # resize.Resize, in order
    resize_skipped: list = field(default_factory=list)  # resizes not asked, and why
    final_num_ps: int | None = None               # the layout's size at the end

    def time_to(self, target: float) -> float | None:
        return next((t for t, a in self.curve if a >= target), None)


def train(cluster: LocalCluster, auc: HeldOutAUC, name: str, total: int, plan: list,
          eval_every: float, timeout: float, workers: int = 1, warm: bool = True) -> Run:
    run = Run(name)
    shards = None
    bar = tqdm(total=total, unit="rec", desc=name, dynamic_ncols=True)
    started = time.monotonic()
    last_eval = 0.0
    done_before = 0
    # the workers that scale up later start now as warm standbys (torch loaded), so the run
    # measures churn and not 2 cores busy importing torch three times at once
    standby = [cluster.standby_worker()[1] for action in plan if action[1] == "add"
               for _ in range(action[2])] if warm else []
    for _ in range(workers):
        cluster.add_worker()
    active = workers
    ha = cluster.standbys or cluster.ps_replicas
    if ha:
        run.generations = failover.generations(cluster.ps_list())
        run.leaders.append(leader_address(cluster))
    try:
        while time.monotonic() - started < timeout:
            ds = cluster.dataset_status()
            # no answer while a standby takes over: the records done are what they were
            done = records_done(ds) if ds is not None else done_before
            bar.update(done - done_before)
            done_before = done
            now = time.monotonic() - started
            if ds is not None:
                shards = -(-ds.spec.num_records // ds.spec.shard_size)
                bar.set_postfix_str(
                    f"epoch {min(ds.epoch, ds.spec.num_epochs - 1) + 1}/{ds.spec.num_epochs} "
                    f"shards {ds.done}/{shards} workers {active}"
                    + (f" AUC {run.curve[-1][1]:.4f}" if run.curve else ""))
            while plan and done >= plan[0][0] * total:
                step = plan.pop(0)
                _, action, count = step
                alive = cluster.alive()
                if action == "add":
                    for _ in range(count):
                        if standby:
                            standby.pop(0).touch()
                        else:
                            cluster.add_worker()
                    active += count
                    tqdm.write(f"[{now:5.1f}s] scaled up: {active} workers")
                elif action == "SIGKILL":
                    # a worker that holds leases, so that they come back (not one still
                    # starting, which would die unregistered and lose nothing)
                    holder = leaseholder(cluster, alive)
                    if holder is None:
                        plan.insert(0, step)
                        break  # none holds a lease now (a master taking over): next poll
                    victim, worker_id = holder
                    active -= 1
                    cluster.signal_worker(victim, signal.SIGKILL)
                    run.sigkilled.append((victim, worker_id))
                    tqdm.write(f"[{now:5.1f}s] SIGKILL {victim} ({worker_id}, holding leases): "
                               "its shards come back after the 3 s worker timeout")
                elif action == "SIGTERM" and alive:
                    victim = next((n for n in alive if cluster.training(n)), alive[0])
                    active -= 1
                    cluster.signal_worker(victim, signal.SIGTERM)
                    tqdm.write(f"[{now:5.1f}s] SIGTERM {victim}: it hands its leases back with "
                               "their progress and exits")
                elif action == "master":
                    kill = failover.kill_leader(cluster)
                    if kill is None:
                        run.skipped.append("master leader: no standby alive to take over")
                        continue
                    run.kills.append(kill)
                    tqdm.write(f"[{now:5.1f}s] SIGKILL the master leader {kill.victim}: the "
                               "standby takes over within the leader lease (+1 s)")
                elif action == "ps":
                    if not ps_kill(cluster, run, now):
                        plan.insert(0, step)
                        break  # not yet: no backup in sync; asked again at the next poll
                elif action in ("grow", "shrink"):
                    layout = cluster.status()
                    if layout is None or layout.layout.resizing:
                        plan.insert(0, step)
                        break  # the last resize still moves slots: one at a time, as a user would
                    try:
                        run.resizes.append(resize.grow(cluster, count) if action == "grow"
                                           else resize.shrink(cluster, count))
                    except grpc.RpcError:
                        plan.insert(0, step)
                        break  # a standby taking over: asked again at the next poll
                    tqdm.write(f"[{now:5.1f}s] resize-ps {count}: " + (
                        f"PS {count - 1} started, slots move to it live" if action == "grow"
                        else "the slots of the PS above move back, which then exit 0"))
                elif action == "rejoin":
                    kill = next((k for k in run.kills if k.role == "ps"), None)
                    if kill is None or not failover.rejoin(cluster, kill):
                        run.skipped.append("old PS primary: it was not killed")
                        continue
                    tqdm.write(f"[{now:5.1f}s] the old primary of PS {kill.index} starts again: "
                               "it joins as a backup of the new one, fenced from clients")
            if done and now - last_eval >= eval_every:
                run.curve.append((now, auc()))
                last_eval = now
            if ds is not None and ds.finished:
                break
            if not cluster.alive():
                break  # every worker left (their logs say why)
            time.sleep(0.3)
        run.skipped += [f"{action} (at {at:.0%} of the records): training ended first"
                        for at, action, _ in plan
                        if action in ("master", "ps", "rejoin", "SIGKILL")]
        run.resize_skipped += [f"{action} to {n} PS (at {at:.0%} of the records): training "
                               "ended first" for at, action, n in plan
                               if action in ("grow", "shrink")]
        run.exit_codes = cluster.wait_workers(60)
        resize.settle(cluster, run.resizes)
        status = cluster.status()
        run.final_num_ps = status.layout.num_ps if status is not None else None
        run.wall_s = time.monotonic() - started
        run.auc = auc()
        run.curve.append((run.wall_s, run.auc))
        ds = final_status(cluster)
        run.epochs = list(ds.epochs)
        run.ledger = cluster.ledger()
        run.events = cluster.events()
        # the proof, from the master's durable lease history (GetLeases), not its counters
        leases = cluster.leases()
        run.audit = exactly_once(leases, ds.spec.num_records, ds.spec.num_epochs)
        run.exactly_once = ds.finished and not run.audit and all(
            e.records_done == e.records_total for e in ds.epochs)
        if ha:
            for kill in run.kills:
                failover.await_rejoin(cluster, kill)
            listing = cluster.ps_list()
            run.generations_after = failover.generations(listing)
            run.backups_compared, run.backups_differ = failover.backups_agree(cluster, listing)
            run.leaders.append(leader_address(cluster))
            failover.settle(run.kills, run.events, leases, listing, run.leaders[-1])
    finally:
        for kill in run.kills:
            if kill.watch is not None:
                kill.watch.stop()
        bar.close()
    return run


def leaseholder(cluster: LocalCluster, alive: list[str]) -> tuple[str, str] | None:
    """(name, worker_id) of the running worker that has held leases the longest (registered
    first, holding leases now, as the master's status says); None when none does."""
    status = cluster.status()
    if status is None:
        return None
    holders = [w for w in status.workers
               if w.name in alive and w.state == "alive" and (w.leases_held or w.leases)]
    first = min(holders, key=lambda w: w.registered_ms, default=None)
    return (first.name, first.worker_id) if first is not None else None


def final_status(cluster: LocalCluster, timeout: float = 60.0):
    """The dataset's status once a master answers (a standby may still be taking over)."""
    deadline = time.monotonic() + timeout
    while (ds := cluster.dataset_status()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no master answered GetStatus within {timeout:g} s")
        time.sleep(0.2)
    return ds


def leader_address(cluster: LocalCluster, timeout: float = 30.0) -> str:
    """The leading master's address ('' when none leads within `timeout`)."""
    deadline = time.monotonic() + timeout
    while (leader := cluster.leader()) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return leader.address if leader else ""


def ps_kill(cluster: LocalCluster, run: Run, now: float) -> bool:
    """The plan's PS step: SIGKILL a primary whose backup is in sync. False (the step goes
    back to the plan) while the master asks for backups but none is in sync yet."""
    try:
        listing = cluster.ps_list()
    except grpc.RpcError:
        return False  # a standby taking over: ask again
    if listing.replicas == 0:
        run.skipped.append("PS primary: the master asks for no backups (--ps-replicas 0)")
        return True
    info = failover.promotable(listing)
    kill = failover.kill_ps_primary(cluster, info) if info is not None else None
    if kill is None:
        return False
    run.kills.append(kill)
    tqdm.write(f"[{now:5.1f}s] SIGKILL the primary of PS {kill.index} {kill.victim}: its "
               "backup is in sync and is promoted")
    return True


def describe(run: Run) -> list[str]:
    lines = [f"  {run.name}: wall {run.wall_s:.1f} s, final AUC {run.auc:.4f}, every record "
             f"of every epoch counted done exactly once: {run.exactly_once}"]
    for e in run.epochs:
        requeues = ", ".join(f"{k} {v}" for k, v in sorted(e.requeues.items())) or "none"
        lines.append(f"    epoch {e.epoch}: {e.handouts} hand-outs for {e.done} shards, "
                     f"{e.records_done}/{e.records_total} records, {e.records_rehanded} handed "
                     f"out again of which {e.records_redone} possibly trained twice, "
                     f"{e.duplicates} duplicates; requeues: {requeues}")
    for epoch, errors in sorted(run.audit.items()):
        lines.append(f"    epoch {epoch}, lease history: " + "; ".join(errors))
    if run.ledger is not None:
        lines.append(f"    goodput {run.ledger.goodput:.1%} ({run.ledger.records_done} records "
                     f"done, at most {run.ledger.records_redone} trained twice), "
                     f"{run.ledger.worker_seconds_total:.0f} worker-seconds")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--shard-size", type=int, default=1024)
    p.add_argument("--workdir", default="demo-run", help="where data, databases and logs go")
    p.add_argument("--eval-every", type=float, default=1.0, help="seconds between AUC checks")
    p.add_argument("--no-baseline", action="store_true", help="skip the run without churn")
    p.add_argument("--baseline-workers", type=int, default=1,
                   help="workers of the run without churn (default 1)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--cold-start", action="store_true",
                   help="start scaled-up workers from scratch instead of warm standbys")
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

    work = Path(args.workdir).resolve()
    data = work / "ctr"
    if not (data / "meta.json").exists() or \
            f'"records": {args.records},' not in (data / "meta.json").read_text():
        ctr_data.main(["--out", str(data), "--records", str(args.records), "--test-records",
                       str(max(5000, args.records // 5))])

    optimum = json.loads((data / "meta.json").read_text())["optimal_test_auc"]
    train_args = ("--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                  "--shard-size", str(args.shard_size), "--log-every", "30")
    total = args.records * args.epochs
    churn_plan = [] if args.no_worker_churn else \
        [(0.10, "add", 3), (0.35, "SIGKILL", 1), (0.55, "SIGTERM", 1)]
    resize_plan = [] if args.no_resize else [(0.15, "grow", 3), (0.75, "shrink", 2)]
    ha_plan = [] if args.no_ha else [(0.25, "master", 1), (0.45, "ps", 1), (0.65, "rejoin", 1)]
    # the run without churn has the same processes (standby, backups), so the comparison
    # measures what the kills and the churn cost, not what a backup costs
    ha = {} if args.no_ha else {"standbys": 1, "ps_replicas": 1}
    lease = ("--leader-lease-s", f"{args.leader_lease_s:g}")
    runs = []
    try:
        calm = f"{args.baseline_workers} worker{'s' if args.baseline_workers > 1 else ''}, " \
            "no churn"
        planned = sorted(churn_plan + ha_plan + resize_plan)
        for name, plan, workers in [("with churn", planned, 1)] + \
                ([] if args.no_baseline else [(calm, [], args.baseline_workers)]):
            directory = work / ("churn" if plan else "calm")
            shutil.rmtree(directory, ignore_errors=True)
            with LocalCluster(directory, data, worker_module="examples.ctr.train", num_ps=2,
                              train_args=train_args, master_flags=lease, **ha) as cluster, \
                    HeldOutAUC(cluster.master_address, data) as auc:
                print(f"\n{name}: {len(cluster.masters)} master(s) on {cluster.db}, 2 PS"
                      + (" with a backup each" if cluster.backups else "")
                      + f", logs in {directory}")
                runs.append(train(cluster, auc, name, total, list(plan), args.eval_every,
                                  args.timeout, workers, warm=not args.cold_start))
    except KeyboardInterrupt:
        print("\ninterrupted: every process of the demo has been stopped", file=sys.stderr)
        return 130

    print("\nSUMMARY")
    print(f"  best reachable AUC (the planted model): {optimum:.4f}")
    for run in runs:
        print("\n".join(describe(run)))
    churn = runs[0]
    kills = [e for e in churn.events if e.kind in ("worker_lost", "worker_left")]
    print("  churn seen by the master: " + ", ".join(
        f"{e.worker_id} {e.kind.split('_')[1]} ({e.cause})" for e in kills))
    if len(runs) == 2:
        base = runs[1]
        target = base.auc - 0.005
        t_churn, t_base = churn.time_to(target), base.time_to(target)
        print(f"  AUC with churn {churn.auc:.4f} vs without {base.auc:.4f} "
              f"(difference {churn.auc - base.auc:+.4f}); optimum {optimum:.4f}")
        if t_churn and t_base:
            print(f"  time to AUC {target:.4f}: {t_churn:.1f} s with churn, {t_base:.1f} s "
                  f"without: ratio {t_churn / t_base:.2f}")
        else:
            print(f"  time to AUC {target:.4f}: with churn {t_churn}, without {t_base} "
                  "(None: not reached)")
    summary = {"optimum": optimum, "runs": [run_json(run) for run in runs],
               "exactly_once": all(run.exactly_once for run in runs)}
    if ha_plan:
        claims = ha_claims(churn, [action for _, action, _ in ha_plan if action != "rejoin"])
        print("\n".join(describe_ha(claims)))
        summary["ha"] = claims
        summary["ha_ok"] = ha_ok(claims)
    sigkills = sum(count for _, action, count in churn_plan if action == "SIGKILL")
    if sigkills:
        claims = churn_claims(churn, sigkills)
        print("\n".join(describe_churn(claims)))
        summary["churn"] = claims
        summary["churn_ok"] = churn_ok(claims)
    if resize_plan:
        claims = resize.claims(churn.resizes, churn.events, churn.final_num_ps,
                               churn.resize_skipped, churn.ledger.updates_lost
                               if churn.ledger is not None else None)
        print("\n".join(resize.describe(claims)))
        summary["resize"] = claims
        summary["resize_ok"] = resize.ok(claims)
    summary["ok"] = summary["exactly_once"] and summary.get("ha_ok", True) and \
        summary.get("churn_ok", True) and summary.get("resize_ok", True)
    print(f"  every claim above held: {summary['ok']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
