"""The backup's side of PS replication: copy the primary, then apply its mutations in order.

`Backup.run` attaches to the primary named by the master (a `Follow` request answered with a
snapshot at mutation S), restores that snapshot into the ParamStore, and from then on asks the
primary every `heartbeat_s` whether it is still attached. `on_replicate` (called by the data
plane's handler threads) applies mutation S+1, S+2, ... strictly in order: a handler holding
mutation n waits until n-1 was applied (the handlers receive them in order, so the lowest one
waiting can always go on). Each mutation goes through the same ParamStore calls a client's
request does, so the at-most-once table is the primary's too.

A primary that stops answering is reported through `on_primary_silent` (the PS then asks the
master more often, to learn about a promotion quickly); a primary that says this backup is
no longer attached (it was dropped) makes it copy the primary again. A primary that refuses
this backup's token is never asked again: `on_fatal(message)` (the PS stops, saying where its
token came from).
"""
from __future__ import annotations

import io
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
import zmq

from protos import ps_pb2
from pswire.connection import dealer, refusal

from rpckit.auth import credentials_refused
from rpckit.errors import Reason, ServiceError
from rpckit.retry import NEVER_RETRIED_NAMES
from ..store.params import ParamStore

log = logging.getLogger(__name__)

ATTACH_TIMEOUT_S = 120.0   # a snapshot of a large model takes a while to cut, send and load
ORDER_WAIT_S = 30.0        # how long mutation n waits for n-1 (a snapshot still loading)


@dataclass(frozen=True)
class Upstream:
    generation: int
    data_address: str
    data_public_key: str = ""


def warm_up() -> None:
    """Make the first optimizer now: torch imports a lot on the first one (seconds on a busy
    machine), which must not happen while the primary waits for this backup's answer."""
    from pswire.optimizers import make_config

    from ..store.optim import make_dense, step_dense

    for name in ("sgd", "adagrad", "adam"):
        value = torch.zeros(1)
        step_dense(make_dense(make_config(name, lr=0.1), value), value, torch.ones(1))


