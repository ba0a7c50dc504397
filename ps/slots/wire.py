"""A slot move's export on the wire: encoded without an arbitrary pickle, checked whole on arrival.

The old owner's `moves.export` state travels as one frame in the checkpoint's format 2
(ps/checkpoint.py): a skeleton of plain values (lists, dicts, strings, numbers) in which every
tensor is an index, loaded with `torch.load(weights_only=True)` (no class or function of the
sender's choosing is ever called), then each tensor's raw bytes, then a sha256 trailer. So a
truncated or damaged frame is refused before anything is read from it.

`decode` then checks every field `moves.install` reads, for type, dtype, shape and range, and
builds the dense tensors' optimizers, so that whatever an export holds either installs whole or
is refused INVALID_ARGUMENT before the store changes.
"""
from __future__ import annotations

import io
import math

import numpy as np
import torch

from pswire.frames import DTYPES, FLOAT_DTYPES
from pswire.optimizers import make_dense, validate_dense
from pswire.tables import TableSpec
from rpckit.errors import ServiceError, invalid

from .. import checkpoint
from ..dense import Dense
from ..optim import RowOptimizer, restore_dense

KEYS = frozenset({"slots", "version", "initialized", "optimizer", "dense", "tables", "applied"})
ROW_META = {"counts": torch.int64, "steps": torch.int64, "ticks": torch.int64,
            "touched": torch.float64}
MAX_NAME = 1024
_FLOATS = frozenset(DTYPES[n] for n in FLOAT_DTYPES)


class BadExport(ValueError):
    pass


def encode(state: dict) -> memoryview:
    """The frame of an export (`moves.export`'s state)."""
    buf = io.BytesIO()
    checkpoint.encode({**state, "slots": [int(s) for s in state["slots"]]}, buf)
    return buf.getbuffer()


