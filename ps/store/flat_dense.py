"""The usual dense push in three calls: a PS's packed tensors living in flat buffers.

A worker sends a step's small gradients packed into one frame (pswire.frames). `FlatAdagrad`
keeps the tensors of such a push (or a push of one tensor), their Adagrad sums and their step
counters as views of three flat buffers laid out in the packed order, so the push is two
compiled passes and one torch call over the flat buffers, the packed frame being the gradient,
instead of six foreach calls over N tensors: torch's CPU foreach runs the per-tensor op on
each tensor, a few thousand instructions and a few KB of code apiece; with the code's cache
misses that was a fifth of a PS's Step (issue 27).

The arithmetic is `ps.store.optim._adagrad_all`'s, hence torch.optim's, to the bit: the same
elementwise operations in the same order and rounding (torch's `addcmul_` is a fused
multiply-add, its `add_` and `addcdiv_` round each step), and the square root is torch's own
call over the flat sums: torch's CPU kernels give an element the same bits wherever it lies in
a tensor (vectorized body or scalar tail, MKL's square root included), while a correctly
rounded square root differs from MKL's in the last bit for about a fifth of all floats.
tests/ps/test_flat_dense.py checks both claims.

The tensors stay what the rest of the store knows: the same `Dense.value` and optimizer state
tensor objects, re-pointed (`Tensor.set_`) into the flat buffers. Whatever later moves one of
them to memory of its own (a copy on write for a pull or a snapshot view, a restore, a slot
move) leaves a data pointer the layout does not expect; the next push then lays them out
anew. A push the layout does not fit (other tensors, another order, another optimizer) takes
the foreach path, unchanged.

A tensor sent in a frame of its own (at least PACK_BELOW_BYTES: the first layer's weight of a
wide model, a fifth to a half of a Criteo-shaped push's floats) is not laid out (a pull sends
it from its own memory, and a send still in flight would move it out of a layout at each
push): the same two compiled passes and torch's square root then run over its own memory
(`in_place`), where torch's foreach path made five calls and a fresh tensor for the square
roots (31 against 19 us for 27,456 floats measured alone, three to five times that with a
Step's caches cold).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from pswire.frames import PACK_BELOW_BYTES
from pswire.jit import njit

from .optim import same_adagrad, step_dense_all

MAX_LAYOUTS = 4  # sets of tensors pushed together that keep a layout (more: the oldest goes)
# A tensor pushed alone takes the flat path below this size (what a worker packs, and what a
# pull copies rather than sends from the tensor's memory: a larger one may be pinned by a send
# in flight, and its copy on write would move it out of its layout at every such push, where
# the per-call cost the flat path saves is small next to its arithmetic anyway).
ALONE_BELOW = PACK_BELOW_BYTES


@njit(fastmath={"contract"})
def accumulate(sums, grads, steps):
    """Adagrad's `step += 1` and `sum += g * g`: torch's `addcmul_`, one rounding (fused)."""
    for i in range(steps.size):
        steps[i] += np.float32(1)
    for i in range(sums.size):
        sums[i] = grads[i] * grads[i] + sums[i]


@njit(error_model="numpy")
def descend(values, grads, std, neg_lr, eps):
    """`std += eps; value += (-lr * g) / std`: torch's `add_` and `addcdiv_`, each operation
    rounded (nothing here is fused). The numpy error model: a division by zero (eps 0 and a
    zero sum) gives what torch's gives (inf or NaN) instead of raising, and the loop
    vectorizes."""
    for i in range(values.size):
        values[i] = values[i] + (neg_lr * grads[i]) / (std[i] + eps)


def warm_up() -> None:
    """Load (or compile) the two passes before the first push needs them."""
    a = np.ones(2, dtype=np.float32)
    accumulate(a.copy(), a, a.copy())
    descend(a.copy(), a, a, np.float32(-0.1), np.float32(1e-10))


@dataclass
class _Layout:
    optimizers: list  # the tensors' optimizers, each checked to be the same object
    states: list  # their state dicts (a copy for a snapshot view replaces tensors in them)
    hyper: tuple  # (lr, lr_decay, weight_decay, eps, maximize), `ps.store.optim.same_adagrad`'s
    values: torch.Tensor
    sums: torch.Tensor
    std: torch.Tensor  # scratch for the square roots
    arrays: tuple  # numpy views of values, sums, steps, std
    pointers: list[int]  # each tensor's value, sum and step data_ptr, in that order

    def holds(self, held: list) -> bool:
        """Whether `held`'s tensors and state are still this layout's buffers (nothing moved
        one to memory of its own since)."""
        if [d.optimizer for d in held] != self.optimizers:  # identity: no __eq__
            return False
        return _pointers((d.value, s["sum"], s["step"]) for d, s in zip(held, self.states)) \
            == self.pointers


def _pointers(triples) -> list[int]:
    """The data pointers of each (value, sum, step), in that order: what a layout expects."""
    pointers = []
    for v, s, c in triples:
        pointers += (v.data_ptr(), s.data_ptr(), c.data_ptr())
    return pointers


class FlatAdagrad:
    """The flat layouts of one store's tensors pushed together (each built on first use)."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, ...], _Layout] = {}
        self.layouts = 0  # layouts built: a test's window on re-layouts
        self._local = threading.local()  # `in_place`'s scratch, per thread

    def update(self, dense: dict, held: list, grads: list, packed_names=(), packed=None) -> None:
        """Apply `grads` to `held` (Dense of the store's `dense`, under their locks): those
        named `packed_names`, whose gradients are the flat `packed`, or a tensor pushed alone
        over flat buffers when they fit; the rest by `ps.store.optim.step_dense_all`."""
        if packed_names:
            flat = self.step([dense[n] for n in packed_names], packed)
        else:  # a small tensor alone is a flat buffer of its own
            flat = (len(held) == 1 and grads[0].numel() * grads[0].element_size() < ALONE_BELOW
                    and self.step(held, grads[0].reshape(-1)))
        if not flat:
            rest = list(zip(held, grads))
        elif packed_names and len(packed_names) < len(held):  # those in frames of their own
            packed_set = set(packed_names)
            rest = [(d, g) for d, g in zip(held, grads) if d.name not in packed_set]
        else:
            return
        rest = [(d, g) for d, g in rest if not self.in_place(d, g)]
        if rest:
            step_dense_all([d.optimizer for d, _ in rest], [d.value for d, _ in rest],
                           [g for _, g in rest])

    def in_place(self, d, grad: torch.Tensor) -> bool:
        """Apply `grad` to `d` (a Dense, under its lock, writable) over the memory its value
        and state hold, by `step`'s arithmetic; False, having changed nothing, when it does
        not fit (what `_lay_out` refuses: another optimizer, lr_decay, weight_decay,
        maximize, a dtype other than float32, memory not contiguous)."""
        hyper = same_adagrad([d.optimizer])
        value = d.value
        if (hyper is None or hyper[1:3] != (0, 0) or hyper[4] or grad.dtype != torch.float32
                or grad.shape != value.shape or not grad.is_contiguous()):
            return False
        state = d.optimizer.state[value]
        sums, steps = state.get("sum"), state.get("step")
        if not (isinstance(sums, torch.Tensor) and isinstance(steps, torch.Tensor)
                and value.dtype == sums.dtype == steps.dtype == torch.float32
                and sums.shape == value.shape and steps.dim() == 0
                and value.is_contiguous() and sums.is_contiguous()):
            return False
        g = grad.numpy().reshape(-1)
        accumulate(sums.numpy().reshape(-1), g, steps.numpy().reshape(1))
        std = self._scratch(value.numel())
        torch.sqrt(sums.view(-1), out=std)
        descend(value.numpy().reshape(-1), g, std.numpy(), np.float32(-hyper[0]),
                np.float32(hyper[3]))
        return True

    def _scratch(self, n: int) -> torch.Tensor:
        """n floats for `in_place`'s square roots: one buffer per handler thread, grown to the
        largest tensor (no fresh memory per push)."""
        kept = getattr(self._local, "std", None)
        if kept is None or kept.numel() < n:
            kept = self._local.std = torch.empty(n)
        return kept[:n]

    def step(self, held: list, grad: torch.Tensor) -> bool:
        """Apply the flat float32 gradient `grad` (the packed frame) to `held` (Dense, in the
        packed order), under every held tensor's lock, after their pins and snapshot views
        were dealt with. False: nothing done, the caller takes the per-tensor path (another
        optimizer, lr_decay, weight_decay or maximize, or tensors that are not float32)."""
        if grad.dtype != torch.float32:
            return False
        names = tuple(d.name for d in held)
        layout = self._layouts.get(names)
        if layout is None or not layout.holds(held):
            layout = self._lay_out(names, held)
            if layout is None:
                return False
        if grad.numel() != layout.values.numel():
            return False
        values, sums, steps, std = layout.arrays
        g = grad.numpy()
        accumulate(sums, g, steps)
        torch.sqrt(layout.sums, out=layout.std)
        descend(values, g, std, np.float32(-layout.hyper[0]), np.float32(layout.hyper[3]))
        return True

    def values_of(self, held: list) -> torch.Tensor | None:
        """A copy of the values of `held` (Dense, under their locks) one after the other, when
        they are a layout's, in its order (a packed pull of the tensors the worker pushes);
        else None. One copy where `pswire.frames.pack` makes one per tensor."""
        layout = self._layouts.get(tuple(d.name for d in held))
        if layout is None or [d.value.data_ptr() for d in held] != layout.pointers[::3]:
            return None
        return layout.values.clone()

    def _lay_out(self, names: tuple, held: list) -> _Layout | None:
        """Copy the tensors and their state into fresh flat buffers and re-point them there
        (the same tensor objects); None, changing nothing, when they do not fit."""
        self._layouts.pop(names, None)
        optimizers = [d.optimizer for d in held]
        hyper = same_adagrad(optimizers)
        # lr_decay reads each tensor's own step count; weight_decay and maximize are rare
        # enough to stay torch's (its weight decay is a fused multiply-add of its own)
        if hyper is None or hyper[1:3] != (0, 0) or hyper[4]:
            return None
        states = [o.state[d.value] for o, d in zip(optimizers, held)]
        values = [d.value for d in held]
        sums = [s.get("sum") for s in states]
        steps = [s.get("step") for s in states]
        if not all(isinstance(s, torch.Tensor) and isinstance(c, torch.Tensor)
                   and v.dtype == s.dtype == c.dtype == torch.float32 and v.shape == s.shape
                   and c.dim() == 0 and v.is_contiguous() and s.is_contiguous()
                   for v, s, c in zip(values, sums, steps)):
            return None
        with torch.no_grad():
            flat_values = torch.cat([v.reshape(-1) for v in values])
            flat_sums = torch.cat([s.reshape(-1) for s in sums])
            flat_steps = torch.stack(steps)
            offset = 0
            for i, (v, s, c) in enumerate(zip(values, sums, steps)):
                v.set_(flat_values.untyped_storage(), offset, v.shape, v.stride())
                s.set_(flat_sums.untyped_storage(), offset, s.shape, s.stride())
                c.set_(flat_steps.untyped_storage(), i, (), ())
                offset += v.numel()
        pointers = _pointers(zip(values, sums, steps))
        std = torch.empty_like(flat_sums)
        layout = _Layout(optimizers, states, hyper, flat_values, flat_sums, std,
                         (flat_values.numpy(), flat_sums.numpy(), flat_steps.numpy(),
                          std.numpy()), pointers)
        while len(self._layouts) >= MAX_LAYOUTS:  # pop: pushes of other tensors run beside
            self._layouts.pop(next(iter(self._layouts), None), None)
        self._layouts[names] = layout
        self.layouts += 1
        return layout
