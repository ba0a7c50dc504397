"""Optimizer configs: which optimizers exist, what they take, how a config travels.

A config is a dict `{"name": ..., hyperparameter: value}` named after the `torch.optim` class
(sgd, adagrad, adam for dense tensors; sgd and adagrad row-wise for tables). Workers build and
check it (`make_config`) before sending it in `InitParameters`; the PS checks it again and runs
it (ps/store/optim.py). `make_dense` builds the real torch.optim optimizer, so a config is valid
exactly when torch.optim accepts it.
"""
from __future__ import annotations

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
        DENSE[name](_ChecksPassed.params(), foreach=False, **_hyper(cfg))
    except _ChecksPassed:
        pass
    except (ValueError, TypeError) as exc:
        raise invalid(f"optimizer {name}: {exc}") from None


class _ChecksPassed(Exception):
    """Raised by the parameters handed to a torch.optim class to check a config: its
    constructor checks every hyperparameter before it first looks at the parameters, and
    stopping there leaves out the base class's add_param_group, whose first call imports
    torch._dynamo (1-3 s: most of a worker's start before its first batch)."""

    @classmethod
    def params(cls):
        yield from ()
        raise cls()


def make_dense(cfg: dict, param: torch.Tensor) -> torch.optim.Optimizer:
    """A torch.optim optimizer over the one tensor `param` (foreach off: one tensor)."""
    return DENSE[cfg["name"]]([param], foreach=False, **_hyper(cfg))


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
