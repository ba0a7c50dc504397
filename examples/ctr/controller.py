"""The demo's loop for one run: it polls the master, moves the schedule on, paces and holds
the workers, shows progress, and collects what the summary proves once training ended.

Nothing in the loop waits for anything: a step starts what it starts and returns
(examples/ctr/steps.py), the held-out AUC is scored by a thread of its own, and every RPC of a
poll has a short deadline, so a step fires within a poll (0.25 s) of its fraction and its
precondition holding. The workers' pace (examples/ctr/pace.py) spreads the records over
`pace_s` seconds, and training is held where the schedule says (schedule.Schedule.hold_at),
so the schedule fits the job on a slow or busy machine as on a quiet one.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from cluster.local import LocalCluster, records_done
from cluster.master_view import MasterView
from examples.ctr import failover, pace, resize
from examples.ctr.audit import exactly_once
from examples.ctr.evaluate import HeldOutAUC
from examples.ctr.schedule import Schedule, State
from examples.ctr.steps import Context

POLL_S = 0.25
QUIET_PROGRESS_S = 5.0  # a progress line this often when stdout is not a terminal


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
    sigtermed: list = field(default_factory=list)  # (name, worker_id) of each SIGTERMed worker
    skipped: list = field(default_factory=list)   # HA steps that did not happen, and why
    generations: dict = field(default_factory=dict)        # PS index -> generation, at start
    generations_after: dict = field(default_factory=dict)  # ... and at the end
    leaders: list = field(default_factory=list)   # the leading master's address, at start / end
    backups_compared: int = 0                     # in-sync backups compared with their primary
    backups_differ: list = field(default_factory=list)  # ... and what differed
    resizes: list = field(default_factory=list)   # resize.Resize, in order
    resize_skipped: list = field(default_factory=list)  # resizes that did not happen, and why
    final_num_ps: int | None = None               # the layout's size at the end
    steps: list = field(default_factory=list)     # the schedule's steps (to_json)
    held_s: float = 0.0                           # training held for the schedule, in all
    auc_failures: list = field(default_factory=list)  # AUC checks that raised (why)

    def time_to(self, target: float) -> float | None:
        return next((t for t, a in self.curve if a >= target), None)


class AUCWatch(threading.Thread):
    """Scores the held-out AUC every `every` seconds once `begin()` was called, off the loop
    (a pull of the whole model and a pass over the test split take a while)."""

    def __init__(self, auc: HeldOutAUC, run: Run, started: float, every: float):
        super().__init__(name="auc-watch", daemon=True)
        self.auc, self.record, self.started, self.every = auc, run, started, every
        self._go, self._halt = threading.Event(), threading.Event()

    def begin(self) -> None:
        self._go.set()

    def run(self) -> None:
        self._go.wait()
        while not self._halt.is_set():
            try:
                value = self.auc()
                self.record.curve.append((time.monotonic() - self.started, value))
            except Exception as exc:  # noqa: BLE001 - a check that failed is reported, not fatal
                self.record.auc_failures.append(f"{type(exc).__name__}: {exc}"[:300])
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self._go.set()
        self.join(120)


class Progress:
    """tqdm on a terminal; a plain line every few seconds otherwise (a CI log)."""

    def __init__(self, name: str, total: int):
        self.tty = sys.stdout.isatty()
        self.bar = tqdm(total=total, unit="rec", desc=name, dynamic_ncols=True) \
            if self.tty else None
        self.total, self.done, self.last_line = total, 0, 0.0

    def update(self, done: int, now: float, text: str) -> None:
        if self.bar is not None:
            self.bar.update(done - self.done)
            self.bar.set_postfix_str(text, refresh=False)
        elif now - self.last_line >= QUIET_PROGRESS_S:
            print(f"[{now:5.1f}s] {done / self.total:4.0%} ({done}/{self.total} records), "
                  f"{text}", flush=True)
            self.last_line = now
        self.done = done

    def say(self, now: float, line: str) -> None:
        text = f"[{now:5.1f}s] {line}"
        tqdm.write(text) if self.bar is not None else print(text, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class Job:
    """What one run trains: `total` records (all epochs), paced over `pace_s` seconds
    (0: full speed) through `pace_file`, `workers` started at once, `standbys` warm ones the
    schedule scales up to."""
    total: int
    batch_size: int
    pace_s: float = 0.0
    pace_file: Path | None = None
    workers: int = 1
    standbys: int = 0
    eval_every: float = 2.0
    timeout: float = 600.0


def train(cluster: LocalCluster, auc: HeldOutAUC, name: str, job: Job,
          schedule: Schedule) -> Run:
    run = Run(name)
    started = time.monotonic()
    ctx = Context(cluster, run, active=job.workers)
    # the workers that scale up later start now as warm standbys (torch loaded), so the run
    # measures churn and not 2 cores busy importing torch three times at once
    for _ in range(job.workers):
        cluster.add_worker()
    ctx.standby = [cluster.standby_worker() for _ in range(job.standbys)]
    if cluster.standbys or cluster.ps_replicas:
        run.generations = failover.generations(cluster.ps_list())
        run.leaders.append(leader_address(cluster))
    watch = AUCWatch(auc, run, started, job.eval_every)
    watch.start()
    progress = Progress(name, job.total)
    try:
        loop(cluster, job, schedule, ctx, watch, progress, started)
        finish(cluster, run, watch, started)
    finally:
        watch.stop()
        for kill in run.kills:
            if kill.watch is not None:
                kill.watch.stop()
        progress.close()
    run.steps = schedule.to_json()
    # what did not happen fails the claims of its part (steps.Step.part)
    for step in schedule.steps:
        if step.state == State.FAILED:
            why = f"{step.describe()}: {step.why}"
            (run.resize_skipped if step.part == "resize" else run.skipped).append(why)
    return run


def interrupted(signum, frame) -> None:
    """The demos' SIGTERM handler: stop as Ctrl-C does (everything started is closed)."""
    raise KeyboardInterrupt


