"""`DataClient.step`: one training step's traffic to each PS in one message.

A step of a small model costs more in requests than in bytes: pushing the dense gradients,
pushing the row gradients, pulling the next dense parameters and pulling the next rows are
four requests to every PS, each a message each way and a wake-up of both sides. `step` sends
each PS one `Step` (protos/ps.proto) with all of it, in parallel, retried as one request (same
client_id and seq: its mutations are applied at most once, its reads are served again).

On one PS the mutations are all-or-none (ps/steps.py). Over several PS, under
`--max-staleness`, the dense push is first checked everywhere without applying anything
(`Push.check_only`, as `push` does), so a `StaleGradient` still means that no PS applied any
part of the step.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from protos import ps_pb2
from pswire import partition
from pswire.frames import as_buffer, decode, frames_of, from_frame, meta_of, pack, packing
from rpckit.errors import Reason

from .outcomes import PushOutcome, StaleGradient, StepOutcome, dense_grad
from .routes import PSError


def step(client, grads: Mapping[str, torch.Tensor] | None = None,
         versions: Mapping[str, int] | None = None,
         rows: Sequence[tuple[str, torch.Tensor, torch.Tensor]] = (),
         pull: Sequence[str] | None = None,
         pull_rows: Mapping[str, torch.Tensor] | None = None) -> StepOutcome:
    """Push `grads` (name -> gradient, computed from `versions`, default those of the last
    pull) and `rows` ((table, ids, row gradients)), then pull the tensors `pull` and the
    rows of `pull_rows` (table -> 1-D ids), every PS in one message. Raises
    StaleGradient when a PS refused the push as too stale: then no PS applied any of the
    step's mutations, and nothing was read."""
    return begin_step(client, grads, versions, rows, pull, pull_rows).result()

def begin_step(client, grads: Mapping[str, torch.Tensor] | None = None,
               versions: Mapping[str, int] | None = None,
               rows: Sequence[tuple[str, torch.Tensor, torch.Tensor]] = (),
               pull: Sequence[str] | None = None,
               pull_rows: Mapping[str, torch.Tensor] | None = None) -> "PendingStep":
    """`step` in two halves: this sends the Step and returns; `result()` of what it returns
    waits for the answers (and raises what `step` raises). No other call of this client
    may come before that `result()`. Do not change the gradients before it either: they
    are sent from their own memory."""
    versions = client.versions if versions is None else versions
    grads = {n: dense_grad(g) for n, g in grads.items()} if grads else None
    requests: dict[int, tuple[ps_pb2.DataRequest, list]] = {}

    def body(index: int) -> tuple[ps_pb2.Step, list]:
        if index not in requests:
            requests[index] = (ps_pb2.DataRequest(step=ps_pb2.Step()), [[], [], []])
        req, frames = requests[index]
        return req.step, frames

    push_groups = client._group(grads, "push") if grads else {}
    # Over several PS (the dense push split, or rows going elsewhere) a PS that checks
    # staleness checks first, applying nothing anywhere yet (as DataClient.push does); alone,
    # a PS refuses the whole step itclient.
    checked = bool(grads) and (len(push_groups) > 1 or bool(rows)) and any(
        client.staleness_checked.get(i, True) for i in push_groups)
    if checked:
        client._answer_push(client._push_requests(grads, versions, push_groups,
                                              check_only=True))
    for index, names in push_groups.items():
        step, frames = body(index)
        step.push.SetInParent()
        step.push.checked = checked
        packed, alone = packing([grads[n] for n in names])
        if packed:  # the small gradients as one frame (pswire.frames)
            step.push.packed_count = len(packed)
            frames[0].append(as_buffer(pack([grads[names[i]] for i in packed])))
        for i in packed + alone:
            name = names[i]
            step.push.tensors.append(meta_of(name, grads[name]))
            step.push.versions.append(int(versions.get(name, 0)))
        frames[0] += [as_buffer(grads[names[i]]) for i in alone]
    for table, ids, grad in rows:
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
        grad = grad.detach().to(torch.float32).contiguous()
        for index, (pos, sub) in enumerate(partition.split_rows(ids, client.num_ps)):
            if sub.numel():
                step, frames = body(index)
                step.push_rows.add(table=table)
                g = grad if client.num_ps == 1 else grad.index_select(0, pos)
                frames[1] += [as_buffer(sub), as_buffer(g)]
    if pull is not None:
        for index, names in client._group(pull, "pull").items():
            step = body(index)[0]
            step.pull.names.extend(names)
            step.pull.packed = True
    wanted: dict[str, list[tuple[int, torch.Tensor, int]]] = {}  # table -> (PS, pos, nth)
    sizes = {}
    for table, ids in (pull_rows or {}).items():
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
        sizes[table] = ids.numel()
        for index, (pos, sub) in enumerate(partition.split_rows(ids, client.num_ps)):
            if sub.numel():
                step, frames = body(index)
                wanted.setdefault(table, []).append((index, pos, len(step.pull_rows)))
                step.pull_rows.add(table=table)
                frames[2].append(as_buffer(sub))
    if not requests:
        return PendingStep(client, None, grads, push_groups, pull, wanted, sizes)
    calls = {i: (req, [*f[0], *f[1], *f[2]]) for i, (req, f) in requests.items()}
    pending = client.begin_call(calls, allow=(Reason.STALE_GRADIENT,))
    return PendingStep(client, pending, grads, push_groups, pull, wanted, sizes)


