"""The PS's model state: dense tensors and embedding tables, and the rules for changing them.

Plain Python and torch, no sockets: the data plane and the gRPC servicer only translate
messages into these calls. What it promises:

- The first `init_parameters` wins; a later call declaring the same model (tensors, shapes,
  dtypes, tables, optimizers) changes nothing and answers the versions; one declaring another
  model or optimizer is refused (FAILED_PRECONDITION, MODEL_MISMATCH, naming the differing
  fields), so a worker never trains a model the PS does not hold. A table's bounds
  (`max_rows`, `ttl_s`, `ttl_steps`, `evict`) may differ: the PS adopts the declared ones
  (ps/model_match.py) and files them before it answers (`file_tables`).
- A dense tensor has a version (pushes applied to it). A push applies the gradient with the
  tensor's own `torch.optim` optimizer (Adagrad: the push's tensors in one foreach update, or
  the packed ones over flat buffers, the same arithmetic: ps/optim.py, ps/flat_dense.py) under
  the tensor's lock and bumps the version. The push
  carries the versions the worker pulled; staleness (current - pulled) is recorded, and with
  `max_staleness >= 0` a push staler than that is refused whole (FAILED_PRECONDITION).
- A pull never sees a half-applied push. A pull takes the tensor's lock only to "export" it:
  the data plane hands the tensor's live memory to ZeroMQ without copying and gets back a
  tracker (done once ZeroMQ has sent the bytes). A push that finds unfinished trackers on a
  tensor first moves the tensor to a fresh copy (copy on write) and updates that, leaving the
  bytes being sent untouched. So pulls never copy; a push copies only a tensor that is being
  sent at that very moment.
- Each (client_id, seq) mutation is applied at most once (`AppliedTable`).
- Every mutation holds the gate shared; a snapshot holds it exclusive, so a checkpoint has
  each push either entirely or not at all, together with the applied-request table. The
  snapshot copies nothing under the gate: `snapshot_view()` takes references to the tensors,
  optimizer states and table rows and pins them; the first change to a pinned tensor or table
  while the view is open copies it first (copy on write, like a pull's tracker). So a
  checkpoint pauses pushes only for taking references, pulls not at all, and the bytes it
  writes are the state at the snapshot.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from .applied import AppliedTable, Duplicate
from .slots.ownership import Ownership
from .dense import Dense, Stats
from .flat_dense import FlatAdagrad
from pswire.tables import TableSpec

from .tables.index import keys_of
from .tables.table import Table
from rpckit.errors import (Reason, ServiceError, invalid, not_found, precondition, quote,
                           unavailable)
from .gate import Gate
from .snapshots import Snapshots
from .steps import StepParts, Steps
from .reads import Export, Reads, _copy_export
from .limits import Limits, check_names
from . import declare
from .model_match import file_bounds, shape_of
from pswire.partition import MAX_ROW_ID
from pswire.jit import min_max
from pswire.frames import DTYPE_NAMES, require_finite, require_row_grads

STALENESS_BUCKET_CAP = 64
# Roughly what copying a large tensor costs here (bytes/s): a push waits for a pull still
# sending the tensor at most as long as copying the tensor would take, then copies.
COPY_BYTES_PER_S = 2e9

class ParamStore:
    def __init__(self, index: int = 0, num_ps: int = 1, max_staleness: int = -1,
                 applied_capacity: int = 100_000, limits: Limits | None = None):
        self.index = index
        self.limits = limits or Limits()
        self.num_ps = num_ps
        self.max_staleness = max_staleness
        self.gate = Gate()
        self._stats_lock = threading.Lock()
        self.applied = AppliedTable(applied_capacity)
        self.stats = Stats()
        self._init_lock = threading.Lock()
        self.initialized = False
        self.optimizer_cfg: dict | None = None
        self.dense: dict[str, Dense] = {}
        self.tables: dict[str, Table] = {}
        self.table_cfgs: dict[str, dict] = {}
        self.stopping = False
        # parts of the store, each handed the store: snapshots and restores, Step requests
        self.snapshots = Snapshots(self)
        self.flat = FlatAdagrad()  # the packed tensors' flat buffers (ps/flat_dense.py)
        self.steps = Steps(self)
        self.reads = Reads(self)
        self.restores = 0  # snapshots restored over the state (a checkpoint, a primary's copy)
        # writes a checkpoint file of the state (ps.checkpoint.Checkpointer sets it): a change
        # of a table's bounds is filed with it before it is acknowledged
        self.file_tables: Callable[[], object] | None = None
        self._tables_unfiled = False  # a bounds change not in a file yet (its write failed)
        # the hash slots this PS serves (the master's layout says; ps/slots/ownership.py)
        self.ownership = Ownership.initial(index, num_ps)

    # -- what the parts do --------------------------------------------------------------------

    def step(self, client_id: str, seq: int, parts: StepParts, export) -> dict:
        """A Step: the mutations once, then the reads (ps/steps.py)."""
        return self.steps.step(client_id, seq, parts, export)

    def pull(self, names: Sequence[str] = (), export: Export = _copy_export) -> list[tuple]:
        """Dense tensors by name, each read whole under its lock (ps/reads.py)."""
        return self.reads.pull(names, export)

    def pull_packed(self, names: Sequence[str] = (), export: Export = _copy_export):
        """Dense tensors by name, the small ones packed into one tensor (ps/reads.py)."""
        return self.reads.pull_packed(names, export)

    def snapshot(self) -> dict:
        """A consistent, self-contained copy of everything a restart needs (ps/snapshots.py)."""
        return self.snapshots.snapshot()

    def snapshot_view(self, delta: bool = False, clean: bool = False):
        """A consistent, pinned view of the live state, inside a `with` (ps/snapshots.py)."""
        return self.snapshots.snapshot_view(delta, clean)

    def restore(self, state: dict) -> None:
        """Replace the whole state by a snapshot's (ps/snapshots.py)."""
        self.snapshots.restore(state)

    def apply_delta(self, state: dict) -> None:
        """Apply a delta view on top of the restored state (ps/snapshots.py)."""
        self.snapshots.apply_delta(state)

    # -- init ---------------------------------------------------------------------------------

    def init_parameters(self, tensors: Sequence[tuple[str, torch.Tensor]], optimizer: dict,
                        tables: Sequence[tuple[TableSpec, dict | None]] = ()
                        ) -> tuple[bool, dict[str, int], str, bool]:
        """Declare the tensors, optimizer and tables. Returns (initialized_now, versions,
        message, tables_changed); only the first call changes anything but tables' bounds
        (ps/declare.py)."""
        return declare.init_parameters(self, tensors, optimizer, tables)

    def file_tables_now(self) -> None:
        """File a bounds change not in a file yet (model_match.file_bounds), holding no gate:
        the data plane calls it after releasing the gate it held for an InitParameters."""
        if self._tables_unfiled:
            file_bounds(self)

    # -- dense --------------------------------------------------------------------------------

    def versions(self, names: Iterable[str] | None = None) -> dict[str, int]:
        names = self.dense if names is None else names
        return {n: self.dense[n].version for n in names}

    def _require_tensors(self, names: Sequence[str]) -> None:
        missing = [n for n in names if n not in self.dense]
        if missing:
            raise not_found(Reason.UNKNOWN_TENSOR, f"no tensor named "
                            f"{', '.join(quote(n) for n in missing[:5])} on PS {self.index} "
                            f"(it holds {len(self.dense)} tensors)")

    def push(self, client_id: str, seq: int, grads: Sequence[tuple[str, torch.Tensor]],
             versions: Sequence[int], checked: bool = False,
             packed: torch.Tensor | None = None, packed_count: int = 0) -> dict:
        """Apply gradients; returns the answer {code, message, versions, max_staleness,
        duplicate}. Bad input raises ServiceError and changes nothing. `checked`: every PS of
        the step already passed `check_push`, so staleness no longer refuses it. `packed`: the
        flat tensor the first `packed_count` grads are views of (pswire.frames.decode)."""
        self._validate_push([(n, g.shape, g.dtype) for n, g in grads], versions)
        names = [n for n, _ in grads]
        self._require_finite_grads(grads, packed, packed_count)
        return self._at_most_once(
            client_id, seq, lambda: self._apply(grads, versions, checked, packed, packed_count),
            lambda: {"versions": self.versions(names), "max_staleness": 0})

    def check_push(self, metas: Sequence[tuple[str, tuple, torch.dtype]],
                   versions: Sequence[int]) -> dict:
        """Phase one of a push split over several PS (see docs/ps.md): validate it like `push`
        and answer whether its staleness passes, applying nothing."""
        self._validate_push(metas, versions)
        names = [n for n, _, _ in metas]
        worst = max((self._staleness(self.dense[n], v) for n, v in zip(names, versions)),
                    default=0)
        if 0 <= self.max_staleness < worst:
            return self._stale(worst, names)
        return {"code": "OK", "message": "", "versions": self.versions(names),
                "max_staleness": worst, "duplicate": False}

    @staticmethod
    def _require_finite_grads(grads, packed: torch.Tensor | None = None,
                              packed_count: int = 0) -> None:
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

    def _validate_push(self, metas, versions) -> None:
        self._require_init()
        if len(versions) != len(metas):
            raise invalid(f"push has {len(metas)} tensors but {len(versions)} versions")
        check_names([n for n, _, _ in metas], self.limits, "a Push")
        for name, shape, dtype in metas:
            d = self.dense.get(name)
            if d is None:
                raise not_found(Reason.UNKNOWN_TENSOR, f"no tensor named {quote(name)} on PS "
                                f"{self.index}; push each gradient to the PS that holds its "
                                "tensor (pswire.partition)")
            if tuple(shape) != tuple(d.value.shape) or dtype != d.value.dtype:
                raise invalid(f"gradient of {quote(name)} is {DTYPE_NAMES.get(dtype)}"
                              f"{list(shape)}, the tensor is {shape_of(d.value)}")

    def _at_most_once(self, client_id: str, seq: int, apply, defaults) -> dict:
        """Run `apply` once per (client_id, seq): a retry gets the first answer back, marked
        duplicate (with `defaults()` filling what an error answer lacks)."""
        with self.gate.shared():
            self._refuse_if_stopping()
            try:
                entry = self.applied.begin(client_id, seq)
            except Duplicate as dup:
                return {**defaults(), **dup.answer, "duplicate": True}
            try:
                answer = apply()
            except BaseException:
                self.applied.abandon(client_id, entry)
                raise
            self.applied.finish(entry, answer)
            return dict(answer, duplicate=False)

    def _apply(self, grads, versions, checked: bool = False,
               packed: torch.Tensor | None = None, packed_count: int = 0) -> dict:
        """Apply a validated push under its tensors' locks. `packed`: the flat tensor the first
        `packed_count` grads are views of (their update may run over it: ps/flat_dense.py)."""
        ordered = sorted(zip(grads, versions), key=lambda x: x[0][0])
        held = [self.dense[name] for (name, _), _ in ordered]
        for d in held:  # sorted by name: no deadlock between concurrent pushes
            d.lock.acquire()
        try:
            worst = max((self._staleness(d, pulled) for d, (_, pulled) in zip(held, ordered)),
                        default=0)
            if 0 <= self.max_staleness < worst and not checked:
                return self._stale(worst, [d.name for d in held])
            self._step_all(held, [g for (_, g), _ in ordered],
                           [n for n, _ in grads[:packed_count]] if packed is not None else (),
                           packed)
        finally:
            for d in held:
                d.lock.release()
        return self._applied(worst, [d.name for d in held])

    def _stale(self, worst: int, names: list[str]) -> dict:
        with self._stats_lock:
            self.stats.refused_stale += 1
        return {"code": "FAILED_PRECONDITION", "reason": Reason.STALE_GRADIENT.value,
                "message": f"gradient is {worst} versions stale (--max-staleness "
                           f"{self.max_staleness}); pull again and recompute",
                "versions": self.versions(names), "max_staleness": worst}

    def _applied(self, worst: int, names: list[str]) -> dict:
        s = self.stats
        with self._stats_lock:
            s.pushes += 1
            s.staleness[min(worst, STALENESS_BUCKET_CAP)] += 1
            s.max_staleness_seen = max(s.max_staleness_seen, worst)
        return {"code": "OK", "message": "", "versions": self.versions(names),
                "max_staleness": worst}

    def _staleness(self, d: Dense, pulled: int) -> int:
        if pulled > d.version:
            with self._stats_lock:
                self.stats.ahead += 1
            return 0
        return d.version - pulled

    def _unpin(self, d: Dense) -> None:
        """Under d.lock: make sure no pull is still sending d's memory before it changes.

        Wait for the sends at most about as long as copying the tensor would take (idle
        waiting leaves the CPU to ZeroMQ and the workers); then copy on write.
        """
        pins = [p for p in d.pins if not p.done]
        d.pins = []
        if not pins:
            return
        deadline = time.monotonic() + d.value.numel() * d.value.element_size() / COPY_BYTES_PER_S
        for p in pins:
            left = deadline - time.monotonic()
            if left <= 0 or not hasattr(p, "wait"):
                break
            try:
                p.wait(left)
            except Exception:  # noqa: BLE001 - zmq.NotDone: still sending
                break
        if any(not p.done for p in pins):
            d.value.data = d.value.data.clone()
            with self._stats_lock:
                self.stats.copies_on_write += 1
        else:
            with self._stats_lock:
                self.stats.waited_for_send += 1

    def _step_all(self, held: list[Dense], grads: list[torch.Tensor],
                  packed_names: Sequence[str] = (), packed: torch.Tensor | None = None) -> None:
        """Under every d.lock: apply one gradient to each tensor (after any pull still sending
        it, and on a copy when a snapshot view still reads it), in one optimizer call; the
        tensors `packed_names` (of `held`), whose gradients are the flat `packed`, in flat
        buffers when they fit (ps/flat_dense.py)."""
        for d in held:
            if d.snaps:
                if any(not pin.done for pin in d.snaps):
                    self.snapshots.copy_for_snapshot(d)  # protects every open view at once
                d.snaps = []
            if d.pins:
                self._unpin(d)
        self.flat.update(self.dense, held, grads, packed_names, packed)
        for d in held:
            d.version += 1
            d.pushes += 1

    # -- embedding rows -----------------------------------------------------------------------

    def table(self, name: str) -> Table:
        self._require_init()
        table = self.tables.get(name)
        if table is None:
            raise not_found(Reason.UNKNOWN_TABLE, f"no embedding table named {name!r} (declared: "
                            f"{', '.join(sorted(self.tables)) or 'none'})")
        return table

    def _check_ids(self, ids, table: str) -> None:
        """`ids`: a numpy array (the data plane's) or a torch tensor (`tables.index.keys_of`)."""
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1 or ids.dtype != np.int64:
                raise invalid(f"table {table!r}: ids must be a 1-D int64 array")
        elif ids.dim() != 1 or ids.dtype != torch.int64:
            raise invalid(f"table {table!r}: ids must be a 1-D int64 tensor")
        if len(ids) == 0:
            return
        low, high = min_max(keys_of(ids))  # one compiled pass (pswire.jit)
        if low < 0 or high > MAX_ROW_ID:
            raise invalid(f"table {table!r}: ids must be in 0..{MAX_ROW_ID} (2**53 - 1), got "
                          f"{low if low < 0 else high}")
        bound = self.tables[table].spec.num_embeddings
        if bound and high >= bound:
            raise invalid(f"table {table!r}: id {high} is outside the table (num_embeddings "
                          f"{bound}: ids 0..{bound - 1})")

    def pull_rows(self, table: str, ids: torch.Tensor) -> tuple[torch.Tensor, int]:
        t = self.table(table)
        self._check_ids(ids, table)
        rows, created = self.read_rows(t, ids, self.limits.max_new_rows)
        self.stats.row_pulls += 1
        return rows, created

    def read_rows(self, t: Table, ids: torch.Tensor, max_new: int | None):
        """A table's pull. A table whose reads change it (admission, a cap, a TTL) is read
        under the gate, shared, like a mutation: a checkpoint then sees each such read whole,
        and its delta and the table's "clean" mark agree (ps/checkpoint.py)."""
        if not t.spec.stateful_reads:
            return t.pull(ids, max_new)
        with self.gate.shared():
            return t.pull(ids, max_new)

    def push_rows(self, client_id: str, seq: int, table: str, ids: torch.Tensor,
                  grads: torch.Tensor) -> dict:
        t = self.table(table)
        self._check_ids(ids, table)
        require_row_grads(grads, len(ids), t.spec.dim, table)
        def apply() -> dict:
            answer = {"code": "OK", "message": "",
                      "rows": t.push(ids, grads, self.limits.max_new_rows)}
            with self._stats_lock:
                self.stats.row_pushes += 1
            return answer

        return self._at_most_once(client_id, seq, apply, lambda: {"rows": 0})

    # -- lifecycle and checkpoints ------------------------------------------------------------

    def _require_init(self) -> None:
        if not self.initialized:
            raise precondition(Reason.NOT_INITIALIZED, f"PS {self.index} is not initialized: call InitParameters first")

    def _refuse_if_stopping(self) -> None:
        if self.stopping:
            raise unavailable(Reason.SHUTTING_DOWN, f"PS {self.index} is shutting down; retry (it comes back from "
                              "its checkpoint)")

    def stop_mutations(self) -> None:
        """From now on refuse every mutation (UNAVAILABLE), after those in flight finished."""
        with self.gate.exclusive():
            self.stopping = True

def table_specs(tables: Iterable) -> list[tuple[TableSpec, dict | None]]:
    """Normalize tables given as TableSpec, dicts or (TableSpec, optimizer cfg) pairs."""
    out = []
    for t in tables:
        if isinstance(t, tuple):
            out.append(t)
        elif isinstance(t, TableSpec):
            out.append((t, None))
        else:
            t = dict(t)
            cfg = t.pop("optimizer", None)
            out.append((TableSpec(**t), cfg))
    return out


__all__ = ["ParamStore", "Dense", "ServiceError", "TableSpec", "table_specs"]
