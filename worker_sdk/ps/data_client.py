"""A data-plane client of a set of PS: partitioned, parallel, retried, at-most-once pushes.

`DataClient` speaks the ZeroMQ data plane to every PS of a job (one DEALER socket each). It
splits tensors and embedding ids with `pswire.partition`, sends the parts to all PS at once and
waits for the answers with a bounded poll. A PS that does not answer within `timeout_s` (it
died, restarted, or the reply was lost) gets its socket closed and the same request again
(same client_id and seq, so a push is applied at most once) after a bounded exponential
backoff, to the PS's current address (asked from the master again when the client was given
one), for at most `retry.total_s` seconds in all (and `max_attempts` tries); then
`PSUnavailable`, whose message names the PS, its address and how long it was tried. A PS that
answers UNAVAILABLE (it is shutting down) is retried the same way. A call that needed retries
and then got its answer logs one line saying so. Any other refusal raises `PSError` with the
PS's code, reason and message; a stale push raises `StaleGradient` (pull again, recompute).

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

A PS on the same machine is reached over its Unix socket (ZeroMQ ipc://) once it has announced
one that this machine can see (`prefer_local`, on by default): about twice TCP's throughput on
127.0.0.1. If that socket ever fails to answer, the client goes back to TCP.

Tensors go out as frames over the tensors' own memory (no copy): do not change a gradient
while `push` runs. Pulled tensors are views of the received frames (no copy).

A client is not thread-safe: give each thread its own (each gets its own client_id).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from protos import ps_pb2
from pswire import partition
from pswire.frames import as_buffer, decode, frames_of, from_frame, meta_of
from pswire.optimizers import config_to_pb, make_config
from pswire.tables import TableSpec
from rpckit.errors import Reason

from . import steps
from .exchange import RETRY_BUDGET_S, Exchange, PendingCall
from .outcomes import PushOutcome, StaleGradient, StepOutcome, dense_grad
# re-exported: callers import the data plane's errors and lookups from here
from .routes import (PSError, PSUnavailable, Route,  # noqa: F401
                     master_data_plane, master_endpoints, master_routes)

__all__ = ["DataClient", "PendingCall", "PushOutcome", "StaleGradient", "StepOutcome",
           "PSError", "PSUnavailable", "Route", "RETRY_BUDGET_S", "master_data_plane",
           "master_endpoints", "master_routes"]


class DataClient:
    def __init__(self, endpoints: Sequence[str] | None = None, **options):
        """endpoints (tcp://host:port per PS) or master=: where the PS set is; the other
        options (timeouts, retries, TLS and token, server keys) are `Exchange`'s
        (worker_sdk/ps/exchange.py), which sends this client's requests."""
        self.exchange = Exchange(endpoints, **options)
        self.owner: dict[str, int] = {}       # dense tensor name -> PS index
        self.versions: dict[str, int] = {}    # versions of the last pull, per tensor
        # PS index -> whether it refuses stale pushes (learnt from init and pull answers);
        # a PS not heard from yet is assumed to (a push then checks first: see `push`)
        self.staleness_checked: dict[int, bool] = {}

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

    def next_seq(self) -> int:
        return self.exchange.next_seq()

    def _call(self, requests, allow: tuple[Reason, ...] = ()) -> dict:
        return self.exchange.call(requests, allow)

    def begin_call(self, requests, allow: tuple[Reason, ...] = ()) -> PendingCall:
        """Send now, collect later: see `Exchange.begin_call`."""
        return self.exchange.begin_call(requests, allow)

    def step(self, grads=None, versions=None, rows=(), pull=None,
             pull_rows=None) -> StepOutcome:
        """One training step's traffic, one message per PS: see `worker_sdk.ps.steps.step`."""
        return steps.step(self, grads, versions, rows, pull, pull_rows)

    def begin_step(self, grads=None, versions=None, rows=(), pull=None,
                   pull_rows=None) -> steps.PendingStep:
        """`step` in two halves: see `worker_sdk.ps.steps.begin_step`."""
        return steps.begin_step(self, grads, versions, rows, pull, pull_rows)

    # -- the API ------------------------------------------------------------------------------

    def init_parameters(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple],
                        optimizer: str | dict = "sgd", tables: Iterable = (),
                        **hyperparameters) -> bool:
        """Send each PS its part of the model (by `pswire.partition`), the optimizer (a torch.optim
        name and its hyperparameters) and the tables. True when this call initialized at least
        one PS; False when every PS already was (the first call wins)."""
        tensors = dict(tensors.items() if isinstance(tensors, Mapping) else tensors)
        cfg = make_config(optimizer, **hyperparameters) if isinstance(optimizer, str) \
            else dict(optimizer)
        self.set_layout({n: t.numel() * t.element_size() for n, t in tensors.items()})
        table_pbs = [_table_pb(t) for t in tables]
        requests = {}
        for index in range(self.num_ps):
            body = ps_pb2.InitParameters(optimizer=config_to_pb(cfg), tables=table_pbs)
            frames = []
            for name in sorted(n for n, i in self.owner.items() if i == index):
                body.tensors.append(meta_of(name, tensors[name]))
                frames.append(as_buffer(tensors[name]))
            requests[index] = (ps_pb2.DataRequest(init_parameters=body), frames)
        answers = self._call(requests)
        for index, (resp, _) in answers.items():
            self.versions.update(resp.init_parameters.versions)
            self.staleness_checked[index] = resp.init_parameters.staleness_checked
        return any(resp.init_parameters.initialized for resp, _ in answers.values())

    def set_layout(self, sizes: Mapping[str, int]) -> None:
        """Place tensors (name -> bytes) on PS by the shared rule, without talking to them."""
        self.owner = partition.place_dense(sizes, self.num_ps)

    def pull(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Tensors by name (all of every PS when `names` is None), as views of the received
        frames; remembers their versions for the next push."""
        if names is None:
            groups = {i: [] for i in range(self.num_ps)}
        else:
            groups = self._group(names, "pull")
        requests = {i: (ps_pb2.DataRequest(pull=ps_pb2.Pull(names=n, packed=True)), [])
                    for i, n in groups.items()}
        out: dict[str, torch.Tensor] = {}
        for index, (resp, frames) in self._call(requests).items():
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
        groups = self._group(grads, "push")
        checked = False
        if len(groups) > 1 and any(self.staleness_checked.get(i, True) for i in groups):
            # phase one: every PS checks the versions, nothing is applied anywhere yet
            self._answer_push(self._push_requests(grads, versions, groups, check_only=True))
            checked = True
        return self._answer_push(self._push_requests(grads, versions, groups, checked=checked))

    def _push_requests(self, grads, versions, groups, check_only=False, checked=False) -> dict:
        requests = {}
        for index, names in groups.items():
            body = ps_pb2.Push(versions=[int(versions.get(n, 0)) for n in names],
                               check_only=check_only, checked=checked)
            frames = []
            for name in names:
                body.tensors.append(meta_of(name, grads[name]))
                if not check_only:
                    frames.append(as_buffer(grads[name]))
            requests[index] = (ps_pb2.DataRequest(push=body), frames)
        return requests

    def _answer_push(self, requests) -> PushOutcome:
        outcome = PushOutcome()
        stale = []
        for index, (resp, _) in self._call(requests, allow=(Reason.STALE_GRADIENT,)).items():
            outcome.versions.update(resp.push.versions)
            outcome.max_staleness = max(outcome.max_staleness, resp.push.max_staleness)
            outcome.duplicate |= resp.push.duplicate
            if resp.code != 0:
                stale.append(f"PS {index}: {resp.message}")
        if stale:
            raise StaleGradient("; ".join(stale), outcome.versions)
        return outcome

    def pull_rows(self, table: str, ids) -> torch.Tensor:
        """Rows [len(ids), dim] of an embedding table (rows are created on first use)."""
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
        parts = [(i, pos, sub) for i, (pos, sub) in
                 enumerate(partition.split_rows(ids, self.num_ps)) if sub.numel()]
        if not parts:
            return torch.empty(0, 0)
        requests = {i: (ps_pb2.DataRequest(pull_rows=ps_pb2.PullRows(table=table)),
                        [as_buffer(sub)]) for i, _, sub in parts}
        answers = self._call(requests)
        if len(parts) == 1:
            i = parts[0][0]
            resp, frames = answers[i]
            return _rows(resp, frames, ids.numel())
        dim = answers[parts[0][0]][0].pull_rows.dim
        out = torch.empty(ids.numel(), dim)
        for i, pos, sub in parts:
            resp, frames = answers[i]
            out.index_copy_(0, pos, _rows(resp, frames, sub.numel()))
        return out

    def push_rows(self, table: str, ids, grads: torch.Tensor) -> int:
        """Apply row gradients [len(ids), dim] (duplicate ids are summed); returns the number
        of distinct rows updated."""
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1).contiguous()
        grads = grads.detach().to(torch.float32).contiguous()
        requests = {}
        for i, (pos, sub) in enumerate(partition.split_rows(ids, self.num_ps)):
            if not sub.numel():
                continue
            g = grads if self.num_ps == 1 else grads.index_select(0, pos)
            requests[i] = (ps_pb2.DataRequest(push_rows=ps_pb2.PushRows(table=table)),
                           [as_buffer(sub), as_buffer(g)])
        if not requests:
            return 0
        return sum(resp.push_rows.rows for resp, _ in self._call(requests).values())

    # -- plumbing -----------------------------------------------------------------------------

    def _group(self, names: Iterable[str], call: str) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for name in names:
            index = self.owner.get(name)
            if index is None:
                raise KeyError(
                    f"{call} of tensor {name!r}: this client does not know which PS holds it "
                    "yet; declare the model first: PSClient.init_parameters(model) (or "
                    "PSClient.attach(model) in a process that only reads it; on a DataClient: "
                    "init_parameters or set_layout)")
            groups.setdefault(index, []).append(name)
        return groups


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
    msg = ps_pb2.TableSpec(name=t.name, dim=t.dim, initializer=t.initializer, init_a=t.init_a,
                           init_b=t.init_b, seed=t.seed, num_embeddings=t.num_embeddings,
                           max_rows=t.max_rows, admit_after=t.admit_after, ttl_s=t.ttl_s,
                           ttl_steps=t.ttl_steps, evict=t.evict)
    if cfg:
        msg.optimizer.CopyFrom(config_to_pb(cfg))
    return msg
