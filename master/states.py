"""The words the master stores and compares, as str enums: every case in one place.

Each member *is* its stored string (`WorkerState.LOST == "lost"`), so rows written before these
types existed read back unchanged, and a reader sees every case a column can hold. `str()` and
f-strings give the value, never `Class.NAME`, so a member can go straight into a row, an event
or a message.
"""
from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A str enum whose str() and format() are its value (as enum.StrEnum, also on 3.10)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:
        # hash as the plain string it equals, so a member and its stored value are one key
        return str.__hash__(self)


class Outcome(Word):
    """What a ShardReport says about its lease."""

    DONE = "DONE"          # every record of the lease was trained
    FAILED = "FAILED"      # the lease could not be trained; records_done of it were
    PROGRESS = "PROGRESS"  # records_done records from `start` were trained so far
    RELEASED = "RELEASED"  # records_done were trained, the rest goes back: not a failure


class Grant(Word):
    """GetShard's answer."""

    LEASED = "LEASED"
    WAIT = "WAIT"
    END = "END"


class WorkerState(Word):
    ALIVE = "alive"
    LEFT = "left"
    LOST = "lost"


class PSState(Word):
    ALIVE = "alive"
    LOST = "lost"  # its health check has failed for the timeout


class LeaseState(Word):
    DOING = "doing"
    DONE = "done"
    REQUEUED = "requeued"
    FAILED = "failed"


class Cause(Word):
    """Why a lease came back (a `LeaveWorker` reason is a cause too: any checked word)."""

    FAILED = "failed"
    RELEASED = "released"  # handed back by a worker whose push did not go through
    LOST = "lost"
    TIMEOUT = "timeout"
    QUARANTINE_RELEASED = "quarantine_released"


class EventKind(Word):
    """The kinds of the elasticity timeline (docs/master.md, "The timeline", names them)."""

    MASTER_STARTED = "master_started"
    MASTER_RECOVERED = "master_recovered"  # state reloaded from the database after a bug
    DATASET_CREATED = "dataset_created"
    DATASET_DROPPED = "dataset_dropped"  # elastic-ctl drop (master/datasets/drop.py)
    EPOCH_STARTED = "epoch_started"
    EPOCH_FINISHED = "epoch_finished"
    WORKER_REGISTERED = "worker_registered"
    WORKER_LEFT = "worker_left"
    WORKER_LOST = "worker_lost"
    PS_REGISTERED = "ps_registered"
    PS_LOST = "ps_lost"
    PS_RESIZE_STARTED = "ps_resize_started"  # resize-ps set a new target (master/ps/layout.py)
    PS_SLOTS_MOVED = "ps_slots_moved"        # slots changed owner: how many, how long
    PS_SLOTS_ROLLED_BACK = "ps_slots_rolled_back"  # a move failed before its commit (why)
    PS_RESIZE_FINISHED = "ps_resize_finished"  # the layout reached its target
    PS_RESIZE_WAITING = "ps_resize_waiting"  # planned moves wait: for which PS, and why
    LEASE_REQUEUED = "lease_requeued"
    SHARD_QUARANTINED = "shard_quarantined"
    # the job a master drives (master/job/driver.py): the policy's decisions, the engine's news
    SCALE_DECIDED = "scale_decided"            # role, market, from, to, reason, signals
    NODE_LAUNCHED = "node_launched"            # role, market, name
    NODE_LAUNCH_FAILED = "node_launch_failed"  # the engine refused or could not start it
    NODE_PREEMPTED = "node_preempted"          # a notice: SIGKILL at deadline_ms
    NODE_EXITED = "node_exited"                # exit code and cause (finished, crashed, ...)


class MovePhase(Word):
    """Where a pending slot move stands (master/ps/layout.py; the live move drives it).

    Before HANDOVER the old owner is authoritative, so a move in PLANNED or COPYING is rolled
    back to PLANNED by a restart of either PS or the master; from HANDOVER on it finishes
    forward (the layout takes the new owner and its version goes up)."""

    PLANNED = "planned"    # decided by the resize plan; nothing copied yet
    COPYING = "copying"    # the old owner streams the slot to the new one while serving
    HANDOVER = "handover"  # writes to the slot paused; the new owner confirms it has it all
