"""Correcting a prefetched step for the worker's own last push, on the worker (`correct_own_writes`).

The pipelined worker reads batch k+1's parameters in the Step that carries push k-1, so step
k+1 computes on values that may miss push k, which this worker made itself and knows. The
worker adds push k's update to the rows of batch k+1 that push k changed and to the dense
tensors, before the forward pass, as the PS's optimizer applies it (the same formula and eps
as ps/store/optim.py and torch.optim). Nothing is sent for it and nothing waits; what is
pushed changes only in that its gradients are computed on the corrected values.

Never twice: a push is added to a read only when the read's answer was taken before the push
was sent (worker_sdk/ps/pipeline.py: a prefetch keeps how many pushes were given when it was
sent and how many were sent when it was answered; before sending a push the pipeline takes
in the answers already there). A push sent while the read was in flight may or may not be in
it, so it is not added: that step misses it, as without the option. With max_inflight 1 (the
option takes no other) that happens only to the first reads, which carry no push.

The update needs the optimizer's state after the push: SGD has none; Adagrad's accumulator
here is the worker's own sum of its squared gradients (`OwnWrites`), which is the PS's when
this worker made every push of those rows and tensors since they were declared (one worker,
as the bench trains). With other workers pushing it is smaller than the PS's, so the
correction overshoots; the PS's own state is not read. Any other optimizer, or lr_decay /
weight_decay / momentum set: no correction.
"""
from __future__ import annotations

import numpy as np
import torch

from pswire import jit


def correctable(cfg: dict) -> bool:
    """Whether the optimizer `cfg` ({name, lr, ...}) is one whose update this module repeats."""
    if cfg.get("name") not in ("sgd", "adagrad"):
        return False
    return not any(float(cfg.get(k, 0.0)) for k in ("lr_decay", "weight_decay", "momentum"))


def _lr(cfg: dict) -> float:
    return float(cfg.get("lr", 1e-3 if cfg["name"] == "sgd" else 1e-2))


def sgd_delta(grad: torch.Tensor, lr: float) -> torch.Tensor:
    """What torch.optim.SGD (no momentum, no decay) adds to a parameter for `grad`."""
    return grad * -lr


def adagrad_delta(grad: torch.Tensor, state_after: torch.Tensor, lr: float,
                  eps: float) -> torch.Tensor:
    """What torch.optim.Adagrad (no decays) adds for `grad`, its accumulator after adding
    grad**2 being `state_after`: -lr * grad / (sqrt(state_after) + eps)."""
    return grad / state_after.sqrt().add_(eps) * -lr


@jit.njit
def _places(keys, used, slots, places, count):
    """The place of each of `keys` in an open-addressing map (`used`, `slots`, `places`, its
    size a power of two, at most half full), new keys given places count, count+1, ...;
    returns (places, the count after)."""
    mask = used.size - 1
    out = np.empty(keys.size, np.int64)
    for i in range(keys.size):
        k = keys[i]
        h = np.int64(jit.splitmix(k) & np.uint64(mask))
        while used[h] and slots[h] != k:
            h = (h + 1) & mask
        if not used[h]:
            used[h], slots[h], places[h] = True, k, count
            count += 1
        out[i] = places[h]
    return out, count


@jit.njit
def _adagrad_rows(places, grads, values, lr, eps, out):
    """values[places] += grads**2; out = -lr * grads / (sqrt(values[places]) + eps): torch's
    Adagrad step of each row, in one pass (float32, as the PS's compiled loop)."""
    dim = grads.shape[1]
    for i in range(places.size):
        at = places[i]
        for j in range(dim):
            g = grads[i, j]
            acc = values[at, j] + g * g
            values[at, j] = acc
            out[i, j] = -lr * g / (np.sqrt(acc) + eps)


@jit.njit
def _add_where_met(unique, rows, ids, delta):
    """rows[i] += delta[j] where unique[i] == ids[j] (both sorted, distinct)."""
    j = 0
    for i in range(unique.size):
        while j < ids.size and ids[j] < unique[i]:
            j += 1
        if j == ids.size:
            return
        if ids[j] == unique[i]:
            for c in range(rows.shape[1]):
                rows[i, c] += delta[j, c]


@jit.njit
def _positions(keys, used, slots):
    mask = used.size - 1
    out = np.empty(keys.size, np.int64)
    for i in range(keys.size):
        h = np.int64(jit.splitmix(keys[i]) & np.uint64(mask))
        while slots[h] != keys[i]:
            h = (h + 1) & mask
        out[i] = h
    return out


