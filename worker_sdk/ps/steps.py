"""`DataClient.step`: one training step's traffic to each PS in one message.

A step of a small model costs more in requests than in bytes: pushing the dense gradients,
pushing the row gradients, pulling the next dense parameters and pulling the next rows are
four requests to every PS, each a message each way and a wake-up of both sides. `step` sends
each PS one `Step` (protos/ps.proto) with all of it, in parallel, retried as one request (same
client_id and seq: its mutations are applied at most once, its reads are served again).

On one PS the mutations are all-or-none (ps/store/steps.py). Over several PS, under
`--max-staleness`, the dense push is first checked everywhere without applying anything
(`Push.check_only`, as `push` does), so a `StaleGradient` still means that no PS applied any
part of the step.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from protos import ps_pb2
from pswire import jit
from pswire.frames import as_buffer, buffer_of, dtype_name, frames_of, from_frame, pack, packing
from rpckit.errors import Reason

from . import reroute
from .correct import place_marked
from .ids import prepared
from .outcomes import PushOutcome, StaleGradient, StepOutcome, dense_grad
from .parts import Part, Rows
from .routes import PSError


def step(client, grads: Mapping[str, torch.Tensor] | None = None,
         versions: Mapping[str, int] | None = None,
         rows: Sequence[tuple[str, torch.Tensor, torch.Tensor]] = (),
         pull: Sequence[str] | None = None,
         pull_rows: Mapping[str, torch.Tensor] | None = None,
         marks: Mapping[str, np.ndarray] | None = None) -> StepOutcome:
    """Push `grads` (name -> gradient, computed from `versions`, default those of the last
    pull) and `rows` ((table, ids, row gradients)), then pull the tensors `pull` and the
    rows of `pull_rows` (table -> 1-D ids), every PS in one message; `marks` (table -> a
    bool mask over that table's flattened ids): the optimizer state of the marked rows is
    read with them (`StepOutcome.states`, in the order of the marked ids). Raises
    StaleGradient when a PS refused the push as too stale: then no PS applied any of the
    step's mutations, and nothing was read."""
    return begin_step(client, grads, versions, rows, pull, pull_rows, marks).result()

def begin_step(client, grads: Mapping[str, torch.Tensor] | None = None,
               versions: Mapping[str, int] | None = None,
               rows: Sequence[tuple[str, torch.Tensor, torch.Tensor]] = (),
               pull: Sequence[str] | None = None,
               pull_rows: Mapping[str, torch.Tensor] | None = None,
               marks: Mapping[str, np.ndarray] | None = None) -> "PendingStep":
    """`step` in two halves: this sends the Step and returns; `result()` of what it returns
    waits for the answers (and raises what `step` raises). No other call of this client
    may come before that `result()`. Do not change the gradients before it either: they
    are sent from their own memory."""
    versions = client.versions if versions is None else versions
    grads = {n: dense_grad(g) for n, g in grads.items()} if grads else None
    row_pushes, cut = [], []
    for table, ids, grad in rows:
        ids, memo = prepared(ids)
        if ids.size:
            cut.append(Rows(len(row_pushes), ids, memo=memo))
            row_pushes.append((table, grad.detach().to(torch.float32).contiguous()))
    router = client.router
    whole = Part(push=router.known(grads, "push") if grads else [], rows=cut,
                 pull=router.known(pull, "pull") if pull is not None else [])
    sizes = {}
    counts = {t: n for t, n in ((t, int(np.count_nonzero(m))) for t, m in (marks or {}).items())
              if n}  # the marked ids of a table: the rows of its whole state
    marks = {t: marks[t] for t in counts}
    for table, ids in (pull_rows or {}).items():
        ids, memo = prepared(ids)
        sizes[table] = ids.size
        if ids.size:
            whole.pull_rows.append(Rows(table, ids, memo=memo))
        if table in marks and marks[table].shape != (ids.size,):
            raise ValueError(f"table {table!r}: {marks[table].shape} marks for {ids.size} ids")
    op = _Step(client, grads, versions, row_pushes, marks)
    # Over several PS (the dense push split, or rows going elsewhere) a PS that checks
    # staleness checks first, applying nothing anywhere yet (as DataClient.push does); alone,
    # a PS refuses the whole step itself.
    if client.needs_check(whole.push, rows=bool(row_pushes)):
        client.check_push(grads, versions, whole.push)
        op.checked = True
    parts = router.split(whole)
    call = client.begin(parts, op) if parts else None
    return PendingStep(client, call, bool(grads), pull is not None, sizes, marks, counts)


class _Step(reroute.Op):
    allow = (Reason.STALE_GRADIENT,)

    def __init__(self, client, grads, versions, rows, marks=None):
        self.client, self.grads, self.versions, self.rows = client, grads, versions, rows
        self.marks = marks or {}  # table -> bool mask over its pulled ids
        self.checked = False

    def build(self, index, part):
        names = part.push
        grads = [self.grads[n] for n in names]
        # what the header says of this PS's part, besides versions, is the same step after
        # step: its bytes are made once (`_header`) and merged into a new request
        key = (self.checked, tuple(names), tuple([(g.dtype, g.shape) for g in grads]),
               tuple([self.rows[r.key][0] for r in part.rows]), tuple(part.pull),
               tuple([(r.key, r.key in self.marks) for r in part.pull_rows]))
        header = _HEADERS.get(key)
        if header is None:
            header = _header(key, grads)
        body, packed, alone, order = header
        req = ps_pb2.DataRequest()
        step = req.step
        step.SetInParent()
        step.MergeFromString(body)
        frames = []
        if names:
            if packed:  # the small gradients as one frame (pswire.frames)
                frames.append(as_buffer(pack([grads[i] for i in packed])))
            get = self.versions.get
            step.push.versions.extend([int(get(names[i], 0)) for i in order])
            for i in alone:
                frames.append(as_buffer(grads[i]))
        for r in part.rows:
            grad = self.rows[r.key][1]
            g = grad if r.positions is None else grad.index_select(0, torch.from_numpy(r.positions))
            frames.append(r.ids.view(np.uint8))
            frames.append(as_buffer(g))
        for r in part.pull_rows:
            frames.append(r.ids.view(np.uint8))
        for r in part.pull_rows:  # the state masks follow every ids frame
            mask = self.marks.get(r.key)
            if mask is not None:
                mask = mask if r.positions is None else mask[r.positions]
                frames.append(np.ascontiguousarray(mask).view(np.uint8))
        return req, frames

    def prepare(self, parts):
        # a push that went to one PS unchecked and now spans several is checked first
        names = [n for p in parts.values() for n in p.push]
        if names and not self.checked and self.client.needs_check(
                names, rows=any(p.rows for p in parts.values())):
            self.client.check_push(self.grads, self.versions, names)
            self.checked = True


MAX_HEADERS = 64  # header templates kept (a loop sends a few kinds of Step, to a few PS)
_HEADERS: dict[tuple, tuple] = {}


def _header(key, grads):
    """A Step header's fixed part for `key` (`_Step.build`), serialized: (bytes, indexes
    packed, indexes alone, their order in the push's metas)."""
    checked, names, _, row_tables, pull, pull_tables = key
    step = ps_pb2.Step()
    packed, alone = packing(grads) if names else ([], [])
    order = packed + alone
    if names:
        push = step.push
        push.checked = checked
        push.packed_count = len(packed)
        for i in order:  # add() builds each in place (append would copy a built one)
            g = grads[i]
            push.tensors.add(name=names[i], dtype=dtype_name(g), shape=g.shape)
    for table in row_tables:
        step.push_rows.add(table=table)
    if pull:
        step.pull.names.extend(pull)
        step.pull.packed = True
    for table, marked in pull_tables:
        step.pull_rows.add(table=table, marked=marked)
    if len(_HEADERS) >= MAX_HEADERS:
        _HEADERS.clear()
    header = _HEADERS[key] = (step.SerializeToString(), packed, alone, order)
    return header


def _step_outcome(client, result, pushed, pulled, sizes, marks, counts) -> StepOutcome:
    if result is None:
        return StepOutcome(dense={} if pulled else None)
    push = PushOutcome() if pushed else None
    out = StepOutcome(push=push)
    stale = []
    for a in result.answers:
        resp = a.resp
        step = resp.step
        if resp.code != 0:
            stale.append(f"PS {a.index}: {resp.message}")
        answer = step.push
        if push is not None and a.part.push:
            push.versions.update(answer.versions)
            push.max_staleness = max(push.max_staleness, answer.max_staleness)
            push.duplicate |= answer.duplicate
        out.duplicate |= answer.duplicate
        if step.push_rows:
            out.rows_updated += sum(r.rows for r in step.push_rows[:])
    for a in result.applied_before:  # refused WRONG_OWNER, its mutations applied there once
        out.duplicate = True
        if push is not None and a.part.push:
            push.duplicate = True
    if stale:
        raise StaleGradient("; ".join(stale), push.versions if push else {})
    if pulled:
        out.dense = {}
    got: dict[str, list] = {}  # table -> [(Rows, values)]
    for a in result.answers:
        step, frames = a.resp.step, a.frames
        pull, pull_rows, asked = step.pull, step.pull_rows, a.part.pull_rows
        if step.HasField("pull"):
            client.staleness_checked[a.index] = pull.staleness_checked
        metas, packed = pull.tensors, pull.packed_count
        dense_frames = frames_of(len(metas), packed)
        stated = [r.key in marks for r in asked]
        if len(frames) != dense_frames + len(pull_rows) + sum(stated) \
                or len(pull_rows) != len(asked) \
                or [bool(r.state) for r in pull_rows] != stated:
            raise PSError("INTERNAL", Reason.INTERNAL, f"PS {a.index} answered a Step with "
                          f"{len(frames)} frames for {len(metas)} tensors "
                          f"({packed} packed) and "
                          f"{len(pull_rows)} row pulls ({len(asked)} asked, "
                          f"{sum(stated)} with state)")
        if metas or asked:
            out.served.add(a.index)
        if metas:
            pulled_now, _ = client.decoder.decode(a.index, metas, frames[:dense_frames], packed)
            out.dense.update(pulled_now)
            out.pulled_from.update((name, a.index) for name, _ in pulled_now)
            versions = dict(zip([name for name, _ in pulled_now], pull.versions[:]))
            out.versions.update(versions)
            client.versions.update(versions)
        for nth, rows in enumerate(asked):
            values = from_frame(frames[dense_frames + nth], torch.float32,
                                (rows.ids.size, pull_rows[nth].dim), f"rows of {rows.key!r}")
            got.setdefault(rows.key, []).append((rows, values))
        if marks:
            _states(out.states, marks, counts, asked, pull_rows,
                    frames[dense_frames + len(asked):])
    for table, parts in got.items():
        if len(parts) == 1 and parts[0][0].positions is None:
            out.rows[table] = parts[0][1].clone()
            continue
        merged = torch.empty(sizes[table], parts[0][1].shape[1])
        for rows, values in parts:  # a compiled copy: index_copy_'s cost is mostly its own
            jit.place_rows(merged.numpy(), rows.at(), values.numpy())
        out.rows[table] = merged
    return out


def _states(states: dict, marks: dict, counts: dict, asked, answers, frames) -> None:
    """Place one PS's state frames (one per marked row pull) into `states` (table -> [m, dim]
    over every marked id of the call, in their order; `counts`: table -> m)."""
    frames = iter(frames)
    for rows, answer in zip(asked, answers):
        mask = marks.get(rows.key)
        if mask is None:
            continue
        if rows.positions is None:  # the whole list from one PS
            states[rows.key] = from_frame(next(frames), torch.float32,
                                          (counts[rows.key], answer.dim),
                                          f"state of {rows.key!r}").clone()
            continue
        whole = states.get(rows.key)
        if whole is None:
            whole = states[rows.key] = torch.empty(counts[rows.key], answer.dim)
        buf = buffer_of(next(frames))
        got = np.frombuffer(buf, np.float32, buf.nbytes // 4)  # a ragged tail is refused below
        if buf.nbytes % 4 or place_marked(mask, rows.positions, got, whole.numpy()) != got.size:
            raise PSError("INTERNAL", Reason.INTERNAL, f"state of {rows.key!r}: {got.size} "
                          f"floats, not those of the rows marked there (dim {answer.dim})")


class PendingStep:
    """A Step sent and not answered yet (`begin_step`)."""

    def __init__(self, client, call, *context):
        self._client = client
        self._call = call  # a reroute.RoutedCall; None: nothing was sent
        self._context = context

    def arrived(self) -> bool:
        """Whether `result` would return without waiting (reroute.RoutedCall.arrived)."""
        return self._call is None or self._call.arrived()

    def result(self) -> StepOutcome:
        result = None if self._call is None else self._call.wait()
        return _step_outcome(self._client, result, *self._context)