def loop(cluster: LocalCluster, job: Job, schedule: Schedule, ctx: Context,
         watch: AUCWatch | None, progress: Progress, started: float) -> None:
    """Until training ends: poll, move the schedule on, pace, show progress."""
    run, done, paced, held_since = ctx.run, 0, None, None
    while True:
        now = time.monotonic() - started
        status = ctx.status()
        ds = next((d for d in status.datasets if d.spec.name == cluster.dataset), None) \
            if status is not None else None
        # no answer while a standby takes over: the records done are what they were
        done = records_done(ds) if ds is not None else done
        fraction = done / job.total
        if done and watch is not None:  # None: no AUC scored (the Ray demo)
            watch.begin()
        for line in schedule.poll(fraction, ctx):
            progress.say(now, line)
        holding = schedule.holding(fraction)
        if holding != (held_since is not None):
            if holding:
                held_since = now
                step = schedule.current()
                what = f"waits for {step.waiting}" if step.state == State.PENDING else \
                    f"waits to see: {step.effect()}"
                progress.say(now, f"holding training at {fraction:.0%} of the records: "
                             f"{step.name} {what}")
            else:
                run.held_s += now - held_since
                progress.say(now, f"training goes on ({now - held_since:.1f} s held)")
                held_since = None
        if job.pace_file is not None:
            # once every step settled (or failed) the rest is trained at full speed
            paced_now = job.pace_s and schedule.current() is not None
            want = (job.batch_size * max(1, ctx.active) * job.pace_s / job.total
                    if paced_now else 0.0, holding)
            if want != paced:
                pace.write(job.pace_file, *want)
                paced = want
        if ds is not None:
            epoch = min(ds.epoch, ds.spec.num_epochs - 1) + 1
            progress.update(done, now, f"epoch {epoch}/{ds.spec.num_epochs}, "
                            f"{ctx.active} workers" + (f", AUC {run.curve[-1][1]:.4f}"
                                                       if run.curve else "")
                            + (", held" if holding else ""))
        if ds is not None and ds.finished:
            why = "training ended first"
            break
        if not cluster.alive():
            why = "every worker exited (their logs say why)"
            break
        if now > job.timeout:
            why = f"the run's --timeout {job.timeout:g} s passed"
            break
        time.sleep(POLL_S)
    if held_since is not None:
        run.held_s += time.monotonic() - started - held_since
    for line in schedule.abandon(why):
        progress.say(time.monotonic() - started, line)
    if job.pace_file is not None:
        pace.write(job.pace_file, 0.0, False)  # whoever still trains: full speed


def finish(cluster: LocalCluster, run: Run, watch: AUCWatch, started: float) -> None:
    """Once training ended: what the summary proves, read from the master and the PS."""
    run.exit_codes = cluster.wait_workers(60)
    resize.settle(cluster, run.resizes)
    status = cluster.status()
    run.final_num_ps = status.layout.num_ps if status is not None else None
    run.wall_s = time.monotonic() - started
    watch.stop()
    try:
        run.auc = watch.auc()
        run.curve.append((run.wall_s, run.auc))
    except Exception as exc:  # noqa: BLE001 - nothing trained, a PS gone: said, not fatal
        run.auc_failures.append(f"the final AUC: {type(exc).__name__}: {exc}"[:300])
    leases = read_final(run, cluster)
    if cluster.standbys or cluster.ps_replicas:
        for kill in run.kills:
            if not kill.rejoined_role:
                failover.await_rejoin(cluster, kill)
        listing = cluster.ps_list()
        run.generations_after = failover.generations(listing)
        run.backups_compared, run.backups_differ = failover.backups_agree(cluster, listing)
        run.leaders.append(leader_address(cluster))
        failover.settle(run.kills, run.events, leases, listing, run.leaders[-1])


def read_final(run: Run, view: MasterView, timeout: float = 60.0) -> list[dict]:
    """What a run's summary proves, read from its master once training ended (the local
    cluster's or the Ray job's): the epochs, the ledger, the events and the exactly-once
    audit into `run`. The dataset's lease history, which the audit read, is returned."""
    ds = final_status(view, timeout)
    run.epochs = list(ds.epochs)
    run.ledger = view.ledger()
    run.events = view.events()
    # the proof, from the master's durable lease history (GetLeases), not its counters
    leases = view.leases()
    run.audit = exactly_once(leases, ds.spec.num_records, ds.spec.num_epochs)
    run.exactly_once = ds.finished and not run.audit and all(
        e.records_done == e.records_total for e in ds.epochs)
    return leases


def final_status(view: MasterView, timeout: float = 60.0):
    """The dataset's status once a master answers (a standby may still be taking over)."""
    deadline = time.monotonic() + timeout
    while (ds := view.dataset_status()) is None:
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
