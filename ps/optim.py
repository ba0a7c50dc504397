"""Optimizers on the PS: torch.optim itself for dense tensors, row-wise SGD/Adagrad for tables.

Each dense tensor gets its own real `torch.optim` optimizer (one param group, one tensor), and a
push sets `.grad` and calls `step()`, so the PS's arithmetic is torch.optim's by construction.
Embedding rows are updated the way `torch.optim.SGD` / `torch.optim.Adagrad` update a sparse
`nn.Embedding(sparse=True)` weight: only the pushed rows change, duplicates are summed first.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from protos import ps_pb2

from rpckit.errors import invalid

DENSE = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam}
HYPERPARAMETERS = {
    "sgd": ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"),
    "adagrad": ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "maximize"),
    "adam": ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"),
}
ROW_HYPERPARAMETERS = {
    "sgd": ("lr",),
    "adagrad": ("lr", "lr_decay", "initial_accumulator_value", "eps"),
}
_SCALARS = ("lr", "momentum", "dampening", "weight_decay", "eps", "lr_decay",
            "initial_accumulator_value")
_BOOLS = ("nesterov", "amsgrad", "maximize")


def config_from_pb(msg: ps_pb2.OptimizerConfig) -> dict:
    """{'name': ..., hyperparameter: value, ...} with only the fields that were set."""
    cfg: dict = {"name": msg.name}
    for key in _SCALARS + _BOOLS:
        if msg.HasField(key):
            cfg[key] = getattr(msg, key)
    if msg.betas:
        cfg["betas"] = tuple(msg.betas)
    return cfg


def config_to_pb(cfg: dict) -> ps_pb2.OptimizerConfig:
    msg = ps_pb2.OptimizerConfig(name=cfg.get("name", ""))
    for key, value in cfg.items():
        if key == "betas":
            msg.betas.extend(float(b) for b in value)
        elif key in _SCALARS:
            setattr(msg, key, float(value))
        elif key in _BOOLS:
            setattr(msg, key, bool(value))
    return msg


def make_config(name: str, **hyperparameters) -> dict:
    """A checked optimizer config from a torch.optim class name and its hyperparameters."""
    cfg = {"name": name, **hyperparameters}
    if "betas" in cfg:
        cfg["betas"] = tuple(float(b) for b in cfg["betas"])
    validate_dense(cfg)
    return cfg


def _hyper(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k != "name"}


def validate_dense(cfg: dict) -> None:
    name = cfg.get("name", "")
    if name not in DENSE:
        raise invalid(f"optimizer {name!r} is not supported; use one of {', '.join(DENSE)}")
    extra = sorted(set(_hyper(cfg)) - set(HYPERPARAMETERS[name]))
    if extra:
        raise invalid(f"optimizer {name} does not take {', '.join(extra)}; it takes "
                      f"{', '.join(HYPERPARAMETERS[name])}")
    if "betas" in cfg and len(cfg["betas"]) != 2:
        raise invalid(f"adam betas must be two numbers, got {list(cfg['betas'])}")
    try:  # torch.optim's own checks (lr >= 0, nesterov needs momentum, ...)
        make_dense(cfg, torch.zeros(1))
    except (ValueError, TypeError) as exc:
        raise invalid(f"optimizer {name}: {exc}") from None


def make_dense(cfg: dict, param: torch.Tensor) -> torch.optim.Optimizer:
    """A torch.optim optimizer over the one tensor `param` (foreach off: one tensor)."""
    return DENSE[cfg["name"]]([param], foreach=False, **_hyper(cfg))


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


def row_config(table_cfg: dict | None, dense_cfg: dict | None, table: str) -> dict:
    """The row optimizer of a table: its own, else the dense one when that is sgd or adagrad."""
    cfg = dict(table_cfg) if table_cfg and table_cfg.get("name") else None
    if cfg is None:
        if not dense_cfg or dense_cfg.get("name") not in ROW_HYPERPARAMETERS:
            raise invalid(f"table {table!r}: give it an optimizer (sgd or adagrad); the dense "
                          f"optimizer {dense_cfg.get('name') if dense_cfg else None!r} has no "
                          "row-wise form")
        cfg = {k: v for k, v in dense_cfg.items()
               if k == "name" or k in ROW_HYPERPARAMETERS[dense_cfg["name"]]}
    name = cfg["name"]
    if name not in ROW_HYPERPARAMETERS:
        raise invalid(f"table {table!r}: row optimizer {name!r} is not supported; use sgd or "
                      "adagrad")
    extra = sorted(set(_hyper(cfg)) - set(ROW_HYPERPARAMETERS[name]))
    if extra:
        raise invalid(f"table {table!r}: row-wise {name} does not take {', '.join(extra)}; it "
                      f"takes {', '.join(ROW_HYPERPARAMETERS[name])}")
    for key in ("lr", "lr_decay", "initial_accumulator_value", "eps"):
        if key in cfg and not cfg[key] >= 0:
            raise invalid(f"table {table!r}: {key} must be >= 0, got {cfg[key]}")
    return cfg


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

    def apply(self, weights: torch.Tensor, accum: torch.Tensor | None, slots: torch.Tensor,
              grads: torch.Tensor, step: int) -> None:
        """Update rows `slots` (distinct) of `weights` with the summed `grads`; `step` counts
        the updates of this table, 1 for the first (Adagrad's lr_decay uses it)."""
        if self.name == "sgd":
            rows = weights.index_select(0, slots)
            rows.add_(grads, alpha=-self.lr)
            weights.index_copy_(0, slots, rows)
            return
        clr = self.lr / (1 + (step - 1) * self.lr_decay)
        state = accum.index_select(0, slots)
        state.add_(grads.pow(2))
        accum.index_copy_(0, slots, state)
        std = state.sqrt_().add_(self.eps)
        rows = weights.index_select(0, slots)
        rows.add_(grads / std, alpha=-clr)
        weights.index_copy_(0, slots, rows)
