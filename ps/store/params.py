"""The PS's model state: dense tensors and embedding tables, and the rules for changing them.

Plain Python and torch, no sockets: the data plane and the gRPC servicer only translate
messages into these calls. What it promises:

- The first `init_parameters` wins; a later call declaring the same model (tensors, shapes,
  dtypes, tables, optimizers) changes nothing and answers the versions; one declaring another
  model or optimizer is refused (FAILED_PRECONDITION, MODEL_MISMATCH, naming the differing
  fields), so a worker never trains a model the PS does not hold. A table's bounds
  (`max_rows`, `ttl_s`, `ttl_steps`, `evict`) may differ: the PS adopts the declared ones
  (ps/store/model_match.py) and files them before it answers (`file_table_bounds`).
- A dense tensor has a version (pushes applied to it). A push applies the gradient with the
  tensor's own `torch.optim` optimizer (Adagrad: the push's tensors in one foreach update, or
  the packed ones over flat buffers, the same arithmetic: ps/store/optim.py, ps/store/flat_dense.py) under
  the tensor's lock and bumps the version (answered as it is right after the push). The push
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
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from .applied import AppliedTable, Duplicate
from ..slots.ownership import Ownership
from .dense import Dense, Stats, require_finite_grads
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
from .requests import Requests
from .limits import Limits, check_names
from . import declare
from .model_match import shape_of
from .optim import RowOptimizer
from pswire.partition import MAX_ROW_ID
from pswire.jit import min_max
from pswire.frames import DTYPE_NAMES, require_row_grads

STALENESS_BUCKET_CAP = 64


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
        self.flat = FlatAdagrad()  # the packed tensors' flat buffers (ps/store/flat_dense.py)
        self.steps = Steps(self)
        self.reads = Reads(self)
        self.requests = Requests(self)  # a data-plane request's scope: gate and ownership
        self.restores = 0  # snapshots restored over the state (a checkpoint, a primary's copy)
        # writes a checkpoint file of the state (ps.checkpoint.Checkpointer gives it:
        # `file_tables_with`): a change of a table's bounds is filed with it before it is
        # acknowledged
        self._file_tables: Callable[[], object] | None = None
        self._tables_unfiled = False  # a bounds change not in a file yet (its write failed)
        # the hash slots this PS serves (the master's layout says; ps/slots/ownership.py)
        self.ownership = Ownership.initial(index, num_ps)

    # -- what the parts do --------------------------------------------------------------------

    def step(self, client_id: str, seq: int, parts: StepParts, export) -> dict:
        """A Step: the mutations once, then the reads (ps/store/steps.py)."""
        return self.steps.step(client_id, seq, parts, export)

    def pull(self, names: Sequence[str] = (), export: Export = _copy_export) -> list[tuple]:
        """Dense tensors by name, each read whole under its lock (ps/store/reads.py)."""
        return self.reads.pull(names, export)

    def pull_packed(self, names: Sequence[str] = (), export: Export = _copy_export):
        """Dense tensors by name, the small ones packed into one tensor (ps/store/reads.py)."""
        return self.reads.pull_packed(names, export)

    def snapshot(self) -> dict:
        """A consistent, self-contained copy of everything a restart needs (ps/store/snapshots.py)."""
        return self.snapshots.snapshot()

    def snapshot_view(self, delta: bool = False, clean: bool = False):
        """A consistent, pinned view of the live state, inside a `with` (ps/store/snapshots.py)."""
        return self.snapshots.snapshot_view(delta, clean)

    def restore(self, state: dict) -> None:
        """Replace the whole state by a snapshot's (ps/store/snapshots.py)."""
        self.snapshots.restore(state)

    def apply_delta(self, state: dict) -> None:
        """Apply a delta view on top of the restored state (ps/store/snapshots.py)."""
        self.snapshots.apply_delta(state)

    # -- init ---------------------------------------------------------------------------------

    def init_parameters(self, tensors: Sequence[tuple[str, torch.Tensor]], optimizer: dict,
                        tables: Sequence[tuple[TableSpec, dict | None]] = ()
                        ) -> tuple[bool, dict[str, int], str, bool]:
        """Declare the tensors, optimizer and tables. Returns (initialized_now, versions,
        message, tables_changed); only the first call changes anything but tables' bounds
        (ps/store/declare.py)."""
        return declare.init_parameters(self, tensors, optimizer, tables)

    def file_tables_now(self) -> None:
        """File a bounds change not in a file yet (`file_table_bounds`), holding no gate:
        the data plane calls it after releasing the gate it held for an InitParameters."""
        if self._tables_unfiled:
            self.file_table_bounds()

    # -- what changes the model held: the only code that does -----------------------------------

    def make_table(self, spec: TableSpec, cfg: dict, capacity: int | None = None) -> Table:
        """The one place a Table is made: its row optimizer from `cfg`, its share of
        `max_rows` under the slots this PS owns. `capacity` 0: a restore's, which adopts a
        file's rows."""
        return Table(spec, RowOptimizer.from_config(cfg),
                     **({} if capacity is None else {"capacity": capacity}),
                     row_cap=self.ownership.row_share(spec.max_rows))

    def declare(self, dense: dict[str, Dense], optimizer: dict,
                tables: Sequence[tuple[TableSpec, dict]]) -> None:
        """The model this PS holds from now on: the first InitParameters' (under the init
        lock), or a slot move's declaration on a PS that holds none (no tensor, no table)."""
        self.dense = dense
        self.tables = {spec.name: self.make_table(spec, cfg) for spec, cfg in tables}
        self.table_cfgs = {spec.name: dict(cfg) for spec, cfg in tables}
        self.optimizer_cfg = dict(optimizer)
        self.initialized = True

    def add_table(self, spec: TableSpec, cfg: dict, capacity: int | None = None) -> Table:
        """The table named `spec.name`, made first (with its optimizer `cfg`) when this PS
        holds none: a slot move's or a delta's table declared after what this PS holds."""
        table = self.tables.get(spec.name)
        if table is None:
            table = self.tables[spec.name] = self.make_table(spec, cfg, capacity)
            self.table_cfgs[spec.name] = dict(cfg)
        return table

    def install_dense(self, d: Dense) -> None:
        """Hold `d` (a slot move's tensor), replacing any tensor of its name."""
        self.dense[d.name] = d

    def free_dense(self, names: Iterable[str]) -> None:
        """Drop the tensors `names` (their slots moved to another PS)."""
        for name in names:
            del self.dense[name]

    def set_ownership(self, ownership: Ownership) -> None:
        """The slots this PS serves from now on (a restore's, or the master's slot count)."""
        self.ownership = ownership

    def replace(self, dense: dict[str, Dense], optimizer: dict | None, initialized: bool,
                applied: list, pushes: int, row_pushes: int,
                tables: dict[str, Table] | None = None,
                table_cfgs: dict[str, dict] | None = None) -> None:
        """Replace the model by a snapshot's (ps/store/snapshots.py), at start, before
        serving. `tables` None: a delta's, whose tables the caller then updates row by row;
        given: a whole snapshot's, counted in `restores`."""
        self.dense = dense
        self.optimizer_cfg = dict(optimizer) if optimizer else None
        self.initialized = bool(initialized)
        self.applied.restore(applied)
        self.stats.pushes, self.stats.row_pushes = int(pushes), int(row_pushes)
        if tables is not None:
            self.tables, self.table_cfgs = tables, dict(table_cfgs or {})
            self.restores += 1

    def retune_tables(self, changes: Sequence[tuple[TableSpec, list]]) -> None:
        """Under the init lock and the gate (shared): the tables adopt the declared bounds
        (ps/store/model_match.py found them), to be filed (`file_table_bounds`) before the
        change is acknowledged."""
        for spec, _ in changes:
            self.tables[spec.name].retune(spec, self.ownership.row_share(spec.max_rows))
        if changes:
            self._tables_unfiled = True

    @property
    def tables_unfiled(self) -> bool:
        """Whether a change of bounds is not in a checkpoint file yet (its write failed)."""
        return self._tables_unfiled

    def file_tables_with(self, write: Callable[[], object]) -> None:
        """Where a change of tables' bounds is filed: `write` writes a checkpoint file
        (ps.checkpoint.Checkpointer)."""
        self._file_tables = write

    def file_table_bounds(self) -> None:
        """Before a bounds change is acknowledged: a checkpoint file holds it, so a restart
        keeps it. A failed write is UNAVAILABLE, and the next InitParameters (even one
        changing nothing) writes it again. Holding no gate: the snapshot takes it
        exclusive."""
        if self._file_tables is not None:
            try:
                self._file_tables()
            except OSError as exc:
                raise unavailable(Reason.UNAVAILABLE, f"PS {self.index} adopted the tables' "
                                  f"new bounds but could not write them to a checkpoint file "
                                  f"({exc}); retry") from exc
        self._tables_unfiled = False

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
        require_finite_grads(grads, packed, packed_count)
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
        `packed_count` grads are views of (their update may run over it: ps/store/flat_dense.py)."""
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
            after = {d.name: d.version for d in held}  # right after it (worker_sdk/ps/served.py)
        finally:
            for d in held:
                d.lock.release()
        return self._applied(worst, after)

    def _stale(self, worst: int, names: list[str]) -> dict:
        with self._stats_lock:
            self.stats.refused_stale += 1
        return {"code": "FAILED_PRECONDITION", "reason": Reason.STALE_GRADIENT.value,
                "message": f"gradient is {worst} versions stale (--max-staleness "
                           f"{self.max_staleness}); pull again and recompute",
                "versions": self.versions(names), "max_staleness": worst}

    def _applied(self, worst: int, versions: dict[str, int]) -> dict:
        s = self.stats
        with self._stats_lock:
            s.pushes += 1
            s.staleness[min(worst, STALENESS_BUCKET_CAP)] += 1
            s.max_staleness_seen = max(s.max_staleness_seen, worst)
        return {"code": "OK", "message": "", "versions": versions, "max_staleness": worst}

    def _staleness(self, d: Dense, pulled: int) -> int:
        if pulled > d.version:
            with self._stats_lock:
                self.stats.ahead += 1
            return 0
        return d.version - pulled

    def _step_all(self, held: list[Dense], grads: list[torch.Tensor],
                  packed_names: Sequence[str] = (), packed: torch.Tensor | None = None) -> None:
        """Under every d.lock: apply one gradient to each tensor (after any pull still sending
        it, and on a copy when a snapshot view still reads it), in one optimizer call; the
        tensors `packed_names` (of `held`), whose gradients are the flat `packed`, in flat
        buffers when they fit (ps/store/flat_dense.py)."""
        for d in held:
            if d.snaps or d.pins:
                self._count_copies(*d.make_writable())
        self.flat.update(self.dense, held, grads, packed_names, packed)
        for d in held:
            d.stepped()

    def _count_copies(self, for_snapshot: bool, for_send: str) -> None:
        with self._stats_lock:
            self.stats.snapshot_copies += for_snapshot
            self.stats.copies_on_write += for_send == "copied"
            self.stats.waited_for_send += for_send == "waited"

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

    def read_rows(self, t: Table, ids: torch.Tensor, max_new: int | None,
                  marked: np.ndarray | None = None):
        """A table's pull: (rows, created), and the `marked` ids' state (a bool mask over
        `ids`) third when given. A table whose reads change it (admission, a cap, a TTL) is
        read under the gate, shared, like a mutation (a checkpoint sees each read whole)."""
        read = t.pull if marked is None else lambda i, m: t.pull_with_state(i, marked, m)
        if not t.spec.stateful_reads:
            return read(ids, max_new)
        with self.gate.shared():
            return read(ids, max_new)

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


__all__ = ["ParamStore", "Dense", "ServiceError", "TableSpec"]