class Backup:
    def __init__(self, store: ParamStore, ctx: zmq.Context, token: str, instance: str,
                 data_address: str, data_public_key: str,
                 apply: Callable[[ps_pb2.DataRequest, list], list],
                 on_primary_silent: Callable[[], None] = lambda: None,
                 heartbeat_s: float = 0.2, silent_after_s: float = 0.6,
                 on_fatal: Callable[[str], None] = lambda why: None, token_source: str = ""):
        self.store = store
        self.on_fatal = on_fatal
        self.token_source = token_source
        self.ctx = ctx
        self.token = token
        self.instance = instance
        self.data_address = data_address
        self.data_public_key = data_public_key
        self.apply = apply
        self.on_primary_silent = on_primary_silent
        self.heartbeat_s = heartbeat_s
        self.silent_after_s = silent_after_s
        self._cond = threading.Condition()
        self.upstream: Upstream | None = None
        self.attach_id = 0
        self.applied_seq = 0
        self.in_sync = False
        self.attachments = 0
        self._stop = threading.Event()
        self._sock: zmq.Socket | None = None
        self._thread: threading.Thread | None = None

    # -- what the master says ---------------------------------------------------------------

    def follow(self, upstream: Upstream) -> None:
        """Follow this primary (a new one: copy it again)."""
        with self._cond:
            if upstream == self.upstream:
                return
            self.upstream = upstream
            self.attach_id, self.in_sync = 0, False
            self._cond.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="follower", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop following (promoted, or shutting down); mutations still queued are refused."""
        self._stop.set()
        with self._cond:
            self.upstream, self.attach_id = None, 0
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        last_answer = time.monotonic()
        try:
            while not self._stop.is_set():
                upstream = self.upstream
                if upstream is None:
                    self._stop.wait(self.heartbeat_s)
                    continue
                try:
                    if self.attach_id == 0:
                        self._attach(upstream)
                    else:
                        self._heartbeat(upstream)
                    last_answer = time.monotonic()
                except TimeoutError as exc:
                    self._close()
                    if time.monotonic() - last_answer >= self.silent_after_s:
                        log.info("primary %s silent: %s", upstream.data_address, exc)
                        self.on_primary_silent()
                except ServiceError as exc:
                    self._close()
                    if exc.code in NEVER_RETRIED_NAMES:  # the same token gets the same answer
                        self.on_fatal(credentials_refused(
                            f"the primary PS at {upstream.data_address}", exc.code,
                            self.token_source, exc.reason).message)
                        return
                    log.info("primary %s refused: %s", upstream.data_address, exc)
                    if exc.reason == Reason.FENCED:
                        self.on_primary_silent()  # a new generation: ask the master
                    self._stop.wait(self.heartbeat_s)
                self._stop.wait(self.heartbeat_s)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.ETERM and not self.ctx.closed:  # else: the PS is stopping
                raise
        finally:
            self._close()

    def _ask(self, upstream: Upstream, follow: ps_pb2.Follow, timeout: float) -> list:
        if self._sock is None:
            self._sock = dealer(self.ctx, upstream.data_address, upstream.data_public_key)
        req = ps_pb2.DataRequest(token=self.token, generation=upstream.generation,
                                 seq=time.monotonic_ns(), follow=follow)
        self._sock.send_multipart([req.SerializeToString()])
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer within {timeout:.1f}s")
            # in slices: a backup promoted (or stopped) while it waits for a snapshot from a
            # primary that went quiet must not hold its promotion up for the whole wait
            if not self._sock.poll(int(min(left, 0.1) * 1000)):
                if self._stop.is_set() or self.upstream != upstream:
                    raise TimeoutError("no longer following this primary")
                continue
            frames = self._sock.recv_multipart(copy=False)
            resp = ps_pb2.DataResponse.FromString(frames[0].bytes)
            if resp.seq != req.seq:
                continue  # the answer to an earlier try
            if resp.code != 0:
                raise refusal(resp)
            return [resp, *frames[1:]]

    def _follow_msg(self, upstream: Upstream, attach_id: int) -> ps_pb2.Follow:
        return ps_pb2.Follow(generation=upstream.generation, attach_id=attach_id,
                             instance=self.instance, data_address=self.data_address,
                             data_public_key=self.data_public_key,
                             applied=self.applied_seq if attach_id else 0,
                             loaded=bool(attach_id))

    def _attach(self, upstream: Upstream) -> None:
        warm_up()
        resp, snapshot = self._ask(upstream, self._follow_msg(upstream, 0), ATTACH_TIMEOUT_S)
        state = torch.load(io.BytesIO(snapshot.buffer), weights_only=True)
        with self._cond:
            if self.upstream != upstream:
                return  # the master moved on meanwhile
            self.store.restore(state)
            self.attach_id = resp.follow.attach_id
            self.applied_seq = resp.follow.seq
            self.attachments += 1
            self._cond.notify_all()
        log.info("copied the primary %s (generation %d) at mutation %d", upstream.data_address,
                 upstream.generation, resp.follow.seq)

    def _heartbeat(self, upstream: Upstream) -> None:
        resp, *_ = self._ask(upstream, self._follow_msg(upstream, self.attach_id),
                             self.silent_after_s)
        with self._cond:
            if not resp.follow.attached:
                log.warning("the primary detached this backup: copying it again")
                self.attach_id, self.in_sync = 0, False
            else:
                self.in_sync = resp.follow.in_sync

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    # -- mutations from the primary -----------------------------------------------------------

    def on_replicate(self, req: ps_pb2.DataRequest, frames: list) -> list:
        r = req.replicate
        deadline = time.monotonic() + ORDER_WAIT_S
        with self._cond:
            while True:
                up = self.upstream
                if up is None or r.generation != up.generation:
                    raise ServiceError("UNAVAILABLE", Reason.FENCED,
                                       f"this backup follows generation "
                                       f"{up.generation if up else 'none'}, not "
                                       f"{r.generation}")
                if self.attach_id == r.attach_id and self.applied_seq >= r.seq - 1:
                    break
                left = deadline - time.monotonic()
                # attach_id 0: a copy is on its way, wait for it; another id: a stale stream
                if left <= 0 or self.attach_id not in (0, r.attach_id):
                    raise ServiceError(
                        "UNAVAILABLE", Reason.UNAVAILABLE,
                        f"mutation {r.seq} of attachment {r.attach_id}: this backup is at "
                        f"{self.applied_seq} of attachment {self.attach_id}")
                self._cond.wait(left)
            duplicate = r.seq <= self.applied_seq
        if not duplicate:
            inner = ps_pb2.DataRequest.FromString(r.request)
            self.apply(inner, frames)
            with self._cond:
                self.applied_seq = r.seq
                self._cond.notify_all()
        return [ps_pb2.DataResponse(code=0, seq=req.seq, replicate=ps_pb2.ReplicateResult(
            seq=r.seq)).SerializeToString()]
