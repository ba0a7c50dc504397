"""A dense tensor held by a PS (value, optimizer, version, the pins of sends and snapshot
views still reading it), the PS's counters, and the check of a push's gradients."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from pswire.frames import require_finite
from rpckit.errors import ServiceError, quote

# Roughly what copying a large tensor costs here (bytes/s): a push waits for a pull still
# sending the tensor at most as long as copying the tensor would take, then copies.
COPY_BYTES_PER_S = 2e9


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

    def pin_send(self, tracker) -> None:
        """Under self.lock: a send of `value`'s memory is in flight until `tracker.done`."""
        # only sends still in flight matter to a push: dropping the finished ones here keeps
        # a tensor that is pulled but never pushed from piling them up
        self.pins = [p for p in self.pins if not p.done]
        self.pins.append(tracker)

    def pin_snapshot(self, pin) -> None:
        """Under self.lock: an open snapshot view reads `value` and the optimizer state."""
        self.snaps = [p for p in self.snaps if not p.done] + [pin]

    def copy_state(self) -> None:
        """Under self.lock: move the tensor and its optimizer state to fresh memory, leaving
        what a snapshot view references untouched (the optimizer updates its state in
        place: exp_avg, sum, even Adam's step counter)."""
        self.value.data = self.value.data.clone()
        self.pins = []  # sends in flight read the old memory, which nobody changes now
        for state in self.optimizer.state.values():
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor):
                    state[key] = value.clone()

    def make_writable(self) -> tuple[bool, str]:
        """Under self.lock, before an update: no open snapshot view and no send in flight
        may see the memory change. Returns (copied for a snapshot view, what the sends
        cost: "copied", "waited" or "")."""
        copied = False
        if self.snaps:
            if any(not pin.done for pin in self.snaps):
                self.copy_state()  # protects every open view at once
                copied = True
            self.snaps = []
        return copied, self._unpin() if self.pins else ""

    def _unpin(self) -> str:
        """Wait for the sends at most about as long as copying the tensor would take (idle
        waiting leaves the CPU to ZeroMQ and the workers); then copy on write."""
        pins = [p for p in self.pins if not p.done]
        self.pins = []
        if not pins:
            return ""
        v = self.value
        deadline = time.monotonic() + v.numel() * v.element_size() / COPY_BYTES_PER_S
        for p in pins:
            left = deadline - time.monotonic()
            if left <= 0 or not hasattr(p, "wait"):
                break
            try:
                p.wait(left)
            except Exception:  # noqa: BLE001 - zmq.NotDone: still sending
                break
        if any(not p.done for p in pins):
            v.data = v.data.clone()
            return "copied"
        return "waited"

    def stepped(self) -> None:
        """Under self.lock: one update applied."""
        self.version += 1
        self.pushes += 1


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


def require_finite_grads(grads, packed=None, packed_count: int = 0) -> None:
    """Refuse NaN and infinities in any gradient: the first `packed_count`, views of
    `packed`, in one pass over it (one by one only when it fails, for a message that
    names the gradient)."""
    if packed is not None:
        try:
            require_finite(packed, "the packed gradients")
            grads = grads[packed_count:]
        except ServiceError:
            pass
    for name, g in grads:
        require_finite(g, lambda: f"the gradient of {quote(name)}")
