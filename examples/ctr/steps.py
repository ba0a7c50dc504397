"""The demo's steps (examples/ctr/schedule.py runs them): what each does to the running job,
when it may, and how its effect is seen. Every call returns at once: a process is started
without waiting for it to listen, a resize is asked and not waited for; what follows is read
from the master (GetStatus, ListPS, GetEvents) and the processes' logs at the next poll.

`Context` is what they share: the cluster, the demo's `Run` (kills, resizes, the workers
signalled), the warm standby workers, and the master's events read so far. The resize's
steps (Grow, Shrink) are in examples/ctr/resize.py.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cluster.launch import LaunchError, Proc
from examples.ctr import failover
from examples.ctr.schedule import Step, StepFailed
from examples.ctr.summary import LOST_CAUSES
from protos import master_pb2 as pb

CALL_S = 2.0  # a poll's RPC: short, so that a master taking over does not stall the loop


@dataclass
class Context:
    cluster: object               # cluster.local.LocalCluster
    run: object                   # examples.ctr.demo.Run
    standby: list = field(default_factory=list)  # (name, go file) of warm standby workers
    active: int = 1               # workers training (the pace divides the rate among them)
    events: list = field(default_factory=list)   # the master's events, read so far
    _next_event: int = 0

    def status(self):
        return self.cluster.status(timeout=CALL_S)

    def layout(self):
        status = self.status()
        return status.layout if status is not None else None

    def ps_list(self):
        try:
            return self.cluster.ps_list(timeout=CALL_S)
        except grpc.RpcError:
            return None  # a standby taking over: asked again at the next poll

    def read_events(self) -> list:
        """The master's events, the new ones read now (nothing new while none answers)."""
        try:
            while True:
                page = self.cluster.stub().GetEvents(
                    pb.GetEventsRequest(since=self._next_event, limit=1000), timeout=CALL_S)
                if not page.events:
                    break
                self.events += page.events
                self._next_event = page.next  # the last seq read: `since` is exclusive
        except grpc.RpcError:
            pass
        return self.events


def listening(proc: Proc) -> bool:
    """Whether a process started without waiting has printed its ready line (its ports are
    then read); StepFailed when it exited first."""
    if proc.match is not None:
        return True
    try:
        proc.match = proc.wait_for(proc.ready, 0)
    except LaunchError:
        if not proc.alive:
            raise StepFailed(f"{proc.name} exited with {proc.returncode} before it listened "
                             f"(log: {proc.log})") from None
        return False
    proc.port = int(proc.match.group("port"))
    return True


def holders(ctx: Context, exclude: set[str] = frozenset()) -> list:
    """Running workers that hold leases now, as the master says, the first registered first."""
    status = ctx.status()
    if status is None:
        return []
    alive = set(ctx.cluster.alive()) - exclude
    return sorted((w for w in status.workers if w.name in alive and w.state == "alive"
                   and (w.leases_held or w.leases)), key=lambda w: w.registered_ms)


class ScaleUp(Step):
    """The warm standby workers (interpreter and torch loaded) join."""

    name = "scale-up"
    part = "churn"

    def describe(self) -> str:
        return f"scale up to {1 + self.count} workers (warm standbys join)"

    def done(self) -> str:
        return f"{', '.join(self.names)} join (warm standbys)"

    def effect(self) -> str:
        return f"{', '.join(self.names)} registered with the master"

    def __init__(self, at: float | None, count: int):
        super().__init__(at)
        self.count = count
        self.names: list[str] = []

    def fire(self, ctx: Context) -> bool:
        for name, go in ctx.standby[:self.count]:
            Path(go).touch()
            self.names.append(name)
        del ctx.standby[:self.count]
        ctx.active += len(self.names)
        return True

    def check(self, ctx: Context) -> bool:
        status = ctx.status()
        registered = {w.name for w in status.workers if w.state == "alive"} if status else set()
        gone = [n for n in self.names if n not in ctx.cluster.alive()]
        if gone:
            raise StepFailed(f"{', '.join(gone)} exited before registering")
        return set(self.names) <= registered


class KillWorker(Step):
    """SIGKILL a worker that holds leases: the master declares it lost after the worker
    timeout and requeues its leases."""

    name = "SIGKILL worker"
    part = "churn"

    def __init__(self, at: float | None):
        super().__init__(at)
        self.victim: tuple[str, str] | None = None

    def describe(self) -> str:
        return "SIGKILL a worker holding leases"

    def done(self) -> str:
        return f"SIGKILL {self.victim[0]} ({self.victim[1]}, holding leases)"

    def effect(self) -> str:
        return (f"{self.victim[0]} declared lost after the worker timeout, its leases "
                "requeued")

    def ready(self, ctx: Context) -> str:
        return "" if holders(ctx) else "a worker holding leases"

    def fire(self, ctx: Context) -> bool:
        found = holders(ctx)
        if not found:
            return False
        self.victim = (found[0].name, found[0].worker_id)
        ctx.cluster.signal_worker(found[0].name, signal.SIGKILL)
        ctx.run.sigkilled.append(self.victim)
        ctx.active -= 1
        return True

    def check(self, ctx: Context) -> bool:
        worker_id = self.victim[1]
        events = ctx.read_events()
        return any(e.kind == "worker_lost" and e.worker_id == worker_id for e in events) and \
            any(e.kind == "lease_requeued" and e.worker_id == worker_id
                and e.cause in LOST_CAUSES for e in events)


