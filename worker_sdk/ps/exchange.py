"""Requests to the PS of a set and their answers: connections, routes, sends, collection.

`Exchange` owns one `pswire.connection.Connection` per PS index (ZeroMQ over TCP, or the PS's
same-host socket: `pswire.transport.Transport`) and where each index's primary is (the
master's ListPS: `_adopt`, `refresh`, `primary_moved`, `await_layout`). It sends requests and
collects answers with a bounded poll, and decides nothing about them: what an answer means and
what comes next is `retry.CallRetry`'s, and `reroute.RoutedCall` does it.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Callable, Iterable, Sequence

import zmq

from protos import ps_pb2
from pswire.connection import Connection, joined, split_joined
from pswire.frames import buffer_of
from pswire.slots import DEFAULT_SLOTS, Layout
from pswire.transport import Transport
from rpckit import auth
from rpckit.errors import Reason, ServiceError, invalid
from rpckit.logs import Repeated
from rpckit.retry import RetryPolicy

from .. import metrics, notice
from .parts import owning
from .retry import REROUTE_AFTER_S, CallRetry
from .routes import PSError, PSUnavailable, Placement, Route, master_placement

log = logging.getLogger(__name__)

RETRY_BUDGET_S = 30.0
# a client idle this long reads the layout before its next call (a PS a shrink removed lingers
# ps.__main__.LEAVE_AFTER_S = 3 s, answering WRONG_OWNER, before it exits)
IDLE_REFRESH_S = 1.0
IDLE_REFRESH_TIMEOUT_S = 2.0  # how long one call keeps retrying a PS that does not answer
# the most buffers an answer's joined frame may hold (a Step's answer holds a few)
MAX_ANSWER_PARTS = 100_000


class Exchange:
    """Requests to every PS of a set and their answers: connections, retries, re-routing.

    What `DataClient` (worker_sdk/ps/data_client.py) sends goes through one of these; see
    that module's docstring for the rules. Not thread-safe (one per client).
    """

    def __init__(self, endpoints: Sequence[str] | None = None, *, master: str | None = None,
                 client_id: str | None = None, timeout_s: float = 10.0, max_attempts: int = 8,
                 backoff_s: float = 0.05, max_backoff_s: float = 2.0,
                 retry_budget_s: float = RETRY_BUDGET_S,
                 discovery_timeout_s: float = 30.0, context: zmq.Context | None = None,
                 same_host: bool = True, tls_ca: str | None = None,
                 auth_token: str | None = None, server_keys: Sequence[str] | None = None):
        """endpoints or master: where the PS set is (exactly one of them).
        timeout_s: how long one try waits for an answer; a call gives up (PSUnavailable)
        after `retry_budget_s` seconds or `max_attempts` tries, whichever comes first.
        tls_ca, auth_token: for the master's ListPS and (the token) every data request;
        None: ELASTIC_PS_TLS_CA, ELASTIC_PS_AUTH_TOKEN(_FILE). server_keys: with `endpoints`,
        each PS's CURVE public key when its data plane is encrypted (GetPSStatus tells it);
        with `master`, they come from ListPS. same_host: send to a PS's same-host socket once
        it announced one this machine can reach (pswire.samehost), else TCP only."""
        if (endpoints is None) == (master is None):
            raise ValueError("give either endpoints (tcp://host:port per PS) or master")
        notice.ensure_visible()  # waits and re-routes are logged at INFO
        metrics.maybe_serve()  # ELASTIC_PS_METRICS_PORT
        self.master = master
        # None: ELASTIC_PS_TLS_CA and ELASTIC_PS_AUTH_TOKEN(_FILE) (rpckit.auth)
        self._tls_ca, self._token, self._token_source = auth.client_security(tls_ca, auth_token)
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
        self._same_host = same_host
        self._client_keys = None
        self._conns: dict[int, Connection] = {}  # PS index -> its connection
        # calls that needed more than one try: the first of a run said, the rest counted
        # (a resize's hand-overs make a dozen in a second: INFO; anything else: WARNING)
        self._recoveries = Repeated(log)
        self.layout: Layout | None = None  # what requests are routed by (set by _adopt)
        if endpoints is not None and not endpoints:
            raise ValueError("no PS endpoints")
        self._adopt(self._resolve(), drop=True)
        self._rerouted_at = 0.0
        self._seq = 0
        self.answered_at = time.monotonic()  # the last call answered (refresh_if_idle)

    def _resolve(self, timeout_s: float | None = None, min_version: int = 0) -> Placement:
        # a method, not a lambda over self: a client in a reference cycle is freed by the
        # garbage collector, whose finalizers find its sockets open and hang in zmq's term()
        if self._given is not None:  # no master: the layout a PS started without one owns
            return Placement(dict(enumerate(self._given)),
                             Layout.initial(len(self._given), DEFAULT_SLOTS, version=0))
        return master_placement(
            self.master, self._discovery_timeout_s if timeout_s is None else timeout_s,
            poll_s=0.05 if min_version else 0.2, stub=self._master_stub(),
            min_version=min_version, **self._lookup)

    def _adopt(self, found: Placement, drop: bool = False,
               indexes: Iterable[int] | None = None) -> None:
        """Route by `found`: connect to indices it adds, move those whose primary changed
        (only `indexes`, when given) and, with `drop` (no request in flight), close those
        that own no slot any more (a shrink)."""
        if self.layout is None or found.layout.version >= self.layout.version:
            self.layout = found.layout
        members = set(owning(self.layout))
        for i in members if indexes is None else set(indexes) | (members - set(self._conns)):
            route = found.routes.get(i)
            if route is None:
                continue
            endpoint, key, generation = route
            if key and self._client_keys is None:
                # ephemeral: CURVE needs a key pair, but the PS trusts the token, not the key
                self._client_keys = zmq.curve_keypair()
            conn = self._conns.get(i)
            if conn is None:
                conn = self._conns[i] = Connection(self.ctx, endpoint, self._same_host, key,
                                                   self._client_keys if key else None)
            elif (conn.endpoint, conn.server_key) != (endpoint, key):
                if key and conn.client_keys is None:
                    conn.client_keys = self._client_keys
                log.info("PS %d moved: %s -> %s (generation %d); re-routing", i,
                         conn.endpoint, endpoint, generation)
                conn.moved(endpoint, key)
            elif generation != conn.generation:
                log.info("PS %d: generation %d -> %d at %s; re-routing", i, conn.generation,
                         generation, endpoint)
            conn.generation = generation
        if drop:
            for i in [i for i in self._conns if i not in members]:
                self._conns.pop(i).reset()

    def refresh_if_idle(self) -> None:
        """Read the layout again when no call was answered for IDLE_REFRESH_S (one ListPS
        then; never between the calls of a busy client). An unreachable master keeps the
        layout this client has."""
        if self.master is None or time.monotonic() - self.answered_at < IDLE_REFRESH_S:
            return
        self.refresh(None, IDLE_REFRESH_TIMEOUT_S, drop=True)
        self.answered_at = time.monotonic()

    def await_layout(self, min_version: int, timeout_s: float, why: str,
                     again: bool = False) -> Layout:
        """A layout at least `min_version` (from the master, polled while it is older), routed
        by from now on; `again`: read the master even when this client's is that new (a PS
        refused what this layout says it owns). `why`: the refusal that asks for it. Raises
        PSError without a master (nothing else can say where a slot went), PSUnavailable when
        `timeout_s` runs out."""
        if self.master is None:
            raise PSError("FAILED_PRECONDITION", Reason.WRONG_OWNER,
                          f"{why}; this client was given its PS endpoints, not a master, so "
                          "it cannot learn where the slot went: give it the master's address")
        if again or self.layout.version < min_version:
            self._adopt(self._resolve(max(0.05, timeout_s), min_version), drop=True)
        return self.layout

    @property
    def _lookup(self) -> dict:
        return {"tls_ca": self._tls_ca, "token": self._token, "token_source": self._token_source}

    @property
    def num_ps(self) -> int:
        """Indices 0..num_ps-1 of the layout (some may own no slot while slots move)."""
        return self.layout.num_ps

    @property
    def endpoints(self) -> list[str]:
        """The registered (TCP) data address of each PS, by index."""
        return [self._conns[i].endpoint for i in sorted(self._conns)]

    @property
    def transports(self) -> list[str]:
        """The endpoint each PS is reached at now (its same-host socket, or TCP)."""
        return [self._conns[i].current for i in sorted(self._conns)]

    def _master_stub(self):
        if self._stub is None:
            from protos import master_pb2_grpc
            from rpckit.channels import LeaderStub

            self._stub = LeaderStub(self.master, master_pb2_grpc.MasterStub, **self._lookup)
        return self._stub

    @property
    def generations(self) -> list[int]:
        """The PS generation each index's requests go to (0: not replicated)."""
        return [self._conns[i].generation for i in sorted(self._conns)]

    def close(self) -> None:
        if self._stub is not None:
            self._stub.close()
        for c in self._conns.values():
            c.reset()
        if self._own_ctx:
            self.ctx.term()

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def new_retry(self) -> CallRetry:
        """The decisions of one call (worker_sdk/ps/retry.py), with this client's budgets."""
        return CallRetry(self.retry, self.max_attempts, self.master is not None)

    def stamp(self, requests: dict[int, tuple[ps_pb2.DataRequest, list]]) -> int:
        """Give `requests` one fresh seq (and this client's id and token); returns the seq."""
        seq = self.next_seq()
        for req, _ in requests.values():
            req.client_id, req.seq, req.token = self.client_id, seq, self._token
        return seq

    def send(self, index: int, req: ps_pb2.DataRequest, frames: list, wire: dict) -> Transport:
        """Send PS `index` its request; returns the transport its answer comes on. `wire`
        keeps each index's encoded message for the same request's next try (re-encoded when
        the generation routed by or the kind of transport changed)."""
        conn = self._conns[index]
        joins = conn.joins_buffers
        kept = wire.get(index)
        if kept is None or req.generation != conn.generation or kept[0] != joins:
            # small buffers are joined into one frame for ZeroMQ, where each frame costs a
            # few us a side; the same-host socket sends them all in one write as they are
            req.generation = conn.generation
            head, got = req.SerializeToString(), joined(frames) if joins else None
            kept = wire[index] = (joins, [head, *frames] if got is None else [
                head + ps_pb2.DataRequest(frame_sizes=got[0]).SerializeToString(), got[1]])
        return conn.send(kept[1])

    def collect(self, waiting: dict, seq: int, timeout_s: float, take: Callable,
                broken: Callable, tick: Callable[[float], bool] | None = None,
                once: bool = False) -> None:
        """Wait up to `timeout_s` for the answers to `seq` of `waiting` (pollable -> (index,
        transport), as sent), removing each as it comes: `take(index, resp, frames)` for an
        answer, `broken(index)` for a transport that broke (known at once: no waiting for
        it). `tick(waited_s)`, called about every REROUTE_AFTER_S while answers are missing,
        returns True to stop waiting. A late answer to another seq, or one that does not
        parse, is dropped. `once`: take what is there now, waiting for nothing."""
        poller = zmq.Poller()
        for pollable in waiting:
            poller.register(pollable, zmq.POLLIN)
        started = time.monotonic()
        deadline = started + timeout_s
        while waiting:
            left_ms = 0 if once else int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 and not once:
                return
            if tick is not None:
                if tick(time.monotonic() - started):
                    return
                left_ms = min(left_ms, int(REROUTE_AFTER_S * 1000))
            for pollable, _ in poller.poll(left_ms):
                index, transport = waiting[pollable]
                try:
                    frames = transport.recv()
                except (OSError, ValueError):  # a same-host socket broken (pswire.samehost)
                    poller.unregister(pollable)
                    del waiting[pollable]
                    broken(index)
                    continue
                got = _answer(frames, seq)
                if got is None:
                    continue
                del waiting[pollable]
                poller.unregister(pollable)
                take(index, *got)
            if once:
                return

    def failed(self, indexes) -> None:
        """No usable answer from `indexes`: their connections start over (on TCP)."""
        for index in indexes:
            self._conns[index].failed()

    def offer(self, index: int, endpoint: str) -> None:
        """PS `index` announced its same-host endpoint (`DataResponse.local_endpoint`)."""
        self._conns[index].offer(endpoint)

    def where(self, index: int) -> str:
        """PS `index` and the endpoint its requests go to, for messages."""
        return f"PS {index} ({self._conns[index].current})"

    @property
    def token_source(self) -> str:
        return self._token_source

    def answered(self, attempt: int, elapsed: float, why: str, unexpected: bool) -> None:
        """Log a seq answered on try `attempt`: a run of calls that needed more than one try
        is one line and a count (rpckit.logs.Repeated), at INFO when only slot hand-overs
        were in the way (a resize: expected), else at WARNING."""
        self.answered_at = time.monotonic()
        if attempt == 1:
            self._recoveries.ended("PS calls answer on the first try again")
            return
        self._recoveries.event(f"PS call recovered on try {attempt} after {elapsed:.1f}s; the "
                               f"tries before failed with: {why}", key=unexpected,
                               level=logging.WARNING if unexpected else logging.INFO)

    def gave_up(self, attempt: int, elapsed: float, why: str) -> None:
        log.info("giving up after %d tries (%.1f s): %s", attempt, elapsed, why)

    def primary_moved(self, indexes: set[int]) -> bool:
        """Whether the master names another primary for one of `indexes` (asked at most every
        REROUTE_AFTER_S; the connections are moved when so)."""
        now = time.monotonic()
        if now - self._rerouted_at < REROUTE_AFTER_S:
            return False
        self._rerouted_at = now
        before = {i: (c.endpoint, c.generation) for i, c in self._conns.items()}
        self.refresh(indexes, timeout_s=REROUTE_AFTER_S)
        return any((self._conns[i].endpoint, self._conns[i].generation) != before[i]
                   for i in indexes)

    def refresh(self, indexes: Iterable[int] | None, timeout_s: float | None = None,
                 drop: bool = False) -> None:
        """Look the PS up again (a restarted PS may listen elsewhere, a backup may have been
        promoted); a newer layout found on the way is routed by from the next call on.
        `indexes` None: every index; `drop`: as `_adopt`'s (no request in flight)."""
        if self.master is None:
            return
        try:
            found = self._resolve(timeout_s=timeout_s or self.timeout_s)
        except PSUnavailable:
            return
        self._adopt(found, drop=drop, indexes=indexes)


def _answer(frames: list, seq: int) -> tuple[ps_pb2.DataResponse, list] | None:
    """(DataResponse, its buffers) of a received message, or None when it is not an answer to
    `seq` this client can use (late, or not parsing)."""
    resp = ps_pb2.DataResponse()
    try:
        resp.ParseFromString(buffer_of(frames[0]))
    except Exception:  # noqa: BLE001 - not an answer we can use
        return None
    if resp.seq != seq:
        return None  # a late answer to an earlier request
    body = frames[1:]
    if resp.frame_sizes:  # its buffers joined into one frame
        try:
            if len(body) != 1:
                raise invalid(f"frame_sizes set on an answer of {len(body)} frames")
            body = split_joined(body[0], resp.frame_sizes, MAX_ANSWER_PARTS)
        except ServiceError:
            return None  # not an answer we can use: as one that does not parse
    return resp, body
