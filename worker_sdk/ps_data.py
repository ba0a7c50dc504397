"""A data-plane client of a set of PS: partitioned, parallel, retried, at-most-once pushes.

`DataClient` speaks the ZeroMQ data plane to every PS of a job (one DEALER socket each). It
splits tensors and embedding ids with `ps.partition`, sends the parts to all PS at once and
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

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import torch
import zmq

from protos import ps_pb2

from ps import partition

from ps.embedding import TableSpec
from ps.optim import config_to_pb, make_config
from ps.wire import as_buffer, check_meta, code_name, from_frame, meta_of
from rpckit import auth
from rpckit.errors import Reason, ServiceError
from rpckit.retry import RETRYABLE, Backoff, RetryPolicy

from . import metrics, notice
# re-exported: callers import the data plane's errors and lookups from here
from .ps_routes import (PSError, PSUnavailable, Route, _Connection,  # noqa: F401
                        master_data_plane, master_endpoints, master_routes)
from .ps_steps import StepCalls, StepOutcome  # noqa: F401

log = logging.getLogger(__name__)

_RETRY_CODES = frozenset(code.name for code in RETRYABLE)
REROUTE_AFTER_S = 0.3  # an unanswered request this old asks the master for a new primary


class StaleGradient(ServiceError):
    """A push was refused for staleness (--max-staleness): pull again and recompute."""

    def __init__(self, message: str, versions: dict[str, int]):
        super().__init__("FAILED_PRECONDITION", Reason.STALE_GRADIENT, message)
        self.versions = versions


@dataclass
class PushOutcome:
    versions: dict[str, int] = field(default_factory=dict)  # after the push, per tensor
    max_staleness: int = 0
    duplicate: bool = False  # a retry found the push already applied


RETRY_BUDGET_S = 30.0  # how long one call keeps retrying a PS that does not answer


class PendingCall:
    """A call whose requests are sent and whose answers are not collected yet
    (`DataClient.begin_call`)."""

    def __init__(self, exchange):
        self._exchange = exchange
        self._result = None
        self._error: BaseException | None = None
        self._done = False

    def wait(self) -> dict[int, tuple[ps_pb2.DataResponse, list]]:
        """The answers (as `_call` returns them), waiting and retrying as `_call` does; raises
        what `_call` raises. Waiting again returns (or raises) the same."""
        if not self._done:
            try:
                next(self._exchange)
            except StopIteration as stop:
                self._result = stop.value
            except BaseException as exc:
                self._error = exc
            else:  # the exchange yields only once
                self._error = RuntimeError("a data-plane exchange yielded twice")
            finally:
                self._done = True
                self._exchange = None
        if self._error is not None:
            raise self._error
        return self._result


class DataClient(StepCalls):
    def __init__(self, endpoints: Sequence[str] | None = None, *, master: str | None = None,
                 client_id: str | None = None, timeout_s: float = 10.0, max_attempts: int = 8,
                 backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                 retry_budget_s: float = RETRY_BUDGET_S,
                 discovery_timeout_s: float = 30.0, context: zmq.Context | None = None,
                 prefer_local: bool = True, tls_ca: str | None = None,
                 auth_token: str | None = None, server_keys: Sequence[str] | None = None):
        """timeout_s: how long one try waits for an answer; a call gives up (PSUnavailable)
        after `retry_budget_s` seconds or `max_attempts` tries, whichever comes first.
        tls_ca, auth_token: for the master's ListPS and (the token) every data request;
        None: ELASTIC_PS_TLS_CA, ELASTIC_PS_AUTH_TOKEN(_FILE). server_keys: with `endpoints`,
        each PS's CURVE public key when its data plane is encrypted (GetPSStatus tells it);
        with `master`, they come from ListPS."""
        if (endpoints is None) == (master is None):
            raise ValueError("give either endpoints (tcp://host:port per PS) or master")
        notice.ensure_visible()  # waits and re-routes are logged at INFO
        metrics.maybe_serve()  # ELASTIC_PS_METRICS_PORT
        self.master = master
        # None: ELASTIC_PS_TLS_CA and ELASTIC_PS_AUTH_TOKEN(_FILE) (rpckit.auth)
        self._tls_ca, self._token = auth.client_options(tls_ca, auth_token)
        keys = list(server_keys) if server_keys is not None else [""] * len(endpoints or ())
        if endpoints is not None and len(keys) != len(endpoints):
            raise ValueError("give one server key per endpoint")
        self._stub = None  # a Master stub kept for re-routing (made on first use)
        self._given = [Route(e, k) for e, k in zip(endpoints, keys)] \
            if endpoints is not None else None
        self._discovery_timeout_s = discovery_timeout_s
        self.client_id = client_id or uuid.uuid4().hex
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.retry = RetryPolicy(initial_s=backoff_s, max_s=max_backoff_s,
                                 total_s=retry_budget_s, call_timeout_s=timeout_s)
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        found = self._resolve()
        # ephemeral: a CURVE client needs a key pair, but the PS trusts the token, not the key
        client_keys = zmq.curve_keypair() if any(r.data_public_key for r in found) else None
        self._conns = [_Connection(self.ctx, r.data_address, prefer_local, r.data_public_key,
                                   client_keys) for r in found]
        for conn, route in zip(self._conns, found):
            conn.generation = route.generation
        self._rerouted_at = 0.0
        if not self._conns:
            raise ValueError("no PS endpoints")
        self._seq = 0
        self.owner: dict[str, int] = {}       # dense tensor name -> PS index
        self.versions: dict[str, int] = {}    # versions of the last pull, per tensor
        # PS index -> whether it refuses stale pushes (learnt from init and pull answers);
        # a PS not heard from yet is assumed to (a push then checks first: see `push`)
        self.staleness_checked: dict[int, bool] = {}

    def _resolve(self) -> list[Route]:
        # a method, not a lambda over self: a client in a reference cycle is freed by the
        # garbage collector, whose finalizers find its sockets open and hang in zmq's term()
        if self._given is not None:
            return list(self._given)
        return master_routes(self.master, self._discovery_timeout_s,
                             stub=self._master_stub(), **self._lookup)

    @property
    def _lookup(self) -> dict:
        return {"tls_ca": self._tls_ca, "token": self._token}

    @property
    def num_ps(self) -> int:
        return len(self._conns)

    @property
    def endpoints(self) -> list[str]:
        """The registered (TCP) data address of each PS."""
        return [c.endpoint for c in self._conns]

    @property
    def transports(self) -> list[str]:
        """The endpoint each PS is reached at now (its same-host socket, or TCP)."""
        return [c.current for c in self._conns]

    def _master_stub(self):
        if self._stub is None:
            from protos import master_pb2_grpc
            from rpckit.channels import LeaderStub

            self._stub = LeaderStub(self.master, master_pb2_grpc.MasterStub, **self._lookup)
        return self._stub

    @property
    def generations(self) -> list[int]:
        """The PS generation each index's requests go to (0: not replicated)."""
        return [c.generation for c in self._conns]

    def close(self) -> None:
        if self._stub is not None:
            self._stub.close()
        for c in self._conns:
            c.reset()
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> "DataClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the API ------------------------------------------------------------------------------

    def init_parameters(self, tensors: Mapping[str, torch.Tensor] | Iterable[tuple],
                        optimizer: str | dict = "sgd", tables: Iterable = (),
                        **hyperparameters) -> bool:
        """Send each PS its part of the model (by `ps.partition`), the optimizer (a torch.optim
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
        requests = {i: (ps_pb2.DataRequest(pull=ps_pb2.Pull(names=n)), [])
                    for i, n in groups.items()}
        out: dict[str, torch.Tensor] = {}
        for index, (resp, frames) in self._call(requests).items():
            self.staleness_checked[index] = resp.pull.staleness_checked
            metas = resp.pull.tensors
            if len(frames) != len(metas):
                raise PSError("INTERNAL", Reason.INTERNAL, f"PS {index} answered {len(metas)} tensors with "
                              f"{len(frames)} frames")
            for meta, version, frame in zip(metas, resp.pull.versions, frames):
                dtype, shape, _ = check_meta(meta)
                out[meta.name] = from_frame(frame, dtype, shape, meta.name)
                self.versions[meta.name] = version
                self.owner.setdefault(meta.name, index)
        return out

    def push(self, grads: Mapping[str, torch.Tensor],
             versions: Mapping[str, int] | None = None) -> PushOutcome:
        """Apply gradients on their PS. `versions` default to those of the last pull. Raises
        StaleGradient when a PS refused them as too stale; then no PS applied any of them."""
        versions = self.versions if versions is None else versions
        grads = {name: _dense(g) for name, g in grads.items()}
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

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _call(self, requests: dict[int, tuple[ps_pb2.DataRequest, list]],
              allow: tuple[Reason, ...] = ()) -> dict[int, tuple[ps_pb2.DataResponse, list]]:
        """Send each PS its request (same seq) and collect the answers, retrying what is not
        answered (or answered with a retryable code) within the retry budget. Raises PSError
        for a refusal whose reason is not in `allow`, PSUnavailable when the budget is spent."""
        return self.begin_call(requests, allow).wait()

    def begin_call(self, requests: dict[int, tuple[ps_pb2.DataRequest, list]],
                   allow: tuple[Reason, ...] = ()) -> "PendingCall":
        """`_call` in two halves: this sends the requests and returns at once; the returned
        call's `wait()` collects the answers (retrying as `_call` does). The client must make
        no other call before that `wait()` has returned: the answers come on its sockets."""
        exchange = self._exchange(requests, allow)
        next(exchange)  # up to the first sends
        return PendingCall(exchange)

    def _exchange(self, requests, allow):
        """`_call`'s body as a generator: it yields once, after its first sends."""
        seq = self.next_seq()
        for req, _ in requests.values():
            req.client_id, req.seq, req.token = self.client_id, seq, self._token
        wire = {}
        results: dict[int, tuple] = {}
        offers: dict[int, str] = {}
        pending = set(requests)
        backoff = Backoff(self.retry)
        why = ""
        attempt = 0
        while True:
            attempt += 1
            waiting = {}
            for index in pending:
                req, frames = requests[index]
                if req.generation != self._conns[index].generation or index not in wire:
                    req.generation = self._conns[index].generation
                    wire[index] = [req.SerializeToString(), *frames]
                waiting[self._conns[index].send(wire[index])] = index
            if attempt == 1:
                yield  # sent: the caller may compute until it needs the answers
            poller = zmq.Poller()
            for sock in waiting:
                poller.register(sock, zmq.POLLIN)
            started = time.monotonic()
            # one try waits timeout_s, but never past the call's retry budget
            left = self.retry.total_s - backoff.elapsed
            deadline = started + max(0.05, min(self.timeout_s, left))
            while waiting:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                if self.master is not None:
                    if (time.monotonic() - started >= REROUTE_AFTER_S
                            and self._primary_moved(set(waiting.values()))):
                        why = "a new PS primary was promoted"
                        break
                    left_ms = min(left_ms, int(REROUTE_AFTER_S * 1000))
                for sock, _ in poller.poll(left_ms):
                    frames = sock.recv_multipart(copy=False)
                    resp = ps_pb2.DataResponse()
                    try:
                        resp.ParseFromString(frames[0].bytes)
                    except Exception:  # noqa: BLE001 - not an answer we can use
                        continue
                    if resp.seq != seq:
                        continue  # a late answer to an earlier request
                    index = waiting.pop(sock)
                    poller.unregister(sock)
                    code = code_name(resp.code)
                    if code in _RETRY_CODES:  # e.g. the PS is stopping: try again
                        why = f"PS {index}: {resp.message}"
                        continue
                    pending.discard(index)
                    offers[index] = resp.local_endpoint
                    if resp.code != 0 and resp.reason not in allow:
                        raise PSError(code, resp.reason or Reason.INTERNAL, f"PS {index} ({self._conns[index].current}): "
                                      f"{resp.message}")
                    results[index] = (resp, frames[1:])
            if not pending:
                for index, local in offers.items():
                    self._conns[index].offer(local)
                if attempt > 1:  # one line per recovery, not one per try
                    log.warning("the PS answered again after %d tries (%.1fs): %s", attempt,
                                backoff.elapsed, why)
                return results
            for index in waiting.values():
                why = f"PS {index} at {self._conns[index].current} did not answer within " \
                      f"{self.timeout_s:.1f}s"
            delay = None if attempt >= self.max_attempts else backoff.next_delay()
            if delay is None:
                break
            for index in pending:
                self._conns[index].failed()
            time.sleep(delay)
            left = self.retry.total_s - backoff.elapsed
            if left > 0:
                self._refresh(pending, timeout_s=min(self.timeout_s, left))
        log.info("giving up after %d tries (%.1f s): %s", attempt, backoff.elapsed, why)
        raise PSUnavailable(
            f"PS {', '.join(str(i) for i in sorted(pending))} did not answer for "
            f"{backoff.elapsed:.1f}s ({attempt} tries; retry budget {self.retry.total_s:.0f}s, "
            f"{self.max_attempts} tries): {why}. Is the PS running? A PS restarted from its "
            "checkpoint is found again through the master while the budget lasts")

    def _primary_moved(self, indexes: set[int]) -> bool:
        """Whether the master names another primary for one of `indexes` (asked at most every
        REROUTE_AFTER_S; the connections are moved when so)."""
        now = time.monotonic()
        if now - self._rerouted_at < REROUTE_AFTER_S:
            return False
        self._rerouted_at = now
        before = [(c.endpoint, c.generation) for c in self._conns]
        self._refresh(indexes, timeout_s=REROUTE_AFTER_S)
        return any((self._conns[i].endpoint, self._conns[i].generation) != before[i]
                   for i in indexes)

    def _refresh(self, indexes: Iterable[int], timeout_s: float | None = None) -> None:
        """Look the PS up again (a restarted PS may listen elsewhere, a backup may have been
        promoted)."""
        if self.master is None:
            return
        try:
            found = master_routes(self.master, timeout_s=timeout_s or self.timeout_s,
                                  stub=self._master_stub(), **self._lookup)
        except PSUnavailable:
            return
        if len(found) != self.num_ps:
            return
        for i in indexes:
            endpoint, key, generation = found[i]
            conn = self._conns[i]
            if (conn.endpoint, conn.server_key) != (endpoint, key):
                if key and conn.client_keys is None:
                    conn.client_keys = zmq.curve_keypair()
                log.info("PS %d moved: %s -> %s (generation %d); re-routing", i,
                         conn.endpoint, endpoint, generation)
                conn.moved(endpoint, key)
            elif generation != conn.generation:
                log.info("PS %d: generation %d -> %d at %s; re-routing", i, conn.generation,
                         generation, endpoint)
            conn.generation = generation


def _dense(g: torch.Tensor) -> torch.Tensor:
    """A gradient as the frame of a dense tensor: a sparse one (nn.Embedding(sparse=True))
    is coalesced (repeated rows summed) and densified, to the parameter's shape."""
    if g.layout != torch.strided:
        g = g.coalesce().to_dense() if g.is_sparse else g.to_dense()
    return g.detach()


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
