"""The durable record of the job a master drives: the one owner of the `job` and
`job_processes` rows (master/persistence/schema.py) while a master runs. (Once every master is
gone, `elastic-job run` ends the rows of the processes it stopped: master/job/leftovers.py.)

Every change is written into the core's journal, so it commits with the leader's next batch
and is fenced like every other write (a deposed leader writes nothing). A process gets its
row *before* it is launched (`launching`), then its engine id (`launched`): a master that dies
in between leaves a row the next leader resolves (the engine finds the process by name or it
never started), so no slot of the plan is launched twice and none is orphaned.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Iterable

from engines.port import Handle

from ..persistence.journal import Journal
from ..states import Word


class JobState(Word):
    RUNNING = "running"
    FINISHING = "finishing"  # every dataset finished: stopping what it launched
    FINISHED = "finished"
    STOPPING = "stopping"    # asked to stop (elastic-job run got Ctrl-C / SIGTERM)
    STOPPED = "stopped"


class ProcState(Word):
    LAUNCHING = "launching"    # row written, launch not confirmed
    RUNNING = "running"
    PREEMPTING = "preempting"  # under a notice: SIGKILL at its deadline
    STOPPING = "stopping"      # we asked it to stop (drained, or the job ends)
    EXITED = "exited"
    LOST = "lost"
    FAILED = "failed"          # the launch itself failed

    @property
    def live(self) -> bool:
        return self in LIVE


LIVE = (ProcState.LAUNCHING, ProcState.RUNNING, ProcState.PREEMPTING, ProcState.STOPPING)


@dataclass
class Proc:
    name: str
    role: str
    market: str
    slot: int
    engine_id: str = ""
    log: str = ""
    state: str = ProcState.LAUNCHING.value
    launched_ms: int = 0
    ended_ms: int = 0
    exit_code: int | None = None
    cause: str = ""

    @property
    def live(self) -> bool:
        return ProcState(self.state).live

    def handle(self) -> Handle:
        return Handle(role=self.role, name=self.name, market=self.market, id=self.engine_id,
                      started_ms=self.launched_ms, log=self.log)


class JobBook:
    """The job row's fields and the live processes, in memory; each verb changes one and
    writes it to the journal. Call under the committer's lock (committer.call)."""

    def __init__(self, journal: Journal, row: dict | None = None,
                 procs: Iterable[dict] = ()):
        self.journal = journal
        row = row or {}
        self.name = row.get("name", "")
        self.spec_text = row.get("spec", "")
        self.state = JobState(row.get("state", JobState.RUNNING.value))
        self.started_ms = int(row.get("started_ms", 0))
        self.policy: dict | None = json.loads(row["policy"]) if row.get("policy") else None
        self.targets: dict[str, int] = json.loads(row.get("targets") or "{}")
        self.decisions: dict[str, int] = json.loads(row.get("decisions") or "{}")
        self.launches = int(row.get("launches", 0))
        self.masters = row.get("masters", "")
        self.exists = bool(row)
        self.procs: dict[str, Proc] = {}
        self.ended: dict[str, int] = {}  # per role/market: processes ended (for the summary)
        for p in procs:
            proc = Proc(**{k: p[k] for k in Proc.__dataclass_fields__})
            if proc.live:
                self.procs[proc.name] = proc

    # ---- the job ------------------------------------------------------------------------------

    def begin(self, name: str, spec_text: str, masters: str) -> None:
        """The first leader of a job writes its row; t = 0 of the market trace is now."""
        now = self.journal.now_ms()
        self.name, self.spec_text, self.masters = name, spec_text, masters
        self.started_ms, self.state, self.exists = now, JobState.RUNNING, True
        self.journal.batch.insert("job", 1, self._row(now))

    def _row(self, now: int) -> dict:
        return dict(id=1, name=self.name, spec=self.spec_text, state=str(self.state),
                    started_ms=self.started_ms, changed_ms=now,
                    policy=json.dumps(self.policy) if self.policy is not None else "",
                    targets=json.dumps(self.targets, sort_keys=True),
                    decisions=json.dumps(self.decisions, sort_keys=True),
                    launches=self.launches, masters=self.masters)

    def _touch(self) -> None:
        self.journal.touch("job", 1, lambda: self._row(self.journal.now_ms()))

    def set_state(self, state: JobState) -> None:
        if state != self.state:
            self.state = state
            self._touch()

    def record(self, policy: dict, targets: dict[str, int], reasons: Iterable[str]) -> None:
        """The policy's new state and targets, and the reasons of the decisions it took."""
        self.policy, self.targets = policy, dict(targets)
        for reason in reasons:
            self.decisions[reason] = self.decisions.get(reason, 0) + 1
        self._touch()

    # ---- processes ----------------------------------------------------------------------------

    def launching(self, role: str, market: str, slot: int = -1) -> Proc:
        """A new process's row, named `JOB-ROLE-N` (N counts every launch of the job), written
        before the engine is asked to launch it."""
        self.launches += 1
        suffix = f"{role}{slot}-{self.launches}" if slot >= 0 else f"{role}-{self.launches}"
        proc = Proc(name=f"{self.name}-{suffix}", role=role, market=market, slot=slot,
                    launched_ms=self.journal.now_ms())
        self.procs[proc.name] = proc
        self.journal.batch.insert("job_processes", proc.name, asdict(proc))
        self._touch()
        return proc

    def launched(self, proc: Proc, handle: Handle) -> None:
        proc.engine_id, proc.log, proc.state = handle.id, handle.log, ProcState.RUNNING.value
        self.journal.batch.update("job_processes", proc.name,
                                  dict(engine_id=proc.engine_id, log=proc.log, state=proc.state))

    def mark(self, proc: Proc, state: ProcState, cause: str = "") -> None:
        """A live process under a notice (preempting) or asked to stop (stopping)."""
        proc.state, proc.cause = state.value, cause or proc.cause
        self.journal.batch.update("job_processes", proc.name,
                                  dict(state=proc.state, cause=proc.cause))

    def end(self, proc: Proc, state: ProcState, code: int | None = None,
            cause: str = "") -> None:
        """It exited, was lost, or its launch failed: no longer live."""
        proc.state, proc.exit_code = state.value, code
        proc.cause = cause or proc.cause
        proc.ended_ms = self.journal.now_ms()
        self.procs.pop(proc.name, None)
        self.journal.batch.update("job_processes", proc.name, dict(
            state=proc.state, exit_code=code, cause=proc.cause, ended_ms=proc.ended_ms))

    def live(self, role: str | None = None, market: str | None = None) -> list[Proc]:
        return [p for p in self.procs.values()
                if (role is None or p.role == role) and (market is None or p.market == market)]

    def by_engine_id(self, engine_id: str) -> Proc | None:
        return next((p for p in self.procs.values() if p.engine_id == engine_id), None)