def _step_outcome(client, answers, grads, push_groups, pull, wanted, sizes) -> StepOutcome:
    if answers is None:
        return StepOutcome(dense={} if pull is not None else None)
    out = StepOutcome(push=PushOutcome() if grads else None)
    stale = []
    for index, (resp, frames) in answers.items():
        result = resp.step
        if resp.code != 0:
            stale.append(f"PS {index}: {resp.message}")
        if out.push is not None and index in push_groups:
            out.push.versions.update(result.push.versions)
            out.push.max_staleness = max(out.push.max_staleness, result.push.max_staleness)
            out.push.duplicate |= result.push.duplicate
        out.duplicate |= result.push.duplicate
        out.rows_updated += sum(r.rows for r in result.push_rows)
    if stale:
        raise StaleGradient("; ".join(stale), out.push.versions if out.push else {})
    if pull is not None:
        out.dense = {}
    row_frames: dict[int, list] = {}
    for index, (resp, frames) in answers.items():
        result = resp.step
        if result.HasField("pull"):
            client.staleness_checked[index] = result.pull.staleness_checked
        metas = result.pull.tensors
        dense_frames = frames_of(len(metas), result.pull.packed_count)
        if len(frames) != dense_frames + len(result.pull_rows):
            raise PSError("INTERNAL", Reason.INTERNAL, f"PS {index} answered a Step with "
                          f"{len(frames)} frames for {len(metas)} tensors "
                          f"({result.pull.packed_count} packed) and "
                          f"{len(result.pull_rows)} row pulls")
        if metas:
            pulled, _ = decode(metas, frames[:dense_frames], result.pull.packed_count)
            out.dense.update(pulled)
            versions = dict(zip((m.name for m in metas), result.pull.versions))
            out.versions.update(versions)
            client.versions.update(versions)
        row_frames[index] = frames[dense_frames:]
    for table, parts in wanted.items():
        dim = answers[parts[0][0]][0].step.pull_rows[parts[0][2]].dim
        got = [(pos, from_frame(row_frames[i][nth], torch.float32, (pos.numel(), dim),
                                f"rows of {table!r}")) for i, pos, nth in parts]
        if len(got) == 1 and got[0][0].numel() == sizes[table]:
            out.rows[table] = got[0][1].clone()
            continue
        merged = torch.empty(sizes[table], dim)
        for pos, values in got:
            merged.index_copy_(0, pos, values)
        out.rows[table] = merged
    return out


class PendingStep:
    """A Step sent and not answered yet (`begin_step`)."""

    def __init__(self, client, pending, *context):
        self._client = client
        self._pending = pending  # an exchange.PendingCall; None: nothing was sent
        self._context = context

    def result(self) -> StepOutcome:
        answers = None if self._pending is None else self._pending.wait()
        return _step_outcome(self._client, answers, *self._context)
