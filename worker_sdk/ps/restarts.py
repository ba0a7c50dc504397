"""A PS that restarted with nothing: the model declared there again, and the call goes on.

A PS SIGKILLed before its first checkpoint (or restored from one written before the model was
declared) comes back empty and answers every request FAILED_PRECONDITION / NOT_INITIALIZED.
That is no fault of the worker's data, so it must never end the worker nor spend a lease's
failure: the client declares the model on that PS again (`InitParameters`, whose first call
wins, so of several workers doing this at once one sets the values and the others change
nothing) and sends the refused parts again with a fresh seq (the refusal applied nothing).

The dense tensors are declared from this worker's current values (what it last pulled, with
the updates of everything the other PS hold), not the initial ones; embedding rows come back at
their initial values. What was lost is the master's to count: the PS told it it started empty
(`RegisterPSRequest.restored.empty`), and its `updates_lost` names the records
(docs/master.md, "Updates lost").
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from rpckit.errors import Reason

from .routes import PSError

log = logging.getLogger(__name__)

MAX_ROUNDS = 3  # declarations per call: a PS restarting again and again is PSUnavailable's


@dataclass
class Declaration:
    """What this worker declared (PSClient.init_parameters), shared by its clients: the
    optimizer and tables as sent, and where the dense tensors' current values are read."""

    optimizer: object = None  # ps_pb2.OptimizerConfig
    tables: list = field(default_factory=list)  # ps_pb2.TableSpec
    values: Callable[[], Mapping[str, torch.Tensor]] | None = None
    declared_again: int = 0  # PS declared again after they restarted empty
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def known(self) -> bool:
        return self.values is not None


def declare_again(client, indices: list[int], why: str,
                  init: Callable[[int, list[str], dict, Declaration], bool]) -> None:
    """Declare the model on the PS `indices` (they answered NOT_INITIALIZED: `why`) from this
    worker's current values; `init(index, names, values, declaration)` sends one PS its
    InitParameters and says whether it initialized it. Raises PSError when this client never
    declared a model (it cannot: an evaluator attached to the model waits for a worker)."""
    declared: Declaration | None = getattr(client, "declaration", None)
    if declared is None or not declared.known:
        raise PSError("FAILED_PRECONDITION", Reason.NOT_INITIALIZED,
                      f"{why}; this client declared no model to declare again there "
                      "(PSClient.init_parameters)")
    values = {n: t.detach().contiguous() for n, t in declared.values().items()}
    for index in indices:
        names = sorted(n for n in values if client.tensor_owner(n) == index)
        won = init(index, names, values, declared)
        with declared.lock:
            declared.declared_again += int(won)
        log.warning("PS %d restarted empty (%s); %s the model there from this worker's current "
                    "values (%d dense tensors; its embedding rows start again from their initial "
                    "values); the master counts the lost updates (updates_lost)", index, why,
                    "declared" if won else "another worker already declared", len(names))
