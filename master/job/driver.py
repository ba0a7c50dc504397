"""The leader drives the job: launches the PS set and the workers through an engine, runs the
policy every `scaling.interval_s`, applies its decisions, and stops everything once every
dataset is finished (or the job is asked to stop).

Runs on a thread of the leader (master/__main__.py `Leading`), started only when the master
was given a job spec. Everything it decides is durable before it acts: a process's row is
written before its launch (master/job/book.py), the policy's state and targets with every
decision, so a standby that takes over adopts the processes the old leader launched (or
learns they ended) and continues the plan: no slot launched twice, none orphaned. Events:
`scale_decided`, `node_launched`, `node_launch_failed`, `node_preempted`, `node_exited`.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from engines.port import EngineEvent, EventKind as EngineEventKind, LaunchFailed

from ..scaling.policy import decide
from ..scaling.state import PolicyState
from ..states import EventKind
from . import commands
from .book import JobBook, JobState, Proc, ProcState
from .gather import Gatherer, Since, came_up, records_done, records_total

log = logging.getLogger(__name__)
TICK_S = 0.25
MAX_PS_BACKOFF_S = 300.0
FINISH_GRACE_S = 10.0  # a finished job's workers see the end (END) and exit by themselves
# A drained worker that has left the master (its leases handed back, exact) gets this long to
# exit by itself, as long as the SDK gives its own main thread after the leave; then it is
# killed. Its interpreter's teardown took 4-11 s on a loaded machine: paid process time (an
# on-demand one's, after a market return) with nothing of the job left in it.
LEFT_GRACE_S = 3.0
RESIZE_REASONS = ("ps_hot", "ps_cold", "above_max", "budget")  # the PS set's size changes


class JobDriver:
    """`spec` the JobSpec, `spec_text` what is stored of it; `engine` an engines.port engine
    made for this job (its markets' clock counts from the book's `started_ms`: see `open`)."""

    def __init__(self, spec, core, committer, book: JobBook, engine, *, masters: str,
                 workdir, security: commands.Security = commands.Security(),
                 clock: Callable[[], float] = time.time):
        self.spec, self.core, self.committer = spec, core, committer
        self.book, self.engine = book, engine
        self.masters, self.workdir, self.security = masters, workdir, security
        self.clock = clock
        self.since = Since()
        self.gatherer = Gatherer()
        self.up: set[str] = set()     # processes that came up (registered) at some point
        self.draining = False         # a worker ended its work (END): launch no more workers
        self.next_decide = 0.0
        self.ps_retry: dict[int, tuple[float, int]] = {}  # index -> (not before, crashes)
        self.wind_down_since: float | None = None
        # drained workers seen gone from the master: since when (None: killed)
        self.left_at: dict[str, float | None] = {}
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- taking over ----------------------------------------------------------------------------

    def adopt(self) -> None:
        """Take over the processes the book lists as live: adopt those running, resolve the
        launches a dead leader did not confirm (found by name, or recorded as failed)."""
        for proc in list(self.book.procs.values()):
            if proc.engine_id:
                self.engine.adopt(proc.handle())  # gone ones come back as exit events
                continue
            handle = self.engine.find(proc.role, proc.name, proc.market)
            if handle is None:
                self._commit(lambda p=proc: self._failed(p, "launch not confirmed"))
            else:
                self.engine.adopt(handle)
                self._commit(lambda p=proc, h=handle: self.book.launched(p, h))
        log.info("job %s: %d processes adopted", self.book.name, len(self.book.procs))

    # ---- the loop -------------------------------------------------------------------------------

    def start(self) -> "JobDriver":
        self._thread = threading.Thread(target=self._run, name="job-driver", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self.stop_event.wait(TICK_S):
            try:
                self.step()
            except Exception:  # noqa: BLE001 - the next tick tries again
                if self.committer.fatal is not None:
                    return
                log.exception("job driver: a step failed")

    def close(self) -> None:
        """Stop driving (this master stops leading); the processes run on for the next."""
        self.stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.engine.close()

    def step(self) -> None:
        """One tick: the engine's events, then what the job's state asks."""
        if hasattr(self.engine, "poll"):
            self.engine.poll()
        names, indices = self.committer.read(lambda: came_up(self.core))
        for proc in self.book.procs.values():
            # a PS is up once its index has a primary registered since its launch
            if proc.name in names or (proc.role == "ps" and proc.state == ProcState.RUNNING
                                      and indices.get(proc.slot, -1) >= proc.launched_ms):
                self.up.add(proc.name)
        self._kill_left(names)
        for event in self.engine.events():
            self._on_event(event)
        state = self.book.state
        if state == JobState.RUNNING:
            if self._datasets_finished():
                log.info("job %s: every dataset finished; stopping its processes",
                         self.book.name)
                self._commit(lambda: self.book.set_state(JobState.FINISHING))
            else:
                self._drive()
                return
        if self.book.state in (JobState.FINISHING, JobState.STOPPING):
            self._wind_down()

    def _kill_left(self, alive: set[str]) -> None:
        """Kill a worker we drained once it has been gone from the master (left, or declared
        dead) for LEFT_GRACE_S: it holds no lease any more, so nothing is lost, and its
        process's time is no longer the job's. One never seen up is left to the engine's grace
        (it may be registering right now)."""
        now = self.clock()
        for proc in self.book.live("worker"):
            if (proc.state != ProcState.STOPPING or not proc.engine_id
                    or proc.name not in self.up or proc.name in alive):
                continue
            since = self.left_at.setdefault(proc.name, now)
            if since is not None and now - since >= LEFT_GRACE_S:
                self.left_at[proc.name] = None  # once: the exit event ends it
                self.engine.stop(proc.handle(), graceful=False)

    def _datasets_finished(self) -> bool:
        return self.committer.read(lambda: bool(self.core.datasets) and all(
            q.ended for q in self.core.datasets.values()))

    def request_stop(self, reason: str = "stopped") -> JobState:
        """elastic-job run was stopped: end the job as a preemption would (durable before it
        returns). The job's state after it."""
        def stop() -> JobState:
            if self.book.state == JobState.RUNNING:
                log.info("job %s: stopping (%s)", self.book.name, reason)
                self.book.set_state(JobState.STOPPING)
            return self.book.state
        return self._commit(stop)

    def _wind_down(self) -> None:
        """Workers first, the PS once no worker runs. A finished job's workers get
        FINISH_GRACE_S to see the end and exit by themselves before they are stopped."""
        finished = self.book.state == JobState.FINISHING
        if self.wind_down_since is None:
            self.wind_down_since = self.clock()
        workers = self.book.live("worker")
        if not finished or self.clock() - self.wind_down_since >= FINISH_GRACE_S:
            for proc in workers:
                if proc.state in (ProcState.RUNNING, ProcState.LAUNCHING):
                    self._stop(proc, "job_finished" if finished else "job_stopped")
        if not workers:
            for proc in self.book.live("ps"):
                if proc.state in (ProcState.RUNNING, ProcState.LAUNCHING):
                    self._stop(proc, "job_finished" if finished else "job_stopped")
        if not self.book.procs:
            done = JobState.FINISHED if self.book.state == JobState.FINISHING \
                else JobState.STOPPED
            self._commit(lambda: self.book.set_state(done))
            log.info("job %s: %s", self.book.name, done)

    # ---- events ---------------------------------------------------------------------------------

    def _on_event(self, event: EngineEvent) -> None:
        proc = self.book.by_engine_id(event.handle.id)
        if proc is None or event.kind == EngineEventKind.STARTED:
            return
        key = (proc.role, proc.market)
        if event.kind == EngineEventKind.PREEMPTED:
            self.since.preempted[key] += 1
            self._commit(lambda: (self.book.mark(proc, ProcState.PREEMPTING, "preempted"),
                                  self._event(EventKind.NODE_PREEMPTED, proc, "preempted",
                                              deadline_ms=event.deadline_ms)))
            return
        if proc.state == ProcState.STOPPING:
            cause = proc.cause or "stopped"
        elif proc.state == ProcState.PREEMPTING:
            cause = "preempted"
        elif event.code == 0:
            cause = "finished"
            self.draining = self.draining or proc.role == "worker"
        elif proc.name not in self.up:
            cause = "crashed"
            self.since.crashed[key] += 1
            self._ps_crashed(proc)
        else:
            cause = "lost"
            self.since.lost[key] += 1
        state = ProcState.LOST if event.kind == EngineEventKind.LOST else ProcState.EXITED
        self._commit(lambda: (self.book.end(proc, state, event.code, cause),
                              self._event(EventKind.NODE_EXITED, proc, cause, code=event.code)))
        self.up.discard(proc.name)
        self.left_at.pop(proc.name, None)

    def _ps_crashed(self, proc: Proc) -> None:
        if proc.role != "ps":
            return
        _, crashes = self.ps_retry.get(proc.slot, (0.0, 0))
        wait = min(MAX_PS_BACKOFF_S, self.spec.scaling.interval_s * 2 ** crashes)
        self.ps_retry[proc.slot] = (self.clock() + wait, crashes + 1)

    def _event(self, kind: EventKind, proc: Proc, cause: str, **extra) -> None:
        detail = {"role": proc.role, "market": proc.market, "name": proc.name, **extra}
        self.core.journal.event(kind, cause=cause, detail=json.dumps(detail, sort_keys=True))

    # ---- driving --------------------------------------------------------------------------------

    def _drive(self) -> None:
        self._keep_ps()
        now = self.clock()
        if now >= self.next_decide:
            self.next_decide = now + self.spec.scaling.interval_s
            self._decide(now)

    def _decide(self, now: float) -> None:
        signals = self._signals(now)
        state = PolicyState.from_dict(self.book.policy) if self.book.policy else None
        decisions, state = decide(self.spec, signals, state, now)
        self.since = Since()
        targets = {f"worker/{m}": signals.live("worker", m)
                   for m in self.spec.workers.market_names}
        for d in decisions:
            if d.role.value == "worker":
                targets[f"worker/{d.market}"] = d.to_count
        targets[f"ps/{self.spec.ps.market}"] = state.ps if state.ps is not None \
            else self.spec.ps.count

        def record():
            self.book.record(state.to_dict(), targets, [d.reason.value for d in decisions])
            for d in decisions:
                self.core.journal.event(EventKind.SCALE_DECIDED, cause=d.reason.value,
                                        detail=json.dumps(d.as_event(), sort_keys=True))
        self._commit(record)
        for d in decisions:
            self._apply(d)

    def _signals(self, now: float):
        records, total = self.committer.read(lambda: (records_done(self.core),
                                                       records_total(self.core)))
        markets = list(self.spec.workers.market_names)
        admits = {m for m in markets if self.engine.admits(m)}
        cpu = {}
        if hasattr(self.engine, "cpu_seconds"):
            cpu = {p.name: self.engine.cpu_seconds(p.handle()) for p in self.book.live("ps")
                   if p.state == ProcState.RUNNING and p.engine_id}
        return self.gatherer.signals(self.book, self.since, records, self.up, markets, admits,
                                     cpu, now, total)

    def _apply(self, d) -> None:
        if d.role.value == "ps":
            # the set's size moves by a live resize; a missing PS process (the start, a
            # preemption, a loss) is launched again for its index by _keep_ps
            if d.reason.value in RESIZE_REASONS and d.to_count != d.from_count:
                self._commit(lambda: self.core.resize_ps(d.to_count))
            return
        if d.delta == 0:
            return  # ahead_of_deadline: what was taken is not replaced; nothing to do
        if d.delta > 0:
            for _ in range(d.delta):
                if self.draining:
                    log.info("job %s: the data is handed out; no worker launched (%s)",
                             self.book.name, d.reason.value)
                    return
                self._launch("worker", d.market)
            return
        # those not up yet first (they lose nothing), then the newest
        live = [p for p in self.book.live("worker", d.market)
                if p.state in (ProcState.RUNNING, ProcState.LAUNCHING)]
        newest = sorted(live, key=lambda p: p.launched_ms, reverse=True)
        victims = [p for p in newest if p.name not in self.up] + \
            [p for p in newest if p.name in self.up]
        for proc in victims[:-d.delta]:
            self._stop(proc, d.reason.value)

    def _keep_ps(self) -> None:
        """Every index of the PS layout has its primary (and `ps.replicas` backups) running or
        on its way; after a shrink finished, the indices it removed are stopped."""
        layout = self.committer.read(lambda: (self.core.layout.version,
                                              self.core.layout.num_ps,
                                              self.core.layout.target,
                                              len(self.core.layout.moves)))
        version, num_ps, target, moves = layout
        want = max(target, num_ps) if version else self.spec.ps.count
        now = self.clock()
        for index in range(want):
            have = [p for p in self.book.live("ps") if p.slot == index
                    and p.state not in (ProcState.STOPPING, ProcState.PREEMPTING)]
            if len(have) >= 1 + self.spec.ps.replicas:
                continue
            not_before, _ = self.ps_retry.get(index, (0.0, 0))
            if now >= not_before:
                self._launch("ps", self.spec.ps.market, index,
                             num_ps=0 if version else self.spec.ps.count)
        if version and not moves and target == num_ps:
            for proc in self.book.live("ps"):
                if proc.slot >= num_ps and proc.state == ProcState.RUNNING:
                    self._stop(proc, "ps_cold")

    # ---- acting ---------------------------------------------------------------------------------

    def _launch(self, role: str, market: str, slot: int = -1, num_ps: int = 0) -> Proc | None:
        proc = self._commit(lambda: self.book.launching(role, market, slot))
        if role == "ps":
            argv, env = commands.ps(self.spec, proc.name, slot, self.masters, self.workdir,
                                    num_ps=num_ps, security=self.security,
                                    host_flags=self.engine.ps_host_flags)
        else:
            argv, env = commands.worker(self.spec, proc.name, market, self.masters,
                                        self.security)
        try:
            handle = self.engine.launch(role, proc.name, market, argv, env)
        except LaunchFailed as exc:
            self.since.failed_launches[(role, market)] += 1
            self._commit(lambda: self._failed(proc, str(exc.reason), str(exc)))
            return None
        self._commit(lambda: (self.book.launched(proc, handle),
                              self._event(EventKind.NODE_LAUNCHED, proc, "launched",
                                          id=handle.id)))
        return proc

    def _failed(self, proc: Proc, cause: str, why: str = "") -> None:
        self.book.end(proc, ProcState.FAILED, None, cause)
        self._event(EventKind.NODE_LAUNCH_FAILED, proc, cause, why=why or cause)

    def _stop(self, proc: Proc, why: str) -> None:
        self._commit(lambda: self.book.mark(proc, ProcState.STOPPING, why))
        if proc.engine_id:
            self.engine.stop(proc.handle(), graceful=True)
        else:
            self._commit(lambda: self._failed(proc, "stopped before its launch"))

    def _commit(self, fn):
        return self.committer.call(fn)