def decode(raw, store) -> dict:
    """The state in an export's frame, checked against `store` (its slot count, its optimizer),
    with each dense tensor built (`Dense`); INVALID_ARGUMENT if anything is wrong with it."""
    try:
        state = checkpoint.decode(bytes(raw))
        return _checked(state, store)
    except ServiceError:
        raise
    except checkpoint.CorruptCheckpoint as exc:
        raise invalid(f"a slot export that does not verify: {exc}") from None
    except BadExport as exc:
        raise invalid(f"a bad slot export: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a malformed value any check above let through
        raise invalid(f"a bad slot export: {type(exc).__name__}: {exc}") from None


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise BadExport(what)


def _int(v, what: str, low: int = 0, high: int = 2**63 - 1) -> int:
    _need(type(v) is int and low <= v <= high, f"{what} must be an int in {low}..{high}")
    return v


def _name(v, what: str) -> str:
    _need(isinstance(v, str) and 0 < len(v) <= MAX_NAME, f"{what} must be a name")
    return v


def _tensor(v, what: str, dtypes, shape: tuple | None = None, ndim: int | None = None):
    _need(isinstance(v, torch.Tensor) and v.dtype in dtypes, f"{what} must be a tensor of "
          f"{sorted(str(d) for d in dtypes)}")
    _need(ndim is None or v.dim() == ndim, f"{what} must have {ndim} dimension(s)")
    _need(shape is None or tuple(v.shape) == shape, f"{what} must have shape {shape}")
    return v


def _plain(v, what: str, depth: int = 0) -> None:
    """Only plain values (a config, an answer): no tensors, bounded nesting."""
    _need(depth < 8, f"{what} nests too deep")
    if isinstance(v, dict):
        for k, x in v.items():
            _need(isinstance(k, str), f"{what} has a non-string key")
            _plain(x, what, depth + 1)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _plain(x, what, depth + 1)
    else:
        _need(v is None or type(v) in (bool, int, float, str), f"{what} holds a "
              f"{type(v).__name__}")


def _checked(state, store) -> dict:
    _need(isinstance(state, dict) and set(state) == KEYS, f"the keys must be {sorted(KEYS)}")
    own = store.ownership
    slots = state["slots"]
    _need(isinstance(slots, list) and 0 < len(slots) <= own.num_slots, "slots must be a "
          f"non-empty list of at most {own.num_slots}")
    for s in slots:
        _int(s, "a slot", 0, own.num_slots - 1)
    state["slots"] = np.unique(np.asarray(slots, dtype=np.int64))
    mask = np.zeros(own.num_slots, dtype=bool)
    mask[state["slots"]] = True
    _int(state["version"], "version")
    _need(type(state["initialized"]) is bool, "initialized must be a bool")
    if state["initialized"]:  # a store never initialized exports no optimizer (None)
        _need(isinstance(state["optimizer"], dict), "optimizer must be a dict")
        _plain(state["optimizer"], "optimizer")
        validate_dense(state["optimizer"])
    else:
        _need(state["optimizer"] is None or isinstance(state["optimizer"], dict),
              "optimizer must be a dict or None")
        _plain(state["optimizer"], "optimizer")
    _need(isinstance(state["applied"], list), "applied must be a list")
    for mark in state["applied"]:
        _need(isinstance(mark, list) and len(mark) == 3, "an applied mark is [client, seq, "
              "answer]")
        _name(mark[0], "an applied mark's client")
        _int(mark[1], "an applied mark's seq")
        _need(isinstance(mark[2], dict), "an applied mark's answer must be a dict")
        _plain(mark[2], "an applied mark's answer")
    cfg = state["optimizer"] if state["initialized"] else store.optimizer_cfg
    _need(isinstance(state["dense"], list), "dense must be a list")
    _need(isinstance(state["tables"], list), "tables must be a list")
    state["dense"] = [_dense(row, cfg, own, mask) for row in state["dense"]]
    _need(len({d.name for d in state["dense"]}) == len(state["dense"]), "a tensor twice")
    for row in state["tables"]:
        _table(row, own.num_slots, mask)
    _need(len({r["spec"]["name"] for r in state["tables"]}) == len(state["tables"]),
          "a table twice")
    return state


def _dense(row, cfg, own, mask) -> Dense:
    _need(isinstance(row, dict) and set(row) == {"name", "value", "version", "pushes",
                                                 "optim"}, "a dense tensor's keys")
    name = _name(row["name"], "a dense tensor's name")
    _need(bool(mask[own.tensor_slot(name)]), f"tensor {name!r} is in none of the moved slots")
    value = _tensor(row["value"], f"tensor {name!r}", _FLOATS).contiguous()
    _need(isinstance(cfg, dict) and bool(cfg), f"tensor {name!r} without an optimizer")
    validate_dense(cfg)
    _optim_state(row["optim"], cfg, value, name)
    try:
        optim = restore_dense(cfg, value, row["optim"])
    except Exception as exc:  # noqa: BLE001 - torch's own checks of a state dict
        raise BadExport(f"tensor {name!r}'s optimizer state: {exc}") from None
    return Dense(name, value, optim, version=_int(row["version"], "a tensor's version"),
                 pushes=_int(row["pushes"], "a tensor's pushes"))


def _optim_state(sd, cfg: dict, value: torch.Tensor, name: str) -> None:
    """A torch.optim state dict of one tensor as `cfg`'s optimizer makes it: its very
    hyperparameters (load_state_dict takes them from the export), and state
    tensors of the tensor's shape and dtype (a scalar step)."""
    what = f"tensor {name!r}'s optimizer state"
    _need(isinstance(sd, dict) and set(sd) == {"state", "param_groups"}, what)
    fresh = make_dense(cfg, value.new_empty(0)).param_groups[0]
    groups = sd["param_groups"]
    _need(isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict)
          and set(groups[0]) == set(fresh) and groups[0]["params"] == [0], f"{what}: groups")
    for k, v in groups[0].items():
        # a dense optimizer's hyperparameters are the model's (nothing retunes them)
        _need(k == "params" or _like(v, fresh[k]) and v == fresh[k],
              f"{what}: hyperparameter {k!r} is not the optimizer's")
    state = sd["state"]
    _need(isinstance(state, dict) and set(state) <= {0}, f"{what}: state")
    _need(isinstance(state.get(0, {}), dict)
          and frozenset(state.get(0, {})) in _state_keys(cfg), f"{what}: its entries")
    for k, v in state.get(0, {}).items():
        if k == "step":
            _need(isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype in _FLOATS
                  and bool(torch.isfinite(v)) and float(v) >= 0, f"{what}: step")
        else:
            _need(v is None and k == "momentum_buffer" or isinstance(v, torch.Tensor)
                  and v.shape == value.shape and v.dtype == value.dtype, f"{what}: {k!r}")


