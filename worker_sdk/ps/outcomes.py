"""What the data plane answers a client: outcomes of pushes and steps, and a stale refusal."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rpckit.errors import Reason, ServiceError


class StaleGradient(ServiceError):
    """A push was refused for staleness (--max-staleness): pull again and recompute."""

    def __init__(self, message: str, versions: dict[str, int]):
        super().__init__("FAILED_PRECONDITION", Reason.STALE_GRADIENT, message)
        self.versions = versions


@dataclass
class PushOutcome:
    versions: dict[str, int] = field(default_factory=dict)  # after the push, per tensor
    max_staleness: int = 0
    duplicate: bool = False  # a retry found the push already applied


@dataclass
class StepOutcome:
    push: PushOutcome | None = None  # the dense push (None: none was sent)
    rows_updated: int = 0
    duplicate: bool = False
    dense: dict[str, torch.Tensor] | None = None  # pulled tensors (None: no pull asked)
    versions: dict[str, int] = field(default_factory=dict)  # of the pulled tensors
    rows: dict[str, torch.Tensor] = field(default_factory=dict)  # table -> rows of the ids
    # table -> the optimizer state of the marked ids ([m, dim], in their order), when asked
    states: dict[str, torch.Tensor] = field(default_factory=dict)
    pulled_from: dict[str, int] = field(default_factory=dict)  # tensor -> the PS that read it
    served: set[int] = field(default_factory=set)  # the PS that read tensors or rows for it


def dense_grad(g: torch.Tensor) -> torch.Tensor:
    """A gradient as the frame of a dense tensor: a sparse one (nn.Embedding(sparse=True))
    is coalesced (repeated rows summed) and densified, to the parameter's shape."""
    if g.layout != torch.strided:
        g = g.coalesce().to_dense() if g.is_sparse else g.to_dense()
    return g.detach()
