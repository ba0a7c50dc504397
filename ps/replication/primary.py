"""The primary's side of PS replication: number every mutation, forward it, answer once copied.

A backup attaches with a `Follow` request (backup.py): under the order lock the primary
takes a consistent snapshot of its ParamStore (model, optimizer state and the at-most-once
table) at mutation number S and answers it; every mutation after S goes to the backup as a
`Replicate` request numbered S+1, S+2, ... to the backup's own data plane, which applies them
in that order and acknowledges each.

What it promises:

- One order. Mutations (InitParameters, Push, PushRows) are applied and numbered under one
  lock, so the backups apply exactly the primary's sequence. A retried request that the
  at-most-once table answers as a duplicate is not forwarded (its first try was).
- A push is answered only when every in-sync backup acknowledged every mutation numbered so
  far (the retry of a duplicate waits too, so its first try is copied before it is answered).
- A backup counts as in sync once it acknowledged everything up to the moment the primary
  started waiting for it, and the master recorded it (ReportReplicas). A backup that does not
  acknowledge within `ack_timeout` is dropped: the primary answers nothing until the master
  recorded the drop (so the master never promotes a backup that lacks an acknowledged push),
  then detaches it (it copies the primary again). A master that answers FENCED means this PS
  was deposed: the pending push is refused with FENCED, the caller re-routes.
- A mutation is applied and answered only under a valid primary lease (lease.py), renewed
  by every successful report to the master (at least every quarter lease): checked before it
  is applied and again just before it is answered. A primary that lost touch with the master
  (or was paused) for longer than the lease answers nothing, so once the master made another
  primary after the lease ran out (master/ps/leases.py), this one can no longer acknowledge a
  push that the new primary lacks. A push applied but not answered for lack of a lease is
  answered, as a duplicate, when the client retries it here with its seq once renewed.
"""
from __future__ import annotations

import io
import itertools
import logging
import threading
import time
import uuid
from typing import Callable

import torch
import zmq

from protos import ps_pb2
from pswire.connection import dealer, send_parts

from rpckit.errors import Reason, ServiceError, unavailable
from rpckit.logs import Repeated, one_line
from ..store.params import ParamStore
from .lease import PrimaryLease

log = logging.getLogger(__name__)

QUEUE_LIMIT = 100_000   # mutations queued towards one backup before it is given up
IDLE_DETACH_S = 10.0    # a backup that stopped asking (Follow) is detached after this
LEASE_WAIT_S = 1.0      # a mutation waits this long for a lease before it is refused
FIRST_RENEW_S = 0.1     # renewals this often until the master said how long a lease lasts
WATCH_S = 0.05          # the watch's round while backups are attached
IDLE_WATCH_S = 0.5      # its longest sleep without backups (a renewal due, an attach, a stop)


class Fenced(Exception):
    """The master says this PS is no longer the primary of its generation."""


