"""The Ray engine: each process of a job on a Ray node of its market, run by an actor.

A market is a node label (`market` by default, `market_label` to change it): a process of
market M runs on a node labelled `market=M` (Ray's label selectors). Its actor starts the
command in a session of its own (a signal reaches everything it starts) with its output in
the job's log folder, waits for it and hands back its exit status; the actor is detached and
named after the process (a master that takes over finds it by name) and never restarted by
Ray (`max_restarts=0`): the master decides what replaces it. Each process holds `num_cpus`
of its node's logical CPUs, so a market admits a launch while one of its live, undrained
nodes has that much free.

A node drained for preemption (Ray's DrainNode with reason preemption and a deadline, what a
cloud's spot notice becomes) is a notice for every process on it: SIGTERM now (a worker
hands its leases back exactly), a `preempted` event with the drain's deadline, SIGKILL if it
still runs then. Ray accepts an idle-termination drain only for a node with nothing on it,
so a draining node that runs our processes is being preempted. A node that dies without a
drain takes its processes with it: `lost` (their exit status is unknown). The command dies
with its actor (the parent-death signal), so nothing outlives a lost node.

`address` is what `ray.init` gets: `auto` joins the running cluster (RAY_ADDRESS or the
local one) and starts a local Ray when none runs; there the one node serves every market.
Launched processes get RAY_ADDRESS, so a master launched through this engine drives its job
on the same cluster. The log folder must be one every node writes to (shared storage, or
one machine).

The masters' addresses go into every process's command line before anything runs, so
`reserve` places them first: each on a live, undrained node of its market with a CPU free
(spread: a standby apart from its master where the market has room on several nodes), at
that node's address as Ray lists it, on a port picked free on that node by a task pinned
there; the master's launch then pins its actor to that node (`NodeAffinitySchedulingStrategy`,
not soft). No address of the machine that asked is assumed.
"""
from __future__ import annotations

import collections
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from . import process
from .owner import Owner
from .port import EngineEvent, EventKind, Handle, LaunchFailed, Refusal, check_launch
from .ray_runner import NODE_IP, Runner

log = logging.getLogger(__name__)

CPU = "CPU"
INFO_TIMEOUT_S = 5.0
PORTS_TIMEOUT_S = 60.0  # a task on a node: a worker process starts there first
# a PS listens on, and advertises, its node's address: the one the other nodes reach it at
PS_HOST_FLAGS = ("--host", NODE_IP, "--advertise-host", NODE_IP)


def market_nodes(nodes: list[dict], market: str, label: str | None,
                 draining: Collection[str]) -> list[dict]:
    """Of `nodes` (as `ray.nodes()` lists them), the live, undrained ones of `market` (those
    labelled `label=market`; every one when `label` is None)."""
    return [n for n in nodes if n["Alive"] and n["NodeID"] not in draining
            and (label is None or n.get("Labels", {}).get(label) == market)]


def spread(nodes: list[dict], n: int, num_cpus: float,
           held: Mapping[str, float]) -> list[dict]:
    """A node of `nodes` for each of `n` processes holding `num_cpus`: of the nodes with room
    left once `held` (node id -> CPUs held there) and those before it are counted, the one
    with the fewest of these `n` so far, then the most room (a standby apart from its master
    where it can be); LookupError when one fits nowhere."""
    room = {node["NodeID"]: node.get("Resources", {}).get(CPU, 0.0) - held.get(node["NodeID"], 0)
            for node in nodes}
    picked: collections.Counter[str] = collections.Counter()
    out = []
    for _ in range(n):
        fits = [node for node in nodes if room[node["NodeID"]] >= num_cpus]
        if not fits:
            raise LookupError(f"no live node has {num_cpus:g} CPU free")
        best = min(fits, key=lambda node: (picked[node["NodeID"]], -room[node["NodeID"]]))
        room[best["NodeID"]] -= num_cpus
        picked[best["NodeID"]] += 1
        out.append(best)
    return out


_RemoteRunner = ray.remote(Runner)
_free_ports = ray.remote(num_cpus=0, max_retries=0)(process.free_ports)


