"""Reading dense tensors out of the store (ParamStore's `pull` and `pull_packed`: a part the
store holds, `store.reads`).

A pull never sees a half-applied push: each tensor is read under its lock. `pull` hands each
tensor to `export` under its lock (the data plane sends the tensor's own memory, tracked, and
the tracker pins it until the bytes are sent: see ps/store/params.py); `pull_packed` copies the small
tensors into one flat tensor instead (pswire.frames: one frame for them all).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from pswire.frames import pack, packing
from .limits import check_names

# export(tensor) -> (payload, tracker or None); a tracker has `.done` once the payload's bytes
# are no longer read by anyone.
Export = Callable[[torch.Tensor], tuple]


def _copy_export(t: torch.Tensor):
    return t.clone(), None


class Reads:
    """A `ParamStore`'s dense reads: a part of the store, handed the store whose tensors,
    checks and counters it uses."""

    def __init__(self, store) -> None:
        self.store = store

    def pull(self, names: Sequence[str] = (), export: Export = _copy_export) -> list[tuple]:
        """[(name, payload, version, tensor)] for `names` (all when empty). `export` runs under
        the tensor's lock; its tracker pins the tensor's memory until the bytes are sent."""
        names = self._pulled_names(names)
        out = self._export(names, export)
        self.store.stats.pulls += 1
        return out

    def pull_packed(self, names: Sequence[str] = (),
                    export: Export = _copy_export) -> tuple[list[tuple], torch.Tensor | None]:
        """`pull`, with the tensors `pswire.frames.packing` picks (small, of one dtype) copied
        into one flat tensor: ([(name, payload, version, tensor)], flat). The packed tensors
        come first, with payload None, in the order of the flat tensor; flat is None when
        none is packed. Each packed tensor is read whole (under its lock)."""
        names = self._pulled_names(names)
        packed, alone = packing([self.store.dense[n].value for n in names])
        out: list[tuple] = []
        flat = None
        if packed:
            held = [self.store.dense[names[i]] for i in packed]
            for d in sorted(held, key=lambda d: d.name):  # the order pushes lock in
                d.lock.acquire()
            try:
                flat = self.store.flat.values_of(held)  # the flat buffer's copy, when laid out
                if flat is None:
                    flat = pack([d.value for d in held])
                out = [(d.name, None, d.version, d.value) for d in held]
            finally:
                for d in held:
                    d.lock.release()
        out += self._export([names[i] for i in alone], export)
        self.store.stats.pulls += 1
        return out, flat

    def _pulled_names(self, names: Sequence[str]) -> list[str]:
        self.store._require_init()
        check_names(names, self.store.limits, "a Pull")
        names = list(names) or sorted(self.store.dense)
        self.store._require_tensors(names)
        return names

    def _export(self, names: list[str], export: Export) -> list[tuple]:
        out = []
        for name in names:
            d = self.store.dense[name]
            with d.lock:
                payload, tracker = export(d.value)
                if tracker is not None:
                    d.pin_send(tracker)
                out.append((name, payload, d.version, d.value))
        return out
