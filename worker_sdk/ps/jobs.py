"""What the pipeline (worker_sdk/ps/pipeline.py) keeps of each step: a push, a prefetch, a
Step in flight."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rpckit.errors import ServiceError

from .data_client import DataClient, PSUnavailable


@dataclass
class PushJob:
    mark: int  # ledger.mark() when its gradients were captured
    versions: dict[str, int]  # parameter versions the gradients were computed from
    grads: dict[str, torch.Tensor]
    rows: list[tuple[str, torch.Tensor, torch.Tensor]]  # (table, ids, row grads)
    settled: bool = False  # acknowledged, abandoned or dropped: once, by its first outcome
    index: int = 0  # its place among the pushes given (1 for the first)


@dataclass
class Prefetch:
    names: list[str] | None  # dense tensors to fetch (None: every one of the layout)
    ids: dict[str, torch.Tensor]  # table -> ids of the next batch
    done: bool = False  # answered, or failed (then `dense` and `rows` stay empty)
    dense: dict[str, torch.Tensor] | None = None
    versions: dict[str, int] | None = None
    dense_used: bool = False
    # table -> (unique ids, inverse, rows of the unique ids)
    rows: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    unique: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # read in two parts (worker_sdk/ps/fresh.py): table -> which distinct ids are read late,
    # with the next push (the dense tensors too); None: all in one Step
    late: dict[str, np.ndarray] | None = None
    # correct_own_writes: its read holds the first `after` pushes given and none after
    # `sent` (the pushes sent before its answer was taken, or `after` when the versions show
    # it was served before the next one: worker_sdk/ps/served.py); those after both it misses
    after: int = 0
    sent: int = 0
    # correct_own_writes, Adagrad rows: table -> bool mask over `unique` of the ids whose
    # optimizer state the read asks for (worker_sdk/ps/correct.py `marks`), and that state
    marks: dict[str, np.ndarray] = field(default_factory=dict)
    states: dict[str, torch.Tensor] = field(default_factory=dict)
    waiting: int = 1  # answers still to come
    parts: dict[str, list] = field(default_factory=dict)  # table -> [(positions, rows)]


@dataclass
class Flight:
    """A Step sent and not collected yet."""

    client: DataClient
    pending: object  # steps.PendingStep
    push: PushJob | None
    settles: bool  # its answer is the push's last: it acknowledges the push's records
    fetch: Prefetch | None
    part: str  # what it reads of `fetch`: "all", "early" or "late"
    then: tuple | None  # the push's second Step, sent once this one is answered


def unreachable(exc: BaseException) -> bool:
    """Whether a push failed because no PS took it (not because of what it carried)."""
    return isinstance(exc, PSUnavailable) or (
        isinstance(exc, ServiceError) and exc.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"))
