"""A dense tensor held by a PS (value, optimizer, version, the pins of sends and snapshot
views still reading it) and the PS's counters."""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import torch


@dataclass
class Dense:
    name: str
    value: torch.Tensor
    optimizer: torch.optim.Optimizer
    version: int = 0
    pushes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    pins: list = field(default_factory=list)
    # open snapshot views reading value and optimizer state (several may overlap: a
    # checkpoint and a backup's copy)
    snaps: list = field(default_factory=list)


@dataclass
class Stats:
    pulls: int = 0
    pushes: int = 0
    row_pulls: int = 0
    row_pushes: int = 0
    refused_stale: int = 0
    copies_on_write: int = 0
    snapshot_copies: int = 0  # tensors and tables copied because a snapshot view read them
    waited_for_send: int = 0
    ahead: int = 0  # pushes that carried a version newer than the PS's (it restarted older)
    max_staleness_seen: int = 0
    staleness: Counter = field(default_factory=Counter)
