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
it: it is added only when the versions in the answers show the PS served the read before it
(worker_sdk/ps/served.py), else that step misses it, as without the option. With max_inflight 1
that happens only to the first reads, which carry no push; with 2, to a read the versions
cannot place (another push between, a PS with no dense tensor).

The update needs the optimizer's state after the push. SGD has none. Adagrad's accumulator of
a row is the PS's: a read marks the ids of its batch that the batch before it, whose push is
the one to add, holds too (`marks`), and the PS sends their state with their rows
(protos/ps.proto, PullRows.marked); the update then uses that state plus the push's squared
gradient, exact with any number of workers to the staleness of the read, and the worker keeps
no accumulator per row. The dense tensors' accumulator is the worker's own sum of its squared
gradients (`OwnWrites`): a few tensors, kept in a few torch._foreach calls, the PS's when this
worker made every push of them (with other workers pushing it is smaller than the PS's, so the
dense correction overshoots). Any other optimizer, or lr_decay / weight_decay / momentum set:
no correction.
"""
from __future__ import annotations

from typing import NamedTuple

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


@jit.njit
def _seek(ids, j, x):
    """The first place from j on where the sorted `ids` reach x (ids.size when none does):
    the step of every merge walk here."""
    while j < ids.size and ids[j] < x:
        j += 1
    return j


@jit.njit
def _add_where_met(unique, rows, ids, delta):
    """rows[i] += delta[j] where unique[i] == ids[j] (both sorted, distinct)."""
    j = 0
    for i in range(unique.size):
        j = _seek(ids, j, unique[i])
        if j == ids.size:
            return
        if ids[j] == unique[i]:
            for c in range(rows.shape[1]):
                rows[i, c] += delta[j, c]


@jit.njit(error_model="numpy")  # a division vectorizes only without Python's zero check
def _adagrad_where_met(unique, rows, marked, state, ids, grads, lr, eps):
    """Adagrad's step of rows[i] for grads[j] where unique[i] == ids[j] (both sorted,
    distinct) and marked[i], its accumulator being the PS's (`state`, one row per marked id,
    in order) plus grads[j]**2, which `state` then holds (float32, as the PS's compiled
    loop). Returns how many ids met unmarked (no state: not corrected)."""
    j = 0
    s = 0
    unmarked = 0
    for i in range(unique.size):
        j = _seek(ids, j, unique[i])
        if j < ids.size and ids[j] == unique[i]:
            if marked[i]:
                for c in range(rows.shape[1]):
                    g = grads[j, c]
                    acc = state[s, c] + g * g
                    state[s, c] = acc
                    rows[i, c] += -lr * g / (np.sqrt(acc) + eps)
            else:
                unmarked += 1
        if marked[i]:
            s += 1
    return unmarked


@jit.njit(error_model="numpy")  # a division vectorizes only without Python's zero check
def _adagrad_dense(acc, grad, out, lr, eps):
    """torch.optim.Adagrad's step of one dense tensor as an update (flat float32 arrays):
    acc += grad**2, out = grad / (sqrt(acc) + eps) * -lr, torch's order of operations. Three
    loops, not one: each vectorizes alone (the fused loop ran 1.6x slower), same floats."""
    n = grad.size
    for i in range(n):
        acc[i] += grad[i] * grad[i]
    for i in range(n):
        out[i] = np.sqrt(acc[i])
    for i in range(n):
        out[i] = grad[i] / (out[i] + eps) * -lr


class _Flat:
    """The dense tensors' Adagrad accumulators, and a ring of buffers for their updates,
    laid out once for a model's tensors (names, shapes, order). An update stays valid until
    RING more pushes: longer than a push's update is kept (worker_sdk/ps/pipeline.py keeps
    MAX_PREFETCHED) and used (added to a read when the next step pulls)."""

    RING = 8

    def __init__(self, grads: dict[str, torch.Tensor], initial: float) -> None:
        self.names = tuple(grads)
        self.shapes = [g.shape for g in grads.values()]
        sizes = [g.numel() for g in grads.values()]
        self.acc = np.full(sum(sizes), initial, np.float32)
        self._ring = []
        for _ in range(self.RING):
            buf = np.empty(sum(sizes), np.float32)
            outs = np.split(buf, np.cumsum(sizes)[:-1])
            self._ring.append((buf, {n: torch.from_numpy(o).view(shape)
                                     for n, shape, o in zip(self.names, self.shapes, outs)}))
        self._next = 0

    def fits(self, grads: dict[str, torch.Tensor]) -> bool:
        return tuple(grads) == self.names and [g.shape for g in grads.values()] == self.shapes

    def next_out(self) -> tuple:
        out = self._ring[self._next]
        self._next = (self._next + 1) % self.RING
        return out


def warm_up() -> None:
    """Compile the loops now (numba caches them on disk), not in the first step."""
    unique, rows = np.array([1, 2], np.int64), np.zeros((2, 2), np.float32)
    ids, grads = np.array([1, 3], np.int64), np.ones((2, 2), np.float32)
    _add_where_met(unique, rows, ids, grads)
    mask = _met(unique, ids)
    _adagrad_where_met(unique, rows, mask, np.ones((1, 2), np.float32), ids, grads,
                       np.float32(0.1), np.float32(1e-10))
    place_marked(mask, np.arange(2), grads.ravel(), np.empty((1, 2), np.float32))
    _adagrad_dense(np.zeros(2, np.float32), np.ones(2, np.float32), np.empty(2, np.float32),
                   np.float32(0.1), np.float32(1e-10))


class OwnWrites:
    """A push's update as the PS will apply it (`deltas`), for the next step to add."""

    def __init__(self, dense_cfg: dict, table_cfgs: dict[str, dict]) -> None:
        self.dense_cfg = dense_cfg
        self.table_cfgs = table_cfgs
        self._flat: _Flat | None = None  # the dense tensors' accumulators and updates
        self._dense_ok = correctable(dense_cfg)
        self._dense_lr, self._dense_eps = _float32s(dense_cfg)
        self._rules: dict[str, tuple | None] = {}  # table -> its `_rule`

    def _dense_deltas(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each tensor's update: SGD's in one torch._foreach call; Adagrad's in one compiled
        call over every tensor's gradient laid end to end, which advances the flat accumulator
        and writes the updates into one of a few flat buffers laid out once (`_Flat`): a small
        model's step is many small tensors, where a call per tensor costs more than its
        arithmetic."""
        cfg = self.dense_cfg
        if cfg["name"] == "sgd":
            names = list(grads)
            gs = [grads[n].detach().to(torch.float32) for n in names]
            return dict(zip(names, torch._foreach_mul(gs, -_lr(cfg))))
        flat = self._flat
        if flat is None or not flat.fits(grads):
            flat = self._flat = _Flat(grads, float(cfg.get("initial_accumulator_value", 0.0)))
        # one flat gradient, copied in one numpy call (torch.cat's dispatch costs twice that)
        try:
            g = np.concatenate([g.numpy().ravel() for g in grads.values()])
        except RuntimeError:  # a gradient that requires grad (create_graph): not for numpy
            g = torch.cat([g.reshape(-1) for g in grads.values()]).detach().numpy()
        out, views = flat.next_out()
        _adagrad_dense(flat.acc, g.astype(np.float32, copy=False), out, self._dense_lr,
                       self._dense_eps)
        return views

    def deltas(self, grads: dict[str, torch.Tensor], rows) -> tuple[dict, dict]:
        """(name -> dense delta, table -> `Pushed`) of one push, the dense accumulators
        advanced by it. Called once per push, in push order. A row's Adagrad update needs
        the PS's accumulator, which comes with the read it corrects (`adagrad_tables`)."""
        dense = self._dense_deltas(grads) if self._dense_ok and grads else {}
        out = {}
        for table, ids, g in rows:
            rule = self._rules[table] if table in self._rules else self._rule(table)
            if rule is None:
                continue
            ids = _ids_of(ids)
            if g.dtype is not torch.float32 or g.requires_grad or not g.is_contiguous():
                g = g.detach().to(torch.float32).contiguous()
            lr, eps = rule
            if eps is None:  # SGD
                out[table] = Pushed(ids, g.numpy() * -lr)
            else:  # kept, not copied: a row gradient is the embedding's own per-step
                # tensor (ElasticEmbedding._take_grads), never written after the backward
                out[table] = Pushed(ids, g.numpy(), lr, eps)
        return dense, out

    def adagrad_tables(self, tables) -> list[str]:
        """Those of `tables` whose row correction needs the PS's state (Adagrad's sum)."""
        rules = self._rules
        return [t for t in tables
                if (rules[t] if t in rules else self._rule(t)) is not None
                and rules[t][1] is not None]

    def _rule(self, table: str) -> tuple | None:
        """A table's correction: None (its optimizer is not repeated here), else (lr, eps) as
        float32, eps None for SGD; looked up once, a push names a few tables every step."""
        cfg = self.table_cfgs.get(table, self.dense_cfg)
        rule = None
        if correctable(cfg):
            lr, eps = _float32s(cfg)
            rule = (lr, None if cfg["name"] == "sgd" else eps)
        self._rules[table] = rule
        return rule


def _float32s(cfg: dict) -> tuple:
    """(lr, eps) of an optimizer's config as float32, as the compiled loops take them."""
    if cfg.get("name") not in ("sgd", "adagrad"):
        return None, None
    return np.float32(_lr(cfg)), np.float32(cfg.get("eps", 1e-10))


def _ids_of(ids) -> np.ndarray:
    """A push's ids of one table as a contiguous 1-D int64 array (the embedding's are one:
    its distinct ids, a view then)."""
    if isinstance(ids, torch.Tensor) and ids.dtype is torch.int64 and ids.dim() == 1 \
            and ids.is_contiguous():
        return ids.numpy()
    return np.ascontiguousarray(torch.as_tensor(ids, dtype=torch.int64).reshape(-1))


class Pushed(NamedTuple):
    """A push's rows of one table: sorted distinct ids and their SGD deltas (`lr` None), or
    their Adagrad gradients, the update made with the PS's state when a read is corrected."""

    ids: np.ndarray
    values: np.ndarray  # float32 [len(ids), dim]
    lr: np.float32 | None = None
    eps: np.float32 = np.float32(1e-10)


def marks(unique: np.ndarray, pushed_next: np.ndarray) -> np.ndarray:
    """The bool mask over a read's sorted distinct ids `unique` of those the next push will
    carry too (`pushed_next`, sorted distinct): the rows whose state the read asks for."""
    return _met(unique, pushed_next)


@jit.njit
def _met(unique, ids):
    """unique[i] in ids, for both sorted and distinct: one merge (np.isin sorts both)."""
    out = np.zeros(unique.size, np.bool_)
    j = 0
    for i in range(unique.size):
        j = _seek(ids, j, unique[i])
        if j == ids.size:
            break
        out[i] = ids[j] == unique[i]
    return out


@jit.njit
def place_marked(mask, positions, got, out):
    """out[rank] = the k-th row of `got` (one PS's state rows laid end to end, flat, in the
    order of its ids) for the k-th of `positions` (places among a call's ids) that `mask`
    marks, rank being the place among every marked id. Positions in any order: a part
    re-routed after a slot moved joins two refused parts' ids one after the other. Returns how
    many floats it took from `got`; -1 when `got` holds fewer rows than marked there."""
    dim = out.shape[1]
    rank = np.empty(mask.size, np.int64)  # marked ids before each place
    r = 0
    for i in range(mask.size):
        rank[i] = r
        r += mask[i]
    k = 0
    for j in range(positions.size):
        p = positions[j]
        if mask[p]:
            if (k + 1) * dim > got.size:
                return -1
            for c in range(dim):
                out[rank[p], c] = got[k * dim + c]
            k += 1
    return k * dim


def correct_rows(unique: torch.Tensor, rows: torch.Tensor, pushed: Pushed,
                 state: tuple[np.ndarray, torch.Tensor] | None = None) -> int:
    """Add a push's update (`pushed`) to `rows` (of the sorted distinct ids `unique`) where
    the ids meet, in place. Adagrad's takes `state`: (the bool mask of the ids whose state
    the PS sent, that state [marked, dim]), which it advances by the push (a later push
    corrects on from there); ids met unmarked are left as read. Returns how many were."""
    unique = np.ascontiguousarray(unique.numpy())
    if pushed.lr is None:
        _add_where_met(unique, rows.numpy(), pushed.ids, pushed.values)
        return 0
    if state is None:
        return int(np.isin(unique, pushed.ids, assume_unique=True).sum())
    return _adagrad_where_met(unique, rows.numpy(), state[0], state[1].numpy(), pushed.ids,
                              pushed.values, pushed.lr, pushed.eps)


def missed_dense(deltas, after: int) -> dict[str, torch.Tensor]:
    """The sum of the dense updates of the pushes numbered past `after` in `deltas`
    ([(push number, dense deltas, row deltas)]), by name: what a read's tensors miss. The
    caller adds it as it copies them into the model (`torch.add(..., out=param)`: one pass)."""
    out: dict[str, torch.Tensor] = {}
    for index, changes, _ in deltas:
        if index > after:
            for name, d in changes.items():
                out[name] = d if name not in out else out[name] + d
    return out


def missed_rows(deltas, after: int, table: str, got, state=None) -> int:
    """A prefetch's (distinct ids, inverse, rows) of `table` with the row updates of the
    pushes numbered past `after`, in place; `state` as `correct_rows` takes it. Returns how
    many rows met a push but could not be corrected (no state for them)."""
    unmarked = 0
    for index, _, rows in deltas:
        if index > after and table in rows:
            unmarked += correct_rows(got[0], got[2], rows[table], state)
    return unmarked


def mark_state(fetch, before, own_writes) -> None:
    """Ask the PS for the optimizer state of the rows of `fetch` (a Prefetch) that the push
    of the batch before it (`before`, the prefetch before it, unused yet) will change: the
    push its step misses and adds."""
    if before is None or before is fetch or not before.unique:
        return
    for table in own_writes.adagrad_tables(fetch.unique):
        if table in before.unique:
            fetch.marks[table] = marks(fetch.unique[table][0].numpy(),
                                       before.unique[table][0].numpy())
