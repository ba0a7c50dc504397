"""A data-plane client of a set of PS: routed by the slot layout, parallel, retried, at-most-once
pushes.

`DataClient` speaks the data plane to every PS of a job (one connection each: ZeroMQ over TCP,
or the PS's same-host socket). It places a dense tensor on the PS index that owns the slot its
name hashes to and each embedding row on the owner of its id's slot (`pswire.slots`: the layout
from the master's `ListPS`; with explicit endpoints and no master, `Layout.initial(len(
endpoints))`, version 0, as a PS started without a master owns), sends the parts to all PS at
once and waits for the answers with a bounded poll. The layout is read when the client is made
and again only when a PS says it changed; a tensor's owner is cached per layout.

The request path, one module each:

    DataClient (this module)        the API: pull, push, rows, init_parameters, step
      -> Router (router.py)         the layout, each tensor's PS, the split of a call
      -> RoutedCall (reroute.py)    sends, collects, and does what CallRetry decides
           CallRetry (retry.py)     what every answer means: the one retry owner
      -> Exchange (exchange.py)     one pswire.connection.Connection per PS index, its route
      -> Transport (pswire)         ZmqTransport (TCP) or SameHostTransport (a Unix socket)

The rules `CallRetry` keeps: a PS that does not answer within `timeout_s` (it died, restarted,
or the reply was lost) gets its connection closed and the same request again (same client_id
and seq, so a push is applied at most once) after a bounded exponential backoff, to the PS's
current address (asked from the master again when the client was given one), for at most
`retry.total_s` seconds from the call's start (and `max_attempts` tries); then `PSUnavailable`,
whose message names the PS, its address and how long it was tried. A PS that answers
UNAVAILABLE (it is shutting down) is retried the same way. A call that needed retries and then
got its answer logs one line saying so. Any other refusal raises `PSError` with the PS's code,
reason and message; a stale push raises `StaleGradient` (pull again, recompute).

While the PS set is resized, slots move between PS. A PS refuses a part touching a slot it no
longer owns, applying nothing, with reason `WRONG_OWNER`; once every part of the call has its
answer, the client reads a layout at least as new as the PS's from the master and sends that
part, split by it, with a fresh seq; a refusal flagged duplicate (the PS applied this seq before
the slot left) gets only its reads sent again (worker_sdk/ps/reroute.py). Writes to a slot
being handed over are answered `SLOT_MOVING` and retried with the same seq after a short
backoff (15 ms doubling to 100 ms) that spends none of the `max_attempts` tries. Without a
master, `WRONG_OWNER` is a `PSError`.

A push split over several PS is all-or-nothing under `--max-staleness`: when a PS it goes to
checks staleness, every such PS first checks the push's versions without applying anything
(`Push.check_only`); only when all passed is the push sent, marked `checked`, and applied
without a second refusal. So a `StaleGradient` means no PS applied any part of the step.

Sparse gradients (`nn.Embedding(sparse=True)`, `nn.EmbeddingBag(sparse=True)`) are coalesced
and pushed as dense tensors of the parameter's shape (ElasticEmbedding pushes only rows).

With PS replicas (`--ps-replicas` on the master) each index has a primary and a generation
(ListPS). Requests carry the generation they were routed by; a request that has waited
`REROUTE_AFTER_S` without an answer makes the client ask the master (at most every
`REROUTE_AFTER_S`) whether that index's generation changed, and if so it goes to the new
primary at once with the same (client_id, seq): a push the old primary applied and forwarded
is answered as a duplicate there, one it never forwarded is applied there, so either way once.
A PS that is not the primary answers UNAVAILABLE with reason FENCED, which is retried the same
way.

A PS on the same machine is reached over its same-host socket (a Unix stream socket,
`pswire.samehost`) once it has announced one that this machine can see (`same_host`, on by
default; a PS under TLS serves none). If that socket ever fails to answer, the client goes back
to TCP.

Tensors go out as frames over the tensors' own memory (no copy): do not change a gradient
while `push` runs. Pulled tensors are views of the received frames (no copy).

A client is not thread-safe: give each thread its own (each gets its own client_id).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from protos import ps_pb2
from pswire import partition
from pswire.frames import Decoder, as_buffer, decode, frames_of, from_frame, meta_of
from pswire.optimizers import config_to_pb, make_config
from pswire.tables import TableSpec, spec_to_pb
from rpckit.errors import Reason

from . import reroute, restarts, steps
from .exchange import RETRY_BUDGET_S, Exchange
from .ids import prepared
from .outcomes import PushOutcome, StaleGradient, StepOutcome, dense_grad
from .parts import Part, Rows
from .restarts import Declaration
from .router import Router
# re-exported: callers import the data plane's errors and lookups from here
from .routes import (PSError, PSUnavailable, Route,  # noqa: F401
                     master_data_plane, master_endpoints, master_routes)

__all__ = ["DataClient", "PushOutcome", "StaleGradient", "StepOutcome",
           "PSError", "PSUnavailable", "Route", "RETRY_BUDGET_S", "master_data_plane",
           "master_endpoints", "master_routes"]


class DataClient:
    def __init__(self, endpoints: Sequence[str] | None = None, **options):
        """endpoints (tcp://host:port per PS) or master=: where the PS set is; the other
        options (timeouts, retries, TLS and token, server keys) are `Exchange`'s
        (worker_sdk/ps/exchange.py), which sends this client's requests."""
        self.exchange = Exchange(endpoints, **options)
        # where calls go (the layout, each dense tensor's PS): all that steps and reroute see
        self.router = Router(self.exchange)
        self.versions: dict[str, int] = {}    # versions of the last pull, per tensor
        # PS index -> whether it refuses stale pushes (learnt from init and pull answers);
        # a PS not heard from yet is assumed to (a push then checks first: see `push`)
        self.staleness_checked: dict[int, bool] = {}
        self.decoder = Decoder()  # the pulled metas of each PS, checked once while they repeat
        # what init_parameters declared, to declare again on a PS that restarted empty
        # (worker_sdk/ps/restarts.py); a PSClient shares one among its clients
        self.declaration = Declaration()

    @property
    def client_id(self) -> str:
        return self.exchange.client_id

    @property
    def num_ps(self) -> int:
        return self.exchange.num_ps

    @property
    def endpoints(self) -> list[str]:
        """The registered (TCP) data address of each PS."""
        return self.exchange.endpoints

    @property
    def transports(self) -> list[str]:
        """The endpoint each PS is reached at now (its same-host socket, or TCP)."""
        return self.exchange.transports

    @property
    def generations(self) -> list[int]:
        """The PS generation each index's requests go to (0: not replicated)."""
        return self.exchange.generations

    def close(self) -> None:
        self.exchange.close()

    def __enter__(self) -> "DataClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def owner(self) -> dict[str, int]:
        """The declared dense tensors -> their PS index under the layout routed by."""
        return self.router.owner

    @owner.setter
    def owner(self, owner: dict[str, int]) -> None:
        self.router.owner = owner

    def next_seq(self) -> int:
        return self.exchange.next_seq()

    def begin(self, parts: dict[int, Part], op: reroute.Op) -> reroute.RoutedCall:
        """Send `parts` as `op` builds them; the returned call's `wait()` collects the answers
        (retrying and re-routing as worker_sdk/ps/retry.py decides). No other call of this
        client may come before that `wait()`: the answers come on its connections."""
        return reroute.RoutedCall(self.router, parts, op, self.declare_again)

    def _routed(self, parts: dict[int, Part], op: reroute.Op) -> reroute.Result:
        return self.begin(parts, op).wait()

    def step(self, grads=None, versions=None, rows=(), pull=None,
             pull_rows=None, marks=None) -> StepOutcome:
        """One training step's traffic, one message per PS: see `worker_sdk.ps.steps.step`."""
        return steps.step(self, grads, versions, rows, pull, pull_rows, marks)

    def begin_step(self, grads=None, versions=None, rows=(), pull=None,
                   pull_rows=None, marks=None) -> steps.PendingStep:
        """`step` in two halves: see `worker_sdk.ps.steps.begin_step`."""
        return steps.begin_step(self, grads, versions, rows, pull, pull_rows, marks)

    # -- the API ------------------------------------------------------------------------------

    def init_parameters(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple],
                        optimizer: str | dict = "sgd", tables: Iterable = (),
                        **hyperparameters) -> bool:
        """Send each PS its part of the model (by the slot layout), the optimizer (a torch.optim
        name and its hyperparameters) and the tables. True when this call initialized at least
        one PS; False when every PS already was (the first call wins)."""
        tensors = dict(tensors.items() if isinstance(tensors, Mapping) else tensors)
        cfg = make_config(optimizer, **hyperparameters) if isinstance(optimizer, str) \
            else dict(optimizer)
        self.set_layout({n: t.numel() * t.element_size() for n, t in tensors.items()})
        op = _Init(tensors, config_to_pb(cfg), [_table_pb(t) for t in tables])
        declared = self.declaration
        declared.optimizer, declared.tables = op.optimizer, op.tables
        if declared.values is None:  # a PSClient gives its model's current values instead
            declared.values = lambda: tensors
        # every PS gets the optimizer and the tables, whether or not it holds a tensor
        answers = self._routed(self.split(Part(push=list(tensors)), every=True), op)
        for a in answers.answers:
            self.versions.update(a.resp.init_parameters.versions)
            self.staleness_checked[a.index] = a.resp.init_parameters.staleness_checked
        return any(a.resp.init_parameters.initialized for a in answers.answers)

    def declare_again(self, indices: list[int], why: str) -> None:
        """The model declared again on PS that restarted empty (worker_sdk/ps/restarts.py)."""
        restarts.declare_again(self, indices, why, self._init_one)

    def _init_one(self, index: int, names: list[str], values: dict, declared) -> bool:
        op = _Init(values, declared.optimizer, declared.tables)
        result = self._routed({index: Part(push=names)}, op)
        return any(a.resp.init_parameters.initialized for a in result.answers)

    def set_layout(self, sizes: Mapping[str, int]) -> None:
        """Declare the model's tensors (name -> bytes), without talking to the PS: each is
        placed by the slot its name hashes to (sizes no longer matter)."""
        self.router.set_layout(sizes)

    def tensor_owner(self, name: str) -> int:
        """The PS index that holds tensor `name` under the layout routed by now."""
        return self.router.tensor_owner(name)

    def split(self, part: Part, every: bool = False) -> dict[int, Part]:
        """A call's content by the PS that own it now (`router.Router.split`)."""
        return self.router.split(part, every)

    def pull(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Tensors by name (all of every PS when `names` is None), as views of the received
        frames; remembers their versions for the next push."""
        if names is None:
            whole = Part(pull_all=True)
        else:
            whole = Part(pull=self.router.known(names, "pull"))
        out: dict[str, torch.Tensor] = {}
        for a in self._routed(self.split(whole), _Pull()).answers:
            resp, frames, index = a.resp, a.frames, a.index
            self.staleness_checked[index] = resp.pull.staleness_checked
            metas = resp.pull.tensors
            if len(frames) != frames_of(len(metas), resp.pull.packed_count):
                raise PSError("INTERNAL", Reason.INTERNAL, f"PS {index} answered {len(metas)} "
                              f"tensors ({resp.pull.packed_count} packed) with "
                              f"{len(frames)} frames")
            out.update(decode(metas, frames, resp.pull.packed_count)[0])
            for meta, version in zip(metas, resp.pull.versions):
                self.versions[meta.name] = version
                self.owner.setdefault(meta.name, index)
        return out

    def push(self, grads: Mapping[str, torch.Tensor],
             versions: Mapping[str, int] | None = None) -> PushOutcome:
        """Apply gradients on their PS. `versions` default to those of the last pull. Raises
        StaleGradient when a PS refused them as too stale; then no PS applied any of them."""
        versions = self.versions if versions is None else versions
        grads = {name: dense_grad(g) for name, g in grads.items()}
        names = self.router.known(grads, "push")
        op = _Push(self, grads, versions)
        if self.needs_check(names):
            # phase one: every PS checks the versions, nothing is applied anywhere yet
            self.check_push(grads, versions, names)
            op.checked = True
        return self.answer_push(self._routed(self.split(Part(push=names)), op))

    def needs_check(self, names: Iterable[str], rows: bool = False) -> bool:
        """Whether a push of `names` (and, with `rows`, row gradients too) goes to more than
        one PS that may refuse it as stale: then it is checked everywhere first."""
        owners = {self.tensor_owner(n) for n in names}
        return bool(owners) and (len(owners) > 1 or rows) and any(
            self.staleness_checked.get(i, True) for i in owners)

    def check_push(self, grads, versions, names) -> None:
        """Staleness checked by every PS the push goes to, nothing applied (Push.check_only);
        raises StaleGradient when one refuses."""
        self.answer_push(self._routed(self.split(Part(push=list(names))),
                                      _Push(self, grads, versions, check_only=True)))

    def answer_push(self, result: reroute.Result) -> PushOutcome:
        outcome = PushOutcome(duplicate=bool(result.applied_before))
        stale = []
        for a in result.answers:
            resp = a.resp
            outcome.versions.update(resp.push.versions)
            outcome.max_staleness = max(outcome.max_staleness, resp.push.max_staleness)
            outcome.duplicate |= resp.push.duplicate
            if resp.code != 0:
                stale.append(f"PS {a.index}: {resp.message}")
        if stale:
            raise StaleGradient("; ".join(stale), outcome.versions)
        return outcome

    def pull_rows(self, table: str, ids) -> torch.Tensor:
        """Rows [len(ids), dim] of an embedding table (rows are created on first use)."""
        ids, memo = prepared(ids)
        if not ids.size:
            return torch.empty(0, 0)
        whole = Part(pull_rows=[Rows(table, ids, memo=memo)])
        answers = self._routed(self.split(whole), _PullRows()).answers
        got = [(a.part.pull_rows[0], _rows(a.resp, a.frames, a.part.pull_rows[0].ids.size))
               for a in answers]
        if len(got) == 1 and got[0][0].positions is None:
            return got[0][1]
        out = torch.empty(ids.size, got[0][1].shape[1])
        for rows, values in got:
            out.index_copy_(0, torch.from_numpy(rows.at()), values)
        return out

    def push_rows(self, table: str, ids, grads: torch.Tensor) -> int:
        """Apply row gradients [len(ids), dim] (duplicate ids are summed); returns the number
        of distinct rows updated."""
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
        partition.check_row_ids(ids)
        grads = grads.detach().to(torch.float32).contiguous()
        if not ids.numel():
            return 0
        parts = self.split(Part(rows=[Rows(0, ids.numpy())]))
        result = self._routed(parts, _PushRows(table, grads))
        return sum(a.resp.push_rows.rows for a in result.answers)


class _Init(reroute.Op):
    def __init__(self, tensors, optimizer, tables):
        self.tensors, self.optimizer, self.tables = tensors, optimizer, tables

    def build(self, index, part):
        body = ps_pb2.InitParameters(optimizer=self.optimizer, tables=self.tables)
        frames = []
        for name in sorted(part.push):
            body.tensors.append(meta_of(name, self.tensors[name]))
            frames.append(as_buffer(self.tensors[name]))
        return ps_pb2.DataRequest(init_parameters=body), frames


class _Pull(reroute.Op):
    def build(self, index, part):
        # pull_all: no names, so the PS answers every tensor it holds
        return ps_pb2.DataRequest(pull=ps_pb2.Pull(names=part.pull, packed=True)), []


class _Push(reroute.Op):
    allow = (Reason.STALE_GRADIENT,)

    def __init__(self, client, grads, versions, check_only=False):
        self.client, self.grads, self.versions = client, grads, versions
        self.check_only, self.checked = check_only, False

    def build(self, index, part):
        body = ps_pb2.Push(versions=[int(self.versions.get(n, 0)) for n in part.push],
                           check_only=self.check_only, checked=self.checked)
        frames = []
        for name in part.push:
            body.tensors.append(meta_of(name, self.grads[name]))
            if not self.check_only:
                frames.append(as_buffer(self.grads[name]))
        return ps_pb2.DataRequest(push=body), frames

    def prepare(self, parts):
        # a push that went to one PS unchecked and now spans several is checked first, so a
        # stale refusal still means that no PS applied any of it
        names = [n for p in parts.values() for n in p.push]
        if not (self.check_only or self.checked) and self.client.needs_check(names):
            self.client.check_push(self.grads, self.versions, names)
            self.checked = True


class _PullRows(reroute.Op):
    def build(self, index, part):
        (rows,) = part.pull_rows
        return (ps_pb2.DataRequest(pull_rows=ps_pb2.PullRows(table=rows.key)),
                [rows.ids.view(np.uint8)])


class _PushRows(reroute.Op):
    def __init__(self, table, grads):
        self.table, self.grads = table, grads

    def build(self, index, part):
        (rows,) = part.rows
        g = self.grads if rows.positions is None else \
            self.grads.index_select(0, torch.from_numpy(rows.positions))
        return (ps_pb2.DataRequest(push_rows=ps_pb2.PushRows(table=self.table)),
                [rows.ids.view(np.uint8), as_buffer(g)])


def _rows(resp: ps_pb2.DataResponse, frames: list, n: int) -> torch.Tensor:
    dim = resp.pull_rows.dim
    if len(frames) != 1:
        raise PSError("INTERNAL", Reason.INTERNAL, f"PullRows answer has {len(frames)} frames, expected 1")
    return from_frame(frames[0], torch.float32, (n, dim), "rows")


def _table_pb(t) -> ps_pb2.TableSpec:
    if isinstance(t, ps_pb2.TableSpec):
        return t
    cfg = None
    if isinstance(t, tuple):
        t, cfg = t
    if isinstance(t, Mapping):
        t = dict(t)
        cfg = t.pop("optimizer", cfg)
        t = TableSpec(**t)
    msg = spec_to_pb(t)
    if cfg:
        msg.optimizer.CopyFrom(config_to_pb(cfg))
    return msg