@dataclass
class _Proc:
    handle: Handle
    actor: object
    done: object                   # ObjectRef of Runner.wait
    info: object | None            # ObjectRef of Runner.info until read
    node_id: str = ""
    deadline: float | None = None  # when SIGKILL follows a notice or a graceful stop
    noticed: bool = False          # preempted: already reported
    killed: bool = False           # we sent SIGKILL


def namespace_of(workdir: Path | str) -> str:
    """One Ray namespace per job folder: names are unique within a job, not across jobs."""
    digest = hashlib.sha1(str(Path(workdir).resolve()).encode()).hexdigest()[:12]
    return f"elastic-ps-{digest}"


class RayEngine(Owner):
    """See the module docstring. `workdir`: the job's log folder (and its namespace);
    `num_cpus`: the logical CPUs each process holds on its node; `stop_grace_s`: SIGTERM to
    SIGKILL for a stop; `preempt_grace_s`: the same for a drain without a deadline."""

    def __init__(self, workdir: str | Path, *, address: str = "auto",
                 market_label: str = "market", num_cpus: float = 1.0,
                 stop_grace_s: float = 30.0, preempt_grace_s: float = 30.0,
                 cwd: str | Path | None = None, clock: Callable[[], float] = time.time):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.market_label = market_label
        self.num_cpus = num_cpus
        self.stop_grace_s = stop_grace_s
        self.preempt_grace_s = preempt_grace_s
        self.cwd = str(cwd or os.getcwd())
        self.clock = clock
        self.namespace = namespace_of(self.workdir)
        self._any_node = False  # a local Ray we started: its one node is every market
        self._owns_connection = False
        self._connect(address)
        self.address = ray.get_runtime_context().gcs_address
        self.ps_host_flags = list(PS_HOST_FLAGS)
        super().__init__()
        self._procs: dict[str, _Proc] = {}
        self._reserved: dict[str, str] = {}  # name -> hex id of the node it is to run on
        self._closed = False

    def _connect(self, address: str) -> None:
        if ray.is_initialized():
            return
        try:
            ray.init(address=address, namespace=self.namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
        except ConnectionError:
            if address != "auto":
                raise
            log.info("ray engine: no Ray cluster runs; starting a local one")
            ray.init(namespace=self.namespace, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
            self._any_node = True
        self._owns_connection = True

    # ---- the port -----------------------------------------------------------------------------

    def launch(self, role: str, name: str, market: str, command: list[str],
               env: dict[str, str]) -> Handle:
        """Start `command` with `env` (the whole environment, plus RAY_ADDRESS) in an actor on
        a node of `market`."""
        with self._lock:
            check_launch(name, command, self._closed, self.admits(market),
                         f"no live node of market {market!r} has {self.num_cpus:g} CPU free")
            log_path = self.workdir / f"{name}.log"
            options = dict(name=name, namespace=self.namespace, lifetime="detached",
                           max_restarts=0, max_task_retries=0, num_cpus=self.num_cpus)
            node_id = self._reserved.pop(name, None)
            if node_id:
                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id,
                                                                                soft=False)
            elif not self._any_node:
                options["label_selector"] = {self.market_label: market}
            try:
                actor = _RemoteRunner.options(**options).remote(
                    list(command), {**env, "RAY_ADDRESS": self.address}, str(log_path),
                    self.cwd)
            except ValueError as exc:  # the name is taken in this job's namespace
                raise LaunchFailed(Refusal.START_FAILED, f"{name}: {exc}") from exc
            handle = Handle(role=str(role), name=name, market=market,
                            id=actor._actor_id.hex(), started_ms=int(self.clock() * 1000),
                            log=str(log_path))
            self._watch(handle, actor)
            self._emit(EventKind.STARTED, handle)
            return handle

    def reserve(self, names: list[str], market: str,
                port: int = 0) -> list[tuple[str, int]]:
        """Where the processes to be launched as `names` on `market` listen, reachable from
        every node: a node of the market each (`spread`), its address as Ray lists it, `port`
        for the first (0: a free one) and ports free on its node for the rest; `launch` of
        such a name runs on that node. LaunchFailed (`no_capacity`) when the market has no
        room for them all, (`start_failed`) when a node did not answer."""
        with self._lock:
            if self._closed:
                raise LaunchFailed(Refusal.CLOSED, "the engine is closed")
            nodes = market_nodes(ray.nodes(), market,
                                 None if self._any_node else self.market_label, self._draining())
            held: dict[str, float] = collections.Counter()
            for node_id in [p.node_id for p in self._procs.values()] + \
                    list(self._reserved.values()):
                held[node_id] += self.num_cpus
            try:
                chosen = spread(nodes, len(names), self.num_cpus, held)
            except LookupError as exc:
                raise LaunchFailed(Refusal.NO_CAPACITY, f"market {market!r}: {exc}") from exc
            ports = self._ports_on(chosen, port)
            for name, node in zip(names, chosen):
                self._reserved[name] = node["NodeID"]
            return [(node["NodeManagerAddress"], p) for node, p in zip(chosen, ports)]

    def _ports_on(self, chosen: list[dict], port: int) -> list[int]:
        """`port` for the first of `chosen` (0: a free one), then a port free on each one's
        node, picked there (one task per node, all of a node's at once: none twice)."""
        fixed = 1 if port else 0
        wanted = collections.Counter(node["NodeID"] for node in chosen[fixed:])
        taken = {chosen[0]["NodeID"]: (port,)} if port else {}
        refs = {}
        for node in chosen[fixed:]:
            node_id = node["NodeID"]
            if node_id not in refs:
                strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
                refs[node_id] = _free_ports.options(scheduling_strategy=strategy).remote(
                    node["NodeManagerAddress"], wanted[node_id], taken.get(node_id, ()))
        try:
            free = dict(zip(refs, ray.get(list(refs.values()), timeout=PORTS_TIMEOUT_S)))
        except (GetTimeoutError, RayError) as exc:
            for ref in refs.values():
                ray.cancel(ref, force=True)
            raise LaunchFailed(Refusal.START_FAILED,
                               f"no free port from the nodes: {_first_line(exc)}") from exc
        return [port] * fixed + [free[node["NodeID"]].pop(0) for node in chosen[fixed:]]

    def _watch(self, handle: Handle, actor) -> None:
        self._procs[handle.id] = _Proc(handle, actor, actor.wait.remote(), actor.info.remote())

    def _signal(self, proc: _Proc, sig: int) -> None:
        proc.actor.signal.remote(int(sig))

    def admits(self, market: str) -> bool:
        """Whether the live, undrained nodes of `market` have `num_cpus` left once every
        process of ours there (placed or not yet) holds its share. Counted against the nodes'
        totals, not Ray's available resources: those lag a placement, so a launch not yet seen
        placed was counted twice against them (and a second launch on a free node refused)."""
        draining = self._draining()
        total = sum(node.get("Resources", {}).get(CPU, 0.0) for node in market_nodes(
            ray.nodes(), market, None if self._any_node else self.market_label, draining))
        with self._lock:
            ours = sum(1 for p in self._procs.values()
                       if (self._any_node or p.handle.market == market)
                       and p.node_id not in draining)
        return total - ours * self.num_cpus >= self.num_cpus

    def adopt(self, handle: Handle) -> bool:
        """Watch a process another engine (a master that died) started; True when its actor
        still runs (one gone is reported lost by the next poll)."""
        with self._lock:
            if handle.id in self._procs:
                return True
            actor = self._actor(handle.name)
            if actor is None or actor._actor_id.hex() != handle.id:
                self._emit(EventKind.LOST, handle, detail="its actor is gone")
                return False
            self._watch(handle, actor)
            return True

    def find(self, role: str, name: str, market: str) -> Handle | None:
        """The process launched as `name` in this job (by any engine on its folder) if its
        actor still runs: for a launch whose id was never recorded."""
        actor = self._actor(name)
        if actor is None:
            return None
        return Handle(role=str(role), name=name, market=market, id=actor._actor_id.hex(),
                      started_ms=int(self.clock() * 1000), log=str(self.workdir / f"{name}.log"))

    def _actor(self, name: str):
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None

    def cpu_seconds(self, handle: Handle) -> float | None:
        """CPU seconds the process and its children used so far (None: gone or no answer)."""
        proc = self._procs.get(handle.id)
        if proc is None:
            return None
        try:
            return ray.get(proc.actor.cpu_seconds.remote(), timeout=INFO_TIMEOUT_S)
        except (RayActorError, GetTimeoutError):
            return None

    def node_of(self, handle: Handle) -> str:
        """The hex id of the Ray node the process runs on ('' until it is placed)."""
        with self._lock:
            proc = self._procs.get(handle.id)
            return proc.node_id if proc else ""

    # ---- the round ----------------------------------------------------------------------------

    def poll(self) -> list[EngineEvent]:
        """One round: learn where new processes were placed, notice those on nodes drained
        for preemption, reap those that ended, SIGKILL those past their deadline. The events
        it produced (also queued)."""
        if not ray.is_initialized():  # closed: the processes are the next engine's
            return []
        with self._lock:
            before = len(self._events)
            self._placed()
            self._notice(self._draining())
            self._reap()
            now = self.clock()
            for proc in self._procs.values():
                if proc.deadline is not None and now >= proc.deadline and not proc.killed:
                    self._kill(proc)
            return list(self._events)[before:]

    def _placed(self) -> None:
        waiting = {p.info: p for p in self._procs.values() if p.info is not None}
        if not waiting:
            return
        ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=0)
        for ref in ready:
            proc = waiting[ref]
            proc.info = None
            try:
                proc.node_id = ray.get(ref)["node_id"]
            except RayActorError:
                proc.node_id = "?"  # died before it answered: the reap reports it

    def _notice(self, draining: dict[str, int]) -> None:
        now = self.clock()
        for proc in self._procs.values():
            if proc.noticed or proc.node_id not in draining:
                continue
            deadline_ms = draining[proc.node_id]
            deadline = deadline_ms / 1000 if deadline_ms else now + self.preempt_grace_s
            proc.noticed = True
            proc.deadline = deadline if proc.deadline is None else min(proc.deadline, deadline)
            self._signal(proc, signal.SIGTERM)
            self._emit(EventKind.PREEMPTED, proc.handle, deadline_ms=int(proc.deadline * 1000),
                       detail=f"node {proc.node_id[:12]} drained")

    def _reap(self) -> None:
        done = {p.done: p for p in self._procs.values()}
        if not done:
            return
        ready, _ = ray.wait(list(done), num_returns=len(done), timeout=0)
        for ref in ready:
            proc = done[ref]
            del self._procs[proc.handle.id]
            try:
                code = ray.get(ref)
            except RayActorError as exc:
                self._ended_with_actor(proc, exc)
                continue
            self._emit(EventKind.EXITED, proc.handle, code=code)
            ray.kill(proc.actor, no_restart=True)  # frees its CPU and its name

    def _ended_with_actor(self, proc: _Proc, exc: RayActorError) -> None:
        if getattr(exc, "preempted", False) and not proc.noticed:
            # drained and gone between two polls: still a preemption, not a failure
            self._emit(EventKind.PREEMPTED, proc.handle, deadline_ms=int(self.clock() * 1000),
                       detail="its node was drained and is gone")
        if proc.killed and not getattr(exc, "preempted", False):
            self._emit(EventKind.EXITED, proc.handle, code=-signal.SIGKILL)
        else:
            self._emit(EventKind.LOST, proc.handle, detail=f"its actor died: {_first_line(exc)}")

    def _draining(self) -> dict[str, int]:
        """Hex node id -> drain deadline (Unix ms, 0: none) of the nodes being drained."""
        try:
            return dict(ray._private.state.state.get_draining_nodes())
        except Exception:  # noqa: BLE001 - the GCS is briefly unreachable: next round
            log.warning("ray engine: cannot read the draining nodes", exc_info=True)
            return {}

    # ---- lifetime -----------------------------------------------------------------------------

    def stop_all(self, graceful: bool = True, timeout: float = 60.0) -> list[EngineEvent]:
        if not ray.is_initialized():  # closed: nothing of ours to reach any more
            return []
        return super().stop_all(graceful, timeout)

    def _overdue(self, late_s: float, timeout: float) -> None:
        for proc in list(self._procs.values()):
            if not proc.killed:
                self._kill(proc)
            if late_s > timeout:  # the actor no longer answers: its end frees the command
                ray.kill(proc.actor, no_restart=True)

    def close(self) -> None:
        """Refuse launches and leave Ray; the processes run on (a master that stops hands
        them to the next; `stop_all` ends them). A local Ray this engine started ends here,
        and with it what runs there."""
        with self._lock:
            self._closed = True
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
