"""One training step's traffic in one call: the mutations of a step, then the reads of a later one.

The pipelined worker (worker_sdk/ps/pipeline.py) sends each PS one `Step` per training step
instead of four requests (push, push rows, pull, pull rows): the per-request cost (a message
each way, a thread hand-over, a header to parse, an at-most-once entry) dominates a small
model's step, so this is where a worker's time went.

What it promises, on top of ParamStore's rules:
- Everything is checked before anything changes: a step with one bad part (an unknown tensor
  or table, a wrong shape, ids of another PS, a NaN) is refused whole.
- The mutations (the dense push and every row push) are one unit under (client_id, seq):
  applied together or not at all, at most once. A push refused as stale applies no rows either
  and the step is answered without reads, so a StaleGradient still means nothing of the step
  was applied here.
- The reads come after the mutations and are served on every try: a retried step whose
  mutations were already applied gets them marked duplicate, and fresh reads.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from .dense import require_finite_grads
from .limits import check_names, too_large
from rpckit.errors import invalid
from pswire.frames import require_row_grads


@dataclass
class StepParts:
    """A decoded Step: what to change, then what to read (None / empty: not done)."""

    grads: list[tuple[str, torch.Tensor]] | None = None
    versions: list[int] = field(default_factory=list)
    checked: bool = False
    packed: torch.Tensor | None = None  # the frame the first packed_count grads are views of
    packed_count: int = 0
    # (table, ids, float32 gradients [len(ids), dim]: numpy from the data plane, or a tensor)
    rows: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)
    pull: list[str] | None = None  # [] pulls every tensor
    pull_packed: bool = False  # the reads may pack small tensors into one frame
    pull_rows: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    # per pull_rows entry: None, or a bool mask over its ids whose optimizer state is read too
    pull_marks: list[np.ndarray | None] = field(default_factory=list)

    @property
    def mutates(self) -> bool:
        return self.grads is not None or bool(self.rows)


class Steps:
    """A `ParamStore`'s Step requests: a part of the store, handed the store whose checks,
    tensors, tables and at-most-once table it uses."""

    def __init__(self, store) -> None:
        self.store = store
        # a Step's mutations, and then its reads, each whole to every other Step's: its reads
        # see another Step's push entirely or not at all, so a dense version that shows that
        # push not applied shows its rows not applied either (worker_sdk/ps/served.py)
        self._whole = threading.Lock()

    def step(self, client_id: str, seq: int, parts: StepParts, export) -> dict:
        """Apply the mutations once, then read. Returns the answer: {code, message, reason,
        push (the push's answer, when one was sent), rows (rows updated per row push),
        duplicate, pulled ([(name, payload, version, tensor)]), pulled_rows ([(rows,
        created)])}; reads are absent when the mutations were refused."""
        self._check_step(parts)
        answer = {"code": "OK", "message": "", "duplicate": False}
        if parts.mutates:
            with self._whole:
                answer = self.store._at_most_once(client_id, seq,
                                                  lambda: self._apply_step(parts),
                                                  lambda: {"rows": [0] * len(parts.rows)})
            if answer["code"] != "OK":
                return answer
        with self._whole:
            self._read(parts, export, answer)
        return answer

    def _read(self, parts: StepParts, export, answer: dict) -> None:
        if parts.pull is not None:
            answer["pulled"] = (self.store.pull_packed(parts.pull, export)
                                if parts.pull_packed else self.store.pull(parts.pull, export))
        # checked above; a table's pull takes its lock, so it sees each row push whole. After
        # the mutations nothing may refuse (their answer would be lost, and a primary would
        # not forward them): the new rows were counted before the push, and what the push's
        # evictions add is bounded by the request's own ids
        limit = None if parts.mutates else self.store.limits.max_new_rows
        marks = parts.pull_marks or [None] * len(parts.pull_rows)
        answer["pulled_rows"] = [self.store.read_rows(self.store.tables[table], ids, limit, m)
                                 for (table, ids), m in zip(parts.pull_rows, marks)]
        if parts.pull_rows:
            self.store.stats.row_pulls += len(parts.pull_rows)

    def _check_step(self, parts: StepParts) -> None:
        self.store._require_init()
        if parts.grads is not None:
            self.store._validate_push([(n, g.shape, g.dtype) for n, g in parts.grads],
                                      parts.versions)
            require_finite_grads(parts.grads, parts.packed, parts.packed_count)
        tables = [t for t, _, _ in parts.rows]
        check_names(tables, self.store.limits, "a Step's row pushes")
        for table, ids, grads in parts.rows:
            spec = self.store.table(table).spec
            self.store._check_ids(ids, table)
            require_row_grads(grads, len(ids), spec.dim, table)
            self._check_new_rows(table, ids)
        if parts.pull is not None:
            check_names(parts.pull, self.store.limits, "a Step's pull")
            self.store._require_tensors(parts.pull)
        check_names([t for t, _ in parts.pull_rows], self.store.limits, "a Step's row pulls")
        for nth, (table, ids) in enumerate(parts.pull_rows):
            self.store.table(table)
            self.store._check_ids(ids, table)
            self._check_new_rows(table, ids)
            if parts.pull_marks and parts.pull_marks[nth] is not None:
                self._check_marks(table, ids, parts.pull_marks[nth])

    def _check_marks(self, table: str, ids, mask: np.ndarray) -> None:
        """A row pull's mask (its state asked): one flag per id read (so the marked ids are
        some of the read's, at most as many), on a table that keeps a state."""
        if len(mask) != len(ids):
            raise invalid(f"table {table!r}: the state mask has {len(mask)} flags for "
                          f"{len(ids)} ids read")
        if self.store.tables[table].accum is None:
            raise invalid(f"table {table!r}: its optimizer keeps no state to read; mark no "
                          "rows of it")

    def _check_new_rows(self, table: str, ids: torch.Tensor) -> None:
        """Refuse now what would be refused half-way (--max-new-rows): after the push."""
        limit = self.store.limits.max_new_rows
        if len(ids) > limit:
            created = self.store.tables[table].missing(ids)
            if created > limit:
                raise too_large(f"table {table!r}: this step would create {created} rows; at "
                                f"most {limit} new rows per request (--max-new-rows): split "
                                "the ids over several requests")

    def _apply_step(self, parts: StepParts) -> dict:
        answer = {"code": "OK", "message": ""}
        if parts.grads is not None:
            pushed = self.store._apply(parts.grads, parts.versions, parts.checked,
                                       parts.packed, parts.packed_count)
            if pushed["code"] != "OK":  # refused as stale: nothing of the step is applied
                return {**pushed, "push": pushed, "rows": [0] * len(parts.rows)}
            answer["push"] = pushed
        counts = []
        for table, ids, grads in parts.rows:
            counts.append(self.store.tables[table].push(ids, grads, self.store.limits.max_new_rows))
        if counts:
            with self.store._stats_lock:
                self.store.stats.row_pushes += len(counts)
        answer["rows"] = counts
        return answer

