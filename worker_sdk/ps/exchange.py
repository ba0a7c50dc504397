"""Sending requests to every PS of a set and collecting the answers, retried and re-routed.

`Exchange` owns one `pswire.connection.Connection` per PS index and the retry rules of the
data plane (docs in worker_sdk/ps/data_client.py): every PS gets its request with one
(client_id, seq), answers are collected with a bounded poll, a PS that does not answer in
time is asked again (after re-reading its route from the master), for at most the retry
budget. `PendingCall` is a call whose requests left and whose answers are not collected yet.
"""
from __future__ import annotations

import logging
import time
import uuid
from typing import Iterable, Sequence

import zmq

from protos import ps_pb2
from pswire.connection import Connection, joined, split_joined
from pswire.frames import buffer_of, code_name
from pswire.slots import DEFAULT_SLOTS, Layout
from rpckit import auth
from rpckit.errors import Reason, ServiceError, invalid
from rpckit.logs import Repeated
from rpckit.retry import NEVER_RETRIED_NAMES, RETRYABLE, Backoff, RetryPolicy

from .. import metrics, notice
from .parts import owning
from .routes import PSError, PSUnavailable, Placement, Route, master_placement

log = logging.getLogger(__name__)

_RETRY_CODES = frozenset(code.name for code in RETRYABLE)
REROUTE_AFTER_S = 0.3  # an unanswered request this old asks the master for a new primary
RETRY_BUDGET_S = 30.0
# a client idle this long reads the layout before its next call (a PS a shrink removed lingers
# ps.__main__.LEAVE_AFTER_S = 3 s, answering WRONG_OWNER, before it exits)
IDLE_REFRESH_S = 1.0
IDLE_REFRESH_TIMEOUT_S = 2.0  # how long one call keeps retrying a PS that does not answer
# A slot's hand-over pauses its writes for well under a second: SLOT_MOVING is retried soon
# and often, apart from the tries and backoff kept for a PS that does not answer
MOVING_BACKOFF_S, MOVING_MAX_BACKOFF_S = 0.015, 0.1
# the most buffers an answer's joined frame may hold (a Step's answer holds a few)
MAX_ANSWER_PARTS = 100_000