class AttachedBackup:
    """One attached backup: mutations go out through an I/O thread that owns the socket."""

    def __init__(self, ctx: zmq.Context, attach_id: int, instance: str, endpoint: str,
                 server_key: str, acked: int, on_ack: Callable[[], None]):
        self.attach_id = attach_id
        self.instance = instance
        self.endpoint = endpoint
        self.acked = acked          # backups apply in order: an ack of n covers 1..n
        self.in_sync = False        # the primary waits for it
        self.join_seq = 0           # in sync once acked >= this (set when waiting began)
        self.confirmed = False      # the master recorded it in sync
        self.failed = ""            # why it was given up
        self.last_follow = time.monotonic()
        self._on_ack = on_ack
        self._inbox = f"inproc://replicate-{uuid.uuid4().hex}"
        self._push = ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, QUEUE_LIMIT)
        self._push.setsockopt(zmq.LINGER, 0)
        self._push.bind(self._inbox)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._io, args=(ctx, server_key),
                                        name=f"replicate-{attach_id}", daemon=True)
        self._thread.start()

    def send(self, parts: list) -> None:
        """Under the primary's order lock (one sender at a time)."""
        if self.failed:
            return
        try:
            send_parts(self._push, parts, zmq.NOBLOCK)
        except zmq.Again:
            self.fail(f"more than {QUEUE_LIMIT} mutations queued")

    def fail(self, why: str) -> None:
        if not self.failed:
            self.failed = why
            log.warning("backup %s (%s) given up: %s", self.instance[:16], self.endpoint, why)
        self._on_ack()

    def _io(self, ctx: zmq.Context, server_key: str) -> None:
        pull = out = None
        try:
            pull = ctx.socket(zmq.PULL)  # in here: a context stopped before this line is ETERM
            pull.setsockopt(zmq.LINGER, 0)
            pull.connect(self._inbox)
            out = dealer(ctx, self.endpoint, server_key, sndhwm=QUEUE_LIMIT)
            poller = zmq.Poller()
            poller.register(pull, zmq.POLLIN)
            poller.register(out, zmq.POLLIN)
            while not self._stop.is_set():
                for sock, _ in poller.poll(100):
                    if sock is pull:
                        out.send_multipart(pull.recv_multipart(copy=False), copy=False)
                        continue
                    frames = out.recv_multipart()
                    resp = ps_pb2.DataResponse.FromString(frames[0])
                    if resp.code != 0:  # never retried: a refused token included
                        self.fail(f"it refused mutation {resp.seq} "
                                  f"({ps_pb2.DataResponse.Code.Name(resp.code)}): {resp.message}")
                    elif resp.replicate.seq > self.acked:
                        self.acked = resp.replicate.seq
                        self._on_ack()
        except zmq.ZMQError as exc:
            if exc.errno != zmq.ETERM and not ctx.closed:  # a closed one raises ENOTSUP
                log.exception("replication to %s failed", self.endpoint)
        finally:
            for sock in (pull, out):
                if sock is not None:
                    sock.close(0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._push.close(0)


class Primary:
    def __init__(self, store: ParamStore, ctx: zmq.Context, token: str, generation: int,
                 report: Callable[[list[str]], float], ack_timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        """report(in_sync_instances): tell the master, answers the lease's length in seconds
        (the renewal); raises Fenced, or anything on failure."""
        self.store = store
        self.ctx = ctx
        self.token = token
        self.generation = generation
        self.report = report
        self.ack_timeout = ack_timeout
        self.order = threading.Lock()
        self.seq = 0
        self.followers: dict[int, AttachedBackup] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._report_lock = threading.Lock()
        # a renewal fails every quarter lease while the master is down: said once, then
        # counted (rpckit.logs)
        self._unreported = Repeated(log, clock=clock)
        self.fenced = False
        self.lease = PrimaryLease(clock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="replication", daemon=True)
        self._thread.start()

    # -- the data path --------------------------------------------------------------------------

    def mutate(self, req: ps_pb2.DataRequest, header: bytes, frames: list,
               dispatch: Callable[[], list], reads_change: bool = False) -> list:
        """Apply (dispatch) in the one order, forward, and answer once the backups have it,
        all under a valid lease. reads_change: the request's row pulls change tables (see
        ReplicaNode), so a retried Step answered as a duplicate is forwarded too: the backup's
        at-most-once table skips its mutations as this one did, and makes the same reads."""
        self.lease.wait_valid(LEASE_WAIT_S, lambda: self.fenced)
        with self.order:
            self._refuse_if_fenced()
            self._refuse_without_lease("nothing was applied")
            reply = dispatch()
            if self.followers and _changed(req, reply, reads_change):
                self.seq += 1
                for f in list(self.followers.values()):
                    msg = ps_pb2.DataRequest(token=self.token, replicate=ps_pb2.Replicate(
                        generation=self.generation, attach_id=f.attach_id, seq=self.seq,
                        request=header))
                    f.send([msg.SerializeToString(), *frames])
            target = self.seq
        self._wait(target)
        # the last moment before the answer leaves: a primary paused (or cut off) while this
        # push waited may have been replaced by a backup that lacks it
        self._refuse_without_lease("it may have been applied here: retry it with its seq")
        return reply

    def _refuse_without_lease(self, what: str) -> None:
        self._refuse_if_fenced()
        if not self.lease.valid():
            raise ServiceError(
                "UNAVAILABLE", Reason.FENCED,
                f"PS {self.store.index} holds no primary lease (generation {self.generation}): "
                f"it has not reached the master for {self.lease.duration:.1f} s and may have "
                f"been replaced; {what}; ask the master for the primary")

    def _report(self, in_sync: list[str]) -> None:
        """Tell the master the in-sync set (under _report_lock); renews the lease from the
        moment the report is sent. Raises Fenced (the lease is revoked) or any failure."""
        sent = self.lease.sending()
        try:
            granted = self.report(in_sync)
        except Fenced:
            self.lease.revoke()
            raise
        if granted:
            self.lease.renewed(sent, granted)

    def _wait(self, target: int) -> None:
        deadline = time.monotonic() + self.ack_timeout
        with self._cond:
            while True:
                lagging = [f for f in self.followers.values() if f.in_sync and f.acked < target]
                if not lagging:
                    return
                left = deadline - time.monotonic()
                if left <= 0 or any(f.failed for f in lagging):
                    break
                self._cond.wait(left)
        for f in lagging:
            f.fail(f.failed or f"no acknowledgement of mutation {target} within "
                   f"{self.ack_timeout:.1f}s")
        self._drop(lagging)

    def _drop(self, lagging: list[AttachedBackup]) -> None:
        """Stop waiting for `lagging`, once the master recorded it. Raises ServiceError when
        that cannot be done (the push stays unanswered: the client retries)."""
        with self._report_lock:
            keep = [f for f in self.followers.values() if f.confirmed and f not in lagging]
            try:
                self._report([f.instance for f in keep])
            except Fenced:
                self.fence()
                self._refuse_if_fenced()
            except Exception as exc:  # noqa: BLE001 - the master is unreachable: no answer
                raise unavailable(Reason.UNAVAILABLE, f"PS replication: a backup stopped "
                                  f"answering and the master could not be told ({exc}); "
                                  "retry") from exc
            for f in lagging:
                self._detach(f)

    # -- backups attaching ----------------------------------------------------------------------

    def attach(self, follow: ps_pb2.Follow) -> tuple[ps_pb2.FollowResult, bytes]:
        """A backup asks for a snapshot: it gets the state at mutation S and S+1.. after."""
        for f in list(self.followers.values()):
            if f.instance == follow.instance:
                self._detach(f)
        with self.order:
            self._refuse_if_fenced()
            state = self.store.snapshot()
            # acked -1: nothing counts until the backup says it loaded the snapshot
            f = AttachedBackup(self.ctx, next(self._ids), follow.instance, follow.data_address,
                         follow.data_public_key, -1, self._notify)
            self.followers[f.attach_id] = f
            seq = self.seq
        self._notify()  # the watch looks at backups from now on
        buf = io.BytesIO()
        torch.save(state, buf)
        log.info("backup %s at %s attached at mutation %d (%d bytes)", follow.instance[:16],
                 follow.data_address, seq, buf.tell())
        return ps_pb2.FollowResult(attach_id=f.attach_id, seq=seq, attached=True), buf.getvalue()

    def status(self, follow: ps_pb2.Follow) -> ps_pb2.FollowResult:
        f = self.followers.get(follow.attach_id)
        if f is None or f.failed or f.instance != follow.instance:
            return ps_pb2.FollowResult(attach_id=follow.attach_id, attached=False)
        f.last_follow = time.monotonic()
        if follow.loaded and follow.applied > f.acked:
            f.acked = follow.applied  # the snapshot is loaded (acked was -1 until now)
            self._notify()
        return ps_pb2.FollowResult(attach_id=f.attach_id, seq=f.acked, attached=True,
                                   in_sync=f.in_sync and f.confirmed)

    def in_sync_count(self) -> int:
        return sum(1 for f in self.followers.values() if f.in_sync and f.confirmed)

    # -- background: backups that caught up, backups gone quiet -------------------------------

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _watch(self) -> None:
        renewed = float("-inf")
        while not self._idle(renewed):
            every = self._every()
            if self.lease.clock() - renewed >= every and not self.fenced:
                # renew the lease, saying the in-sync set again (the master may have dropped
                # and re-added a backup, or lost the last report with a failover); the next
                # one a quarter lease after this one ended
                self._confirm(None)
                renewed = self.lease.clock()
            for f in list(self.followers.values()):
                if f.failed and not f.in_sync:
                    self._detach(f)
                elif not f.in_sync and f.acked >= self.seq:
                    with self.order:  # from the next mutation on, pushes wait for it
                        f.in_sync, f.join_seq = True, self.seq
                elif f.in_sync and not f.confirmed and f.acked >= f.join_seq:
                    self._confirm(f)
                elif time.monotonic() - f.last_follow > IDLE_DETACH_S and not f.in_sync:
                    f.fail("it stopped asking (Follow)")

    def _every(self) -> float:
        return self.lease.duration / 4 if self.lease.duration else FIRST_RENEW_S

    def _idle(self, renewed: float) -> bool:
        """Wait for the watch's next round; True once stopping. Backups attached are looked at
        every WATCH_S (their acks, their silence); without any there is nothing to look at
        but the next renewal, so the thread sleeps until it is due (at most IDLE_WATCH_S, and
        an attach wakes it): a PS without backups spent 3.5 ms of CPU a second polling."""
        if self.followers:
            return self._stop.wait(WATCH_S)
        wait = min(max(renewed + self._every() - self.lease.clock(), WATCH_S), IDLE_WATCH_S)
        with self._cond:  # attach() adds, then notifies: checked under the lock, none is lost
            if not self._stop.is_set() and not self.followers:
                self._cond.wait(wait)
        return self._stop.is_set()

    def _confirm(self, f: AttachedBackup | None) -> None:
        """Report the in-sync set to the master (with `f` newly in it, or just again)."""
        with self._report_lock:
            if f is not None and (f.failed or self.followers.get(f.attach_id) is not f):
                return
            try:
                # only backups known to hold everything acknowledged: confirmed ones, and `f`
                # (it acknowledged every mutation since the primary began to wait for it)
                self._report([x.instance for x in self.followers.values()
                              if x.confirmed or x is f])
            except Fenced:
                self.fence()
                return
            except Exception as exc:  # noqa: BLE001 - try again on the next round
                self._unreported.event(f"cannot renew the primary lease with the master (nor "
                                       f"tell it which backups are in sync): {one_line(exc)}",
                                       key=type(exc))
                return
            self._unreported.ended("the master renews the primary lease again")
            if f is None:
                return
            f.confirmed = True
            log.info("backup %s at %s is in sync (mutation %d)", f.instance[:16], f.endpoint,
                     f.acked)

    def _detach(self, f: AttachedBackup) -> None:
        if self.followers.pop(f.attach_id, None) is not None:
            f.close()
        self._notify()

    # -- the end ------------------------------------------------------------------------------

    def fence(self) -> None:
        self.fenced = True
        self.lease.revoke()
        self._notify()

    def _refuse_if_fenced(self) -> None:
        if self.fenced:
            raise ServiceError("UNAVAILABLE", Reason.FENCED,
                               f"PS {self.store.index} was deposed (generation "
                               f"{self.generation} is over): ask the master for the primary")

    def close(self) -> None:
        self._stop.set()
        self._notify()
        self._thread.join(2)
        for f in list(self.followers.values()):
            self._detach(f)


def _changed(req: ps_pb2.DataRequest, reply: list, reads_change: bool = False) -> bool:
    """Whether a mutation's answer says it took effect now (not a duplicate's stored answer,
    unless its reads change tables, and not a refusal that changed nothing)."""
    resp = ps_pb2.DataResponse.FromString(_bytes(reply[0]))
    kind = resp.WhichOneof("body")
    if resp.reason == Reason.WRONG_OWNER.value:  # a retry answered after its slots moved
        return False
    if kind == "slot_import":  # slots moving in (ps/slots/moves.py): the backups hold them too
        return resp.code == 0
    if kind == "push":
        return not resp.push.duplicate and resp.code in (0, 9)  # OK, or refused stale (kept)
    if kind == "push_rows":
        return not resp.push_rows.duplicate and resp.code == 0
    if kind == "step":  # as a push: OK, or refused stale (kept in the at-most-once table)
        return (reads_change or not resp.step.push.duplicate) and resp.code in (0, 9)
    if kind == "init_parameters":  # the first, or one changing tables' bounds
        return resp.init_parameters.initialized or resp.init_parameters.tables_changed
    if kind == "pull_rows":  # of a table whose reads change it (ReplicaNode forwards only those)
        return resp.code == 0
    return False


def _bytes(part) -> bytes:
    return part.bytes if hasattr(part, "bytes") else bytes(part)
