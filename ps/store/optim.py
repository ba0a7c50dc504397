"""Optimizers on the PS: torch.optim itself for dense tensors, row-wise SGD/Adagrad for tables.

Which optimizers and hyperparameters exist, and how a config travels, is the wire contract's
(pswire/optimizers.py); this module runs them.

Each dense tensor gets its own real `torch.optim` optimizer (one param group, one tensor), and a
push sets `.grad` and calls `step()`, so the PS's arithmetic is torch.optim's by construction.
A push of several Adagrad tensors runs as one foreach update over all of them (`step_dense_all`):
the same per-tensor operations torch.optim's single-tensor Adagrad runs, in the same order, on
the optimizers' own state, so the result is the same to the bit; a worker's packed push runs
over flat buffers instead (ps/store/flat_dense.py), the same arithmetic again.
Embedding rows are updated the way `torch.optim.SGD` / `torch.optim.Adagrad` update a sparse
`nn.Embedding(sparse=True)` weight: only the pushed rows change, duplicates are summed first.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import torch

from pswire.optimizers import DENSE, make_dense

from .tables import kernels


def _without_dynamo() -> None:
    """Let this process's optimizers skip torch._dynamo: torch.optim wraps add_param_group,
    state_dict, load_state_dict and zero_grad so that torch.compile does not trace them, and
    the wrapper's first call imports torch._dynamo (1-3 s of CPU: a fresh PS's first
    InitParameters, restore or checkpoint waited for it). The PS compiles nothing, so each
    method's own "disabled" form is the method itself: set where the wrapper caches it (a
    torch without that cache imports torch._dynamo as before). A PS process only: a worker's
    own torch.compile keeps torch's behaviour."""
    for name in ("add_param_group", "state_dict", "load_state_dict", "zero_grad"):
        wrapper = getattr(torch.optim.Optimizer, name, None)
        inner = getattr(wrapper, "__wrapped__", None)
        code = getattr(wrapper, "__code__", None)
        if (inner is not None and code is not None and code.co_name == "inner"
                and code.co_filename == getattr(torch._compile, "__file__", None)
                and getattr(inner, "__dynamo_disable", None) is None):
            setattr(inner, "__dynamo_disable", inner)


_without_dynamo()


def restore_dense(cfg: dict, param: torch.Tensor, state_dict: dict) -> torch.optim.Optimizer:
    """`make_dense` with the state of a checkpoint loaded, without first allocating a fresh
    state (Adagrad makes its `sum`, as large as the tensor, in its constructor): the optimizer
    is built over an empty stand-in, then given `param` and the checkpoint's state."""
    optimizer = make_dense(cfg, param.new_empty(0))
    optimizer.param_groups[0]["params"] = [param]
    optimizer.state.clear()
    optimizer.load_state_dict(state_dict)
    return optimizer


def _undecorated_step(cls):
    """The class's own `step`, without torch.optim's hook/profiler wrappers (which cost about
    20 us a call and which these private optimizers never use: no hooks are registered)."""
    fn = cls.step
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


_STEPS = {cls: _undecorated_step(cls) for cls in DENSE.values()}


def step_dense(optimizer: torch.optim.Optimizer, param: torch.Tensor, grad: torch.Tensor) -> None:
    """One torch.optim step of `optimizer` (over `param` alone) with gradient `grad`."""
    param.grad = grad
    try:
        with torch.no_grad():
            _STEPS.get(type(optimizer), type(optimizer).step)(optimizer)
    finally:
        param.grad = None


_ADAGRAD_HYPER = ("lr", "lr_decay", "weight_decay", "eps", "maximize")
_hyper = operator.itemgetter(*_ADAGRAD_HYPER)


def step_dense_all(optimizers: list, params: list[torch.Tensor],
                   grads: list[torch.Tensor]) -> None:
    """`step_dense` of each (optimizer, param, grad). Adagrads with the same hyperparameters
    (those of one store) are updated together: a call per operation over all the tensors
    instead of a torch.optim step per tensor (about 30 us each, most of a small tensor's
    push; cheaper even for one tensor), with the single-tensor path's arithmetic exactly."""
    hyper = same_adagrad(optimizers)
    if hyper is not None:
        _adagrad_all(optimizers, params, grads, *hyper)
        return
    for optimizer, param, grad in zip(optimizers, params, grads):
        step_dense(optimizer, param, grad)


def same_adagrad(optimizers: list) -> tuple | None:
    """The hyperparameters (lr, lr_decay, weight_decay, eps, maximize) when `optimizers` are
    all torch.optim.Adagrad with the same ones (those of one store) and not differentiable:
    those updated together. None otherwise."""
    if not optimizers or not all(type(o) is torch.optim.Adagrad for o in optimizers):
        return None
    groups = [o.param_groups[0] for o in optimizers]
    hyper = _hyper(groups[0])
    if groups[0]["differentiable"] or not all(_hyper(g) == hyper for g in groups):
        return None
    return hyper