class PendingCall:
    """A call whose requests are sent and whose answers are not collected yet
    (`DataClient.begin_call`)."""

    def __init__(self, exchange):
        self._exchange = exchange
        self._result = None
        self._error: BaseException | None = None
        self._done = False

    def wait(self) -> dict[int, tuple[ps_pb2.DataResponse, list]]:
        """The answers (as `Exchange.call` returns them), waiting and retrying as it does;
        raises what it raises. Waiting again returns (or raises) the same."""
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
                 prefer_local: bool = True, tls_ca: str | None = None,
                 auth_token: str | None = None, server_keys: Sequence[str] | None = None):
        """endpoints or master: where the PS set is (exactly one of them).
        timeout_s: how long one try waits for an answer; a call gives up (PSUnavailable)
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
        self._prefer_local = prefer_local
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
                conn = self._conns[i] = Connection(self.ctx, endpoint, self._prefer_local, key,
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
        self._refresh(None, IDLE_REFRESH_TIMEOUT_S, drop=True)
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

    def call(self, requests: dict[int, tuple[ps_pb2.DataRequest, list]],
              allow: tuple[Reason, ...] = ()) -> dict[int, tuple[ps_pb2.DataResponse, list]]:
        """Send each PS its request (same seq) and collect the answers, retrying what is not
        answered (or answered with a retryable code) within the retry budget. Raises PSError
        for a refusal whose reason is not in `allow`, PSUnavailable when the budget is spent."""
        return self.begin_call(requests, allow).wait()

    def begin_call(self, requests: dict[int, tuple[ps_pb2.DataRequest, list]],
                   allow: tuple[Reason, ...] = ()) -> "PendingCall":
        """`call` in two halves: this sends the requests and returns at once; the returned
        call's `wait()` collects the answers (retrying as `call` does). The client must make
        no other call before that `wait()` has returned: the answers come on its sockets."""
        exchange = self._exchange(requests, allow)
        next(exchange)  # up to the first sends
        return PendingCall(exchange)

    def _exchange(self, requests, allow):
        """`call`'s body as a generator: it yields once, after its first sends."""
        seq = self.next_seq()
        for req, _ in requests.values():
            req.client_id, req.seq, req.token = self.client_id, seq, self._token
        wire = {}
        results: dict[int, tuple] = {}
        offers: dict[int, str] = {}
        pending = set(requests)
        backoff = Backoff(self.retry)
        moving_backoff = Backoff(RetryPolicy(MOVING_BACKOFF_S, MOVING_MAX_BACKOFF_S,
                                             self.retry.total_s))
        why = ""
        attempt = tries = 0
        unexpected = False  # a try failed otherwise than on a slot hand-over
        sent_to: dict[int, str] = {}  # where this try's request went (a re-route moves conns)
        while True:
            attempt += 1
            moving = set()  # answered SLOT_MOVING this try: the socket works, the slot waits
            rerouted = False
            waiting = {}
            for index in pending:
                req, frames = requests[index]
                conn = self._conns[index]
                # small buffers are joined into one frame for ZeroMQ, where each frame costs a
                # few us a side; a plain same-host socket sends them all in one write as they are
                plain = conn.plain
                if (req.generation != conn.generation or wire.get(index, (None,))[0] != plain):
                    req.generation = conn.generation
                    head, got = req.SerializeToString(), None if plain else joined(frames)
                    wire[index] = (plain, [head, *frames] if got is None else [
                        head + ps_pb2.DataRequest(frame_sizes=got[0]).SerializeToString(),
                        got[1]])
                waiting[conn.send(wire[index][1])] = index
                sent_to[index] = conn.current
            if attempt == 1:
                yield  # sent: the caller may compute until it needs the answers
            poller = zmq.Poller()
            peers = {}  # fd -> a same-host socket's peer (a poller answers those by fd)
            for sock in waiting:
                poller.register(sock, zmq.POLLIN)
                if not isinstance(sock, zmq.Socket):
                    peers[sock.fileno()] = sock
            started = time.monotonic()
            # one try waits timeout_s, but never past the call's retry budget
            left = self.retry.total_s - backoff.elapsed
            deadline = started + max(0.05, min(self.timeout_s, left))
            while waiting:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0 or not poller.sockets:
                    break
                if self.master is not None:
                    if (time.monotonic() - started >= REROUTE_AFTER_S
                            and self._primary_moved(set(waiting.values()))):
                        why = "a new PS primary was promoted"
                        unexpected = rerouted = True
                        break
                    left_ms = min(left_ms, int(REROUTE_AFTER_S * 1000))
                for sock, _ in poller.poll(left_ms):
                    sock = peers.get(sock, sock) if peers else sock
                    try:
                        frames = sock.recv_multipart(copy=False)
                    except (OSError, ValueError):  # a same-host socket broken (pswire.unix):
                        poller.unregister(sock)    # as a PS that does not answer, but
                        why = f"PS {waiting[sock]}'s same-host socket broke"
                        unexpected = True
                        continue                   # known at once: no waiting for it
                    resp = ps_pb2.DataResponse()
                    try:
                        resp.ParseFromString(buffer_of(frames[0]))
                    except Exception:  # noqa: BLE001 - not an answer we can use
                        continue
                    if resp.seq != seq:
                        continue  # a late answer to an earlier request
                    body = frames[1:]
                    if resp.frame_sizes:  # its buffers joined into one frame
                        try:
                            if len(body) != 1:
                                raise invalid("frame_sizes set on an answer of "
                                              f"{len(body)} frames")
                            body = split_joined(body[0], resp.frame_sizes, MAX_ANSWER_PARTS)
                        except ServiceError:
                            continue  # not an answer we can use: as one that does not parse
                    index = waiting.pop(sock)
                    poller.unregister(sock)
                    if resp.code == 0:  # the usual answer: none of the refusals below
                        pending.discard(index)
                        offers[index] = resp.local_endpoint
                        results[index] = (resp, body)
                        continue
                    code = code_name(resp.code)
                    if code in _RETRY_CODES:  # e.g. the PS is stopping: try again
                        why = f"PS {index} answered {code}: {resp.message}"
                        if resp.reason == Reason.SLOT_MOVING:
                            moving.add(index)
                        else:
                            unexpected = True
                        continue
                    pending.discard(index)
                    offers[index] = resp.local_endpoint
                    where = f"PS {index} ({self._conns[index].current})"
                    if code in NEVER_RETRIED_NAMES:  # the same token gets the same answer
                        raise auth.credentials_refused(where, code, self._token_source,
                                                       resp.reason)
                    if resp.reason not in allow:
                        raise PSError(code, resp.reason or Reason.INTERNAL,
                                      f"{where}: {resp.message}")
                    results[index] = (resp, body)
            if not pending:
                for index, local in offers.items():
                    self._conns[index].offer(local)
                self._answered(attempt, backoff.elapsed, why, unexpected)
                self.answered_at = time.monotonic()
                return results
            for sock, index in waiting.items():
                if (sock, zmq.POLLIN) in poller.sockets:  # else broken, and said so
                    promoted = "; a new PS primary was promoted" if rerouted else ""
                    why = (f"no answer from PS {index} at {sent_to[index]} within "
                           f"{time.monotonic() - started:.1f}s{promoted}")
                    unexpected = True
            if moving == pending:  # only hand-overs in the way: soon, and not a try spent
                delay = moving_backoff.next_delay()
                if delay is None or backoff.elapsed >= self.retry.total_s:
                    break
                time.sleep(delay)
                continue
            tries += 1
            delay = None if tries >= self.max_attempts else backoff.next_delay()
            if delay is None:
                break
            for index in pending - moving:
                self._conns[index].failed()
            time.sleep(delay)
            left = self.retry.total_s - backoff.elapsed
            if left > 0:
                self._refresh(pending, timeout_s=min(self.timeout_s, left))
        log.info("giving up after %d tries (%.1f s): %s", attempt, backoff.elapsed, why)
        raise PSUnavailable(
            f"PS {', '.join(str(i) for i in sorted(pending))} gave no usable answer for "
            f"{backoff.elapsed:.1f}s ({attempt} tries; retry budget {self.retry.total_s:.0f}s, "
            f"{self.max_attempts} tries); last: {why}. Is the PS running? A PS restarted from "
            "its checkpoint is found again through the master while the budget lasts")

    def _answered(self, attempt: int, elapsed: float, why: str, unexpected: bool) -> None:
        """Log a call answered on try `attempt`: a run of calls that needed more than one try
        is one line and a count (rpckit.logs.Repeated), at INFO when only slot hand-overs
        were in the way (a resize: expected), else at WARNING."""
        if attempt == 1:
            self._recoveries.ended("PS calls answer on the first try again")
            return
        self._recoveries.event(f"PS call recovered on try {attempt} after {elapsed:.1f}s; the "
                               f"tries before failed with: {why}", key=unexpected,
                               level=logging.WARNING if unexpected else logging.INFO)

    def _primary_moved(self, indexes: set[int]) -> bool:
        """Whether the master names another primary for one of `indexes` (asked at most every
        REROUTE_AFTER_S; the connections are moved when so)."""
        now = time.monotonic()
        if now - self._rerouted_at < REROUTE_AFTER_S:
            return False
        self._rerouted_at = now
        before = {i: (c.endpoint, c.generation) for i, c in self._conns.items()}
        self._refresh(indexes, timeout_s=REROUTE_AFTER_S)
        return any((self._conns[i].endpoint, self._conns[i].generation) != before[i]
                   for i in indexes)

    def _refresh(self, indexes: Iterable[int] | None, timeout_s: float | None = None,
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