_STATE_KEYS: dict[str, tuple] = {}


def _state_keys(cfg: dict) -> tuple:
    """The entries `cfg`'s optimizer holds for a tensor before its first step and after."""
    key = repr(sorted(cfg.items()))
    if key not in _STATE_KEYS:
        if len(_STATE_KEYS) >= 64:  # configs come from peers: kept bounded
            _STATE_KEYS.clear()
        param = torch.zeros(1)
        optim = make_dense(cfg, param)
        before = frozenset(optim.state.get(param, {}))
        param.grad = torch.zeros(1)
        optim.step()
        _STATE_KEYS[key] = (before, frozenset(optim.state[param]))
    return _STATE_KEYS[key]


def _like(v, fresh) -> bool:
    """`v` is a hyperparameter of the kind `fresh` (a fresh optimizer's) is."""
    if fresh is None or isinstance(fresh, bool):
        return type(v) is type(fresh)
    if isinstance(fresh, (int, float)):
        return type(v) in (int, float) and math.isfinite(v)
    if isinstance(fresh, tuple):
        return (isinstance(v, tuple) and len(v) == len(fresh)
                and all(_like(x, f) for x, f in zip(v, fresh)))
    return False


def _table(row, num_slots: int, mask: np.ndarray) -> None:
    from pswire.slots import row_slot

    _need(isinstance(row, dict) and isinstance(row.get("spec"), dict)
          and isinstance(row.get("optimizer"), dict), "a table needs its spec and optimizer")
    _plain(row["spec"], "a table's spec")
    spec = TableSpec(**row["spec"])
    problem = spec.problem()
    _need(problem is None, f"table spec: {problem}")
    _plain(row["optimizer"], "a table's optimizer")
    _need(row["optimizer"].get("name") in ("sgd", "adagrad"), "a table's optimizer name")
    row_optim = RowOptimizer.from_config(row["optimizer"])
    ids = _tensor(row.get("ids"), "a table's ids", {torch.int64}, ndim=1)
    n = int(ids.numel())
    keys = ids.numpy()
    _need(not n or int(keys.min()) >= 0, "a table's ids must be non-negative")
    _need(not n or not spec.num_embeddings or int(keys.max()) < spec.num_embeddings,
          "a table's ids must be below num_embeddings")
    _need(np.unique(keys).size == n, "a table's ids must be distinct")
    _need(bool(mask[row_slot(keys, num_slots)].all()), "a row is in none of the moved slots")
    _tensor(row.get("weights"), "a table's weights", {torch.float32}, (n, spec.dim))
    if row.get("accum") is not None or row_optim.has_accumulator:
        _tensor(row.get("accum"), "a table's accumulators", {torch.float32}, (n, spec.dim))
    for key, dtype in ROW_META.items():
        _tensor(row.get(key), f"a table's {key}", {dtype}, (n,))
    _need(type(row.get("delta", False)) is bool, "delta must be a bool")
    if row.get("gone") is not None:
        _tensor(row["gone"], "a table's evicted ids", {torch.int64}, ndim=1)
    _need(math.isfinite(float(spec.init_a)), "a table's init")
