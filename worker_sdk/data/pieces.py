"""What a lease stream hands out and the words it speaks: pieces of leases, waits, the end,
ack modes and leave reasons (worker_sdk/data/lease_stream.py)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from .leases import HeldLease


class AckMode(str, Enum):
    """How the SDK learns that a step finished (see the ack rule in worker_sdk/data/ack.py)."""

    def __str__(self) -> str:  # the value in messages and logs
        return self.value

    AUTO = "auto"  # PUSH once a PSClient exists in the process, NEXT until then
    PUSH = "push"  # ack.trained() (PSClient.push) or mark_trained(); nothing else
    NEXT = "next"  # the loop asking for the next step's data


class LeaveReason(str, Enum):
    """Why a worker leaves the master (the master keeps it as the requeue cause)."""

    def __str__(self) -> str:  # the value in messages and logs
        return self.value

    FINISHED = "finished"  # the data ran out (END, or the pass over the tail of the job)
    CLOSED = "closed"  # closed by the program mid-way
    ERROR = "error"  # an exception escaped the training loop
    INTERRUPTED = "interrupted"  # SIGINT (Ctrl-C) or KeyboardInterrupt: never a failure
    PREEMPTED = "preempted"  # SIGTERM: a spot reclaim, never counted as a failure


class Piece(NamedTuple):
    """Positions first .. first + count - 1 of a held lease, read in one go."""

    lease: HeldLease
    first: int
    count: int


@dataclass(frozen=True)
class Wait:
    """Nothing to lease right now: ask again after `seconds`."""

    seconds: float


class _End:
    def __repr__(self) -> str:
        return "END"


END = _End()  # the master answered END: every record of every epoch is trained
