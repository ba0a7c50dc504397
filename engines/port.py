"""The port between the master and an engine: what the master may ask, what it is told.

An engine launches a process of a role (`master`, `ps`, `worker`) on a market under a name,
stops it (gracefully: SIGTERM, the worker hands its leases back exactly; or at once), says
whether a market admits launches now, and reports what happened to the processes it runs as
`EngineEvent`s: started, exited (with its code), preempted (a notice with the deadline after
which it is killed), lost (gone without a word: its code is unknown). Handles are plain values
the master stores, so a master that takes over can hand them to its own engine (`adopt`).
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Protocol


class ProcessKind(str, enum.Enum):
    """What a launched process is (`Handle.role`, a Decision's role, a Pod's role label)."""

    MASTER = "master"
    PS = "ps"
    WORKER = "worker"

    def __str__(self) -> str:
        return self.value


class EventKind(str, enum.Enum):
    STARTED = "started"
    EXITED = "exited"        # code: its exit status (negative: killed by that signal)
    PREEMPTED = "preempted"  # a notice (SIGTERM); deadline: when it is killed if still running
    LOST = "lost"            # gone without an exit status the engine could read

    def __str__(self) -> str:
        return self.value


class Refusal(str, enum.Enum):
    """Why a launch failed: the reasons the master branches on."""

    NO_CAPACITY = "no_capacity"      # the market admits no more processes now
    START_FAILED = "start_failed"    # the command could not be started (not found, ...)
    CLOSED = "closed"                # the engine is shutting down

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Handle:
    """One launched process. `id` is the engine's own (local: "PID:START_TICKS", so a pid the
    system reused is never taken for ours); `started_ms` wall-clock Unix ms."""

    role: str
    name: str
    market: str
    id: str
    started_ms: int = 0
    log: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> "Handle":
        return cls(**{k: row[k] for k in cls.__dataclass_fields__ if k in row})


@dataclass(frozen=True)
class EngineEvent:
    kind: EventKind
    handle: Handle
    time_ms: int
    code: int | None = None        # EXITED
    deadline_ms: int | None = None  # PREEMPTED
    detail: str = ""


class LaunchFailed(Exception):
    """A launch the engine refused or could not carry out; `reason` is a `Refusal`."""

    def __init__(self, reason: Refusal, message: str):
        super().__init__(message)
        self.reason = reason


def check_launch(name: str, command: list[str], closed: bool, admits: bool, full: str) -> None:
    """The refusals every engine makes before it starts anything, in this order: an empty
    command, an engine that is closed, a market with no room (`full`: why, in the engine's
    own terms). Called holding the engine's lock, so the room it saw is still there."""
    if not command:
        raise LaunchFailed(Refusal.START_FAILED, f"{name}: the command is empty")
    if closed:
        raise LaunchFailed(Refusal.CLOSED, f"{name}: the engine is closed")
    if not admits:
        raise LaunchFailed(Refusal.NO_CAPACITY, f"{name}: {full}")


class Engine(Protocol):
    """What the master needs of an engine. Every method is safe to call from one thread at a
    time; `events()` returns each event once. `ps_host_flags`: where a PS it runs listens and
    what it advertises (`--host`, `--advertise-host`), an address the job's other processes
    reach wherever the engine puts them (local: the loopback; Ray: its node's address as Ray
    lists it; Kubernetes: its pod's IP)."""

    ps_host_flags: list[str]

    def launch(self, role: str, name: str, market: str, command: list[str],
               env: dict[str, str]) -> Handle: ...

    def stop(self, handle: Handle, graceful: bool = True) -> None: ...

    def admits(self, market: str) -> bool: ...

    def adopt(self, handle: Handle) -> bool: ...

    def running(self) -> list[Handle]: ...

    def events(self) -> list[EngineEvent]: ...

    def close(self) -> None: ...


class MastersEngine(Engine, Protocol):
    """An engine `elastic-job run` starts the masters on (local, Ray; on Kubernetes the
    masters are a Deployment behind a Service). Every master's address goes into every
    master's and worker's command line, so it is known before any launch: `reserve` picks,
    for the processes to be launched as `names` on `market`, where each will listen (host,
    port), an address every node of the job reaches: `port` for the first (0: a free one),
    ports free where each will run for the rest. A later `launch` of such a name runs it
    there."""

    def reserve(self, names: list[str], market: str,
                port: int = 0) -> list[tuple[str, int]]: ...