class _RowState:
    """A table's accumulator of this worker's squared row gradients, by id."""

    def __init__(self, dim: int, initial: float) -> None:
        self.initial = initial
        self.values = np.full((1024, dim), initial, dtype=np.float32)
        self.size = 0
        self._map(2048)

    def _map(self, capacity: int) -> None:
        self.used = np.zeros(capacity, dtype=np.bool_)
        self.slots = np.zeros(capacity, dtype=np.int64)
        self.places = np.zeros(capacity, dtype=np.int64)

    def step(self, ids: np.ndarray, grads: np.ndarray, lr: float, eps: float) -> np.ndarray:
        """Adagrad's update of the rows of distinct `ids` for `grads` (float32), their
        accumulators advanced."""
        if 2 * (self.size + ids.size) > self.used.size:  # keep the map at most half full
            keys, old = self.slots[self.used], self.places[self.used]
            capacity = self.used.size
            while 2 * (self.size + ids.size) > capacity:
                capacity *= 2
            self._map(capacity)
            _places(keys, self.used, self.slots, self.places, 0)
            self.places[self._where(keys)] = old
        places, self.size = _places(np.ascontiguousarray(ids, np.int64), self.used,
                                    self.slots, self.places, self.size)
        if self.size > len(self.values):
            grown = np.full((max(self.size, 2 * len(self.values)), self.values.shape[1]),
                            self.initial, dtype=np.float32)
            grown[:len(self.values)] = self.values
            self.values = grown
        out = np.empty_like(grads)
        _adagrad_rows(places, grads, self.values, np.float32(lr), np.float32(eps), out)
        return out

    def _where(self, keys: np.ndarray) -> np.ndarray:
        """The map's positions of `keys` (all present)."""
        return _positions(keys, self.used, self.slots)


def warm_up() -> None:
    """Compile the loops now (numba caches them on disk), not in the first step."""
    state = _RowState(2, 0.0)
    rows = state.step(np.array([3, 1], np.int64), np.ones((2, 2), np.float32), 0.1, 1e-10)
    correct_rows(torch.tensor([1, 2]), torch.zeros(2, 2), (np.array([1, 3]),
                                                           torch.from_numpy(rows)))
    state._where(np.array([3], np.int64))


class OwnWrites:
    """A push's update as the PS will apply it (`deltas`), for the next step to add."""

    def __init__(self, dense_cfg: dict, table_cfgs: dict[str, dict]) -> None:
        self.dense_cfg = dense_cfg
        self.table_cfgs = table_cfgs
        self._dense: dict[str, torch.Tensor] = {}
        self._rows: dict[str, _RowState] = {}

    def _dense_deltas(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each tensor's update, in a few torch._foreach calls (one op over every tensor:
        a small model's step is many small tensors, where a call per tensor costs more than
        its arithmetic)."""
        cfg = self.dense_cfg
        names = list(grads)
        gs = [grads[n].detach().to(torch.float32) for n in names]
        if cfg["name"] == "sgd":
            return dict(zip(names, torch._foreach_mul(gs, -_lr(cfg))))
        accs = []
        for n, g in zip(names, gs):
            acc = self._dense.get(n)
            if acc is None or acc.shape != g.shape:
                acc = self._dense[n] = torch.full_like(
                    g, float(cfg.get("initial_accumulator_value", 0.0)))
            accs.append(acc)
        torch._foreach_addcmul_(accs, gs, gs)
        std = torch._foreach_sqrt(accs)
        torch._foreach_add_(std, float(cfg.get("eps", 1e-10)))
        out = torch._foreach_div(gs, std)
        torch._foreach_mul_(out, -_lr(cfg))
        return dict(zip(names, out))

    def deltas(self, grads: dict[str, torch.Tensor], rows) -> tuple[dict, dict]:
        """(name -> dense delta, table -> (sorted distinct ids, row deltas)) of one push, the
        accumulators advanced by it. Called once per push, in push order."""
        dense = self._dense_deltas(grads) if correctable(self.dense_cfg) and grads else {}
        out = {}
        for table, ids, g in rows:
            cfg = self.table_cfgs.get(table, self.dense_cfg)
            if not correctable(cfg):
                continue
            ids = np.ascontiguousarray(torch.as_tensor(ids, dtype=torch.int64).reshape(-1))
            g = g.detach().to(torch.float32).contiguous()
            lr = _lr(cfg)
            if cfg["name"] == "sgd":
                out[table] = (ids, sgd_delta(g, lr))
                continue
            state = self._rows.get(table)
            if state is None:
                state = self._rows[table] = _RowState(
                    g.shape[1], float(cfg.get("initial_accumulator_value", 0.0)))
            out[table] = (ids, torch.from_numpy(state.step(
                ids, np.ascontiguousarray(g.numpy()), lr, float(cfg.get("eps", 1e-10)))))
        return dense, out


def correct_rows(unique: torch.Tensor, rows: torch.Tensor, pushed) -> torch.Tensor:
    """`rows` (of the sorted distinct ids `unique`) with a push's row deltas `pushed` (sorted
    distinct ids, deltas) added where the ids meet; in place, and returned."""
    ids, delta = pushed
    _add_where_met(np.ascontiguousarray(unique.numpy()), rows.numpy(), ids, delta.numpy())
    return rows


def missed_dense(deltas, after: int, dense: dict) -> dict:
    """Prefetched dense tensors with the updates of the pushes numbered past `after` in
    `deltas` ([(push number, dense deltas, row deltas)]): new tensors, the answer's left."""
    for index, changes, _ in deltas:
        if index > after:
            dense = {n: t + changes[n] if n in changes else t for n, t in dense.items()}
    return dense


def missed_rows(deltas, after: int, table: str, got) -> None:
    """A prefetch's (distinct ids, inverse, rows) of `table` with the row updates of the
    pushes numbered past `after`, in place."""
    for index, _, rows in deltas:
        if index > after and table in rows:
            correct_rows(got[0], got[2], rows[table])