class StopWorker(Step):
    """SIGTERM a worker that holds leases (a spot reclaim notice): it hands them back with
    their progress, leaves (reason preempted) and exits 0."""

    name = "SIGTERM worker"
    part = "churn"

    def __init__(self, at: float | None):
        super().__init__(at)
        self.victim: tuple[str, str] | None = None

    def describe(self) -> str:
        return "SIGTERM a worker holding leases"

    def done(self) -> str:
        return f"SIGTERM {self.victim[0]} ({self.victim[1]}, holding leases)"

    def effect(self) -> str:
        return f"{self.victim[0]} handed its leases back, left and exited"

    def _candidates(self, ctx: Context) -> list:
        return holders(ctx, exclude={name for name, _ in ctx.run.sigkilled})[1:]

    def ready(self, ctx: Context) -> str:
        # never the last one training: someone must finish the job
        return "" if self._candidates(ctx) else "a second worker holding leases"

    def fire(self, ctx: Context) -> bool:
        found = self._candidates(ctx)
        if not found:
            return False
        victim = found[-1]  # the last to register
        self.victim = (victim.name, victim.worker_id)
        ctx.cluster.signal_worker(victim.name, signal.SIGTERM)
        ctx.run.sigtermed.append(self.victim)
        ctx.active -= 1
        return True

    def check(self, ctx: Context) -> bool:
        name, worker_id = self.victim
        if name in ctx.cluster.alive():
            return False
        return any(e.kind == "worker_left" and e.worker_id == worker_id
                   for e in ctx.read_events())


class KillLeader(Step):
    """SIGKILL the master that leads; the standby takes over within the leader lease."""

    name = "SIGKILL master leader"
    part = "ha"

    def __init__(self, at: float | None):
        super().__init__(at)
        self.kill: failover.Kill | None = None

    def describe(self) -> str:
        return "SIGKILL the master leader (the standby takes over)"

    def done(self) -> str:
        return f"SIGKILL the master leader {self.kill.victim}"

    def effect(self) -> str:
        return "the standby took over (it leads)"

    def ready(self, ctx: Context) -> str:
        leader = ctx.cluster.leader()
        if leader is None:
            return "a master leading"
        if not any(m.alive and m is not leader for m in ctx.cluster.masters):
            raise StepFailed("no standby master is running to take over")
        layout = ctx.layout()
        if layout is None or layout.resizing:
            return "a master answering and no resize under way"
        return ""

    def fire(self, ctx: Context) -> bool:
        self.kill = failover.kill_leader(ctx.cluster)
        if self.kill is None:
            return False
        ctx.run.kills.append(self.kill)
        return True

    def check(self, ctx: Context) -> bool:
        leader = ctx.cluster.leader()
        return leader is not None and leader.address != self.kill.victim


class KillPrimary(Step):
    """SIGKILL the primary of a PS index whose backup is in sync; the backup is promoted."""

    name = "SIGKILL PS primary"
    part = "ha"

    def __init__(self, at: float | None):
        super().__init__(at)
        self.kill: failover.Kill | None = None

    def describe(self) -> str:
        return "SIGKILL a PS primary whose backup is in sync (the backup is promoted)"

    def done(self) -> str:
        return (f"SIGKILL the primary of PS {self.kill.index} {self.kill.victim} (its backup "
                "is in sync)")

    def effect(self) -> str:
        return f"its backup promoted (PS {self.kill.index} generation " \
            f"{self.kill.generation} -> {self.kill.generation + 1})"

    def ready(self, ctx: Context) -> str:
        listing = ctx.ps_list()
        if listing is None:
            return "a master answering"
        if listing.replicas == 0:
            raise StepFailed("the master asks for no PS backups (--ps-replicas 0)")
        if listing.target_num_ps != listing.num_ps or failover.promotable(listing) is None:
            return "a PS backup in sync and no resize under way"
        return ""

    def fire(self, ctx: Context) -> bool:
        listing = ctx.ps_list()
        info = failover.promotable(listing) if listing is not None else None
        self.kill = failover.kill_ps_primary(ctx.cluster, info) if info is not None else None
        if self.kill is None:
            return False
        ctx.run.kills.append(self.kill)
        return True

    def check(self, ctx: Context) -> bool:
        listing = ctx.ps_list()
        info = next((i for i in listing.ps if i.index == self.kill.index), None) \
            if listing is not None else None
        return info is not None and info.generation == self.kill.generation + 1


class Rejoin(Step):
    """The killed primary starts again: it must join as a backup of the new primary."""

    name = "old primary rejoins"
    part = "ha"

    def __init__(self, at: float | None, killed: KillPrimary):
        super().__init__(at)
        self.killed = killed

    def describe(self) -> str:
        return "start the killed PS primary again (it joins as a backup)"

    def done(self) -> str:
        return f"the old primary of PS {self.killed.kill.index} starts again"

    def effect(self) -> str:
        return (f"it joined as a backup of PS {self.killed.kill.index} (fenced from clients) "
                "and is in sync")

    def fire(self, ctx: Context) -> bool:
        if not failover.rejoin(ctx.cluster, self.killed.kill):
            raise StepFailed("the killed primary is not one of this cluster's processes")
        return True

    def check(self, ctx: Context) -> bool:
        kill = self.killed.kill
        proc = kill.rejoined
        if not listening(proc):
            return False
        listing = ctx.ps_list()
        info = next((i for i in listing.ps if i.index == kill.index), None) \
            if listing is not None else None
        if info is None or not any(b.data_address == proc.data_address
                                   and b.state == failover.IN_SYNC for b in info.backups):
            return False
        try:
            status = ctx.cluster.ps_status(proc)
        except grpc.RpcError:
            return False
        kill.rejoined_role, kill.rejoined_generation = status.role, status.generation
        return True