def _adagrad_all(optimizers, params, grads, lr, lr_decay, weight_decay, eps, maximize) -> None:
    """torch.optim.adagrad's `_single_tensor_adagrad` for dense real tensors, as foreach calls
    (on CPU a foreach op runs the per-tensor op on each tensor: the same arithmetic)."""
    states = [o.state[p] for o, p in zip(optimizers, params)]
    sums = [s["sum"] for s in states]
    steps = [s["step"] for s in states]
    with torch.no_grad():
        torch._foreach_add_(steps, _scalars(steps, 1))
        if maximize:
            grads = torch._foreach_neg(grads)
        if weight_decay != 0:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        torch._foreach_addcmul_(sums, grads, grads, value=1)
        std = torch._foreach_sqrt(sums)
        torch._foreach_add_(std, _scalars(std, eps))
        if lr_decay == 0:
            torch._foreach_addcdiv_(params, grads, std, value=-lr)
        else:  # clr as torch computes it, from each tensor's own step count
            clrs = [-(lr / (1 + (s.item() - 1) * lr_decay)) for s in steps]
            torch._foreach_addcdiv_(params, grads, std, clrs)


_EXACT_SCALAR_DTYPES = (torch.float32, torch.float64)
_SCALARS: dict[tuple, torch.Tensor] = {}


def _scalars(tensors: list[torch.Tensor], value: float):
    """`value` for `torch._foreach_add_` over `tensors`: as one 0-dim tensor of each one's
    dtype when all are float32 or float64, else the Python number. The same arithmetic: a
    Python scalar added to a float32 (float64) tensor is rounded to float32 (float64) first,
    as the 0-dim tensor is. Faster: torch's CPU foreach add of a Python scalar wraps and
    converts it once per tensor (about 2 us each), the tensor list not."""
    if not all(t.dtype in _EXACT_SCALAR_DTYPES for t in tensors):
        return value
    out = []
    for t in tensors:
        key = (t.dtype, value)
        s = _SCALARS.get(key)
        if s is None:
            s = _SCALARS.setdefault(key, torch.tensor(value, dtype=t.dtype))
        out.append(s)
    return out


@dataclass
class RowOptimizer:
    """Row-wise SGD or Adagrad with torch.optim's defaults and arithmetic (sparse grads)."""

    name: str
    lr: float
    lr_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10

    @classmethod
    def from_config(cls, cfg: dict) -> "RowOptimizer":
        default_lr = 1e-3 if cfg["name"] == "sgd" else 1e-2
        return cls(name=cfg["name"], lr=float(cfg.get("lr", default_lr)),
                   lr_decay=float(cfg.get("lr_decay", 0.0)),
                   initial_accumulator_value=float(cfg.get("initial_accumulator_value", 0.0)),
                   eps=float(cfg.get("eps", 1e-10)))

    @property
    def has_accumulator(self) -> bool:
        return self.name == "adagrad"

    def apply(self, weights: torch.Tensor, accum: torch.Tensor | None, places: np.ndarray,
              grads: torch.Tensor, step: int) -> None:
        """Update rows `places` (distinct, int64) of `weights` with the summed `grads`; `step`
        counts the updates of this table, 1 for the first (Adagrad's lr_decay uses it). One
        compiled pass over the rows (ps/store/tables/kernels.py; `apply_reference` is the same
        arithmetic as torch calls)."""
        w, g = weights.numpy(), float32_rows(grads)
        at = np.ascontiguousarray(places, np.int64)
        if self.name == "sgd":
            kernels.sgd(w, at, g, self.lr)
            return
        clr = self.lr / (1 + (step - 1) * self.lr_decay)
        kernels.adagrad(w, accum.numpy(), at, g, clr, self.eps)

    def apply_reference(self, weights: torch.Tensor, accum: torch.Tensor | None,
                        places: np.ndarray, grads: torch.Tensor, step: int) -> None:
        """`apply` as torch calls (what the compiled loop is tested against)."""
        at = torch.from_numpy(places)
        if self.name == "sgd":
            rows = gather_rows(weights, places)
            rows.add_(grads, alpha=-self.lr)
            weights.index_copy_(0, at, rows)
            return
        clr = self.lr / (1 + (step - 1) * self.lr_decay)
        state = gather_rows(accum, places)
        state.add_(grads.pow(2))
        accum.index_copy_(0, at, state)
        std = state.sqrt_().add_(self.eps)
        rows = gather_rows(weights, places)
        rows.add_(grads / std, alpha=-clr)
        weights.index_copy_(0, at, rows)


def float32_rows(grads) -> np.ndarray:
    """Row gradients as the float32 C-contiguous numpy array the compiled loops take: numpy
    from the data plane as it is (`pswire.frames.rows_of`), a tensor converted."""
    if isinstance(grads, np.ndarray):
        return grads
    return grads.detach().to(torch.float32).contiguous().numpy()


def gather_rows(t: torch.Tensor, places: np.ndarray) -> torch.Tensor:
    """`t.index_select(0, places)` (a copy of those rows), by numpy's take: the same bytes,
    3-4x faster on a few hundred to a few thousand short rows (0.7 against 3.1 us for 361
    rows of 8 floats; torch's CPU index_select copies element by element)."""
    return torch.from_numpy(t.numpy().take(places, axis=0))
