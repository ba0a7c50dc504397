"""Keeps this PS registered with the master, through restarts of either.

`Registrar.step()` decides and does one thing and says how long to wait before the next:
register (RegisterPS) while not registered, retrying with a bounded exponential backoff while
the master is unreachable; once registered, check every `interval` seconds with ListPS that
the master still lists this PS with these addresses, and register again when it does not
(the master lost its database, or another process registered this index).

With a `node` (ps.replication.ReplicaNode) it also carries the master's word on this PS's role:
each registration answer and each listing hands the role and generation to the node, a PS
listed neither as its index's primary nor as one of its backups registers again, and while
the node is `urgent` (its primary went quiet) the listing is checked every `URGENT_S`.

Three refusals end the PS instead of being retried, because the same settings get the same
answer: the master refusing this PS's token (UNAUTHENTICATED, PERMISSION_DENIED), a TLS
mismatch with it (rpckit.tls_check), and an index or --num-ps that does not fit the job's PS
layout (FAILED_PRECONDITION, LAYOUT_MISMATCH: only `elastic-ctl resize-ps` changes the PS
count, and a stray PS retrying would take its place the day the layout let it).
`on_fatal(message)` gets the message naming the fix once, and the registrar stops.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import grpc

from protos import master_pb2, master_pb2_grpc
from rpckit.auth import CredentialsRefused, credentials_refused
from rpckit.channels import LeaderStub
from rpckit.errors import Reason, reason_of
from rpckit.logs import Repeated
from rpckit.retry import NEVER_RETRIED, RETRYABLE, Backoff, RetryPolicy
from rpckit.tls_check import TLSMismatch

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0
URGENT_S = 0.1
# a lease renewal that takes longer than this is of no use (the lease counts from the send)
LEASE_RPC_TIMEOUT_S = 1.0
BUG_RETRY_S = 1.0  # after a step raised what it does not expect (a bug): logged, tried again


class Registrar:
    def __init__(self, stub, address: str, data_address: str, index: int, num_ps: int,
                 interval: float = 2.0, first_backoff: float = 0.1, data_public_key: str = "",
                 restored: master_pb2.RestoredCheckpoint | None = None, node=None,
                 token_source: str = "", on_fatal: Callable[[str], None] | None = None,
                 on_layout: Callable[[int, int, list], None] | None = None,
                 on_removed: Callable[[str], None] | None = None, asked_num_ps: int = -1):
        """on_layout(version, slots, ranges): the master's layout for this index (its version,
        the job's slot count, this index's slot ranges), handed over
        before any role (a backup promoted to primary serves only the slots it owns now)."""
        self.stub = stub
        self.on_layout = on_layout
        # a shrink (resize-ps) took this index out once it owned no slot: stop, exit 0
        self.on_removed = on_removed
        self.token_source = token_source  # where this PS's token came from, for messages
        self.on_fatal = on_fatal
        self.fatal = ""  # why this PS must stop (see the module docstring)
        # what this PS restored from: told to the master (which counts the lost updates)
        # until one registration succeeded
        self.restored = restored
        self.address = address
        self.data_address = data_address
        self.index = index
        self.num_ps = num_ps
        # what RegisterPS says: --num-ps as given (0: left out, the layout's), or num_ps
        self.asked_num_ps = num_ps if asked_num_ps < 0 else asked_num_ps
        self.data_public_key = data_public_key
        self.interval = interval
        # the master may be down for long: retry forever, from first_backoff up to interval
        self._policy = RetryPolicy(initial_s=first_backoff, max_s=interval,
                                   total_s=float("inf"))
        self._backoff = Backoff(self._policy)
        self.registered = False
        self.incarnation = 0
        self.registrations = 0
        self._last_error = ""
        # the master down: its first failure logged, then a count (rpckit.logs)
        self._unreachable = Repeated(log)
        self.node = node
        self._wake = threading.Event()
        if node is not None:
            node.wake = self._wake.set
            node.report = self._report_replicas
            node.fatal = self._stop_for

    def _report_replicas(self, generation: int, in_sync: list[str]) -> float:
        """ReportReplicas for the node's primary: the lease granted (seconds); raises Fenced
        when the master says so."""
        from .replication.primary import Fenced

        try:
            return self.stub.ReportReplicas(master_pb2.ReportReplicasRequest(
                index=self.index, generation=generation, instance=self.node.instance,
                in_sync=in_sync), timeout=LEASE_RPC_TIMEOUT_S).lease_ms / 1000
        except grpc.RpcError as exc:
            if reason_of(exc) == Reason.FENCED:
                self.registered = False
                raise Fenced(str(exc)) from exc
            raise

    @property
    def _period(self) -> float:
        return URGENT_S if self.node is not None and self.node.urgent.is_set() else self.interval

    def step(self) -> float:
        """One registration or check; returns seconds until the next step."""
        try:
            if not self.registered:
                return self._register()
            return self._check()
        except (CredentialsRefused, TLSMismatch) as exc:
            self._stop_for(exc.message)
            return self.interval
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            if code in NEVER_RETRIED:  # a stub that is not a LeaderStub: the same decision
                self._stop_for(credentials_refused("the master", code.name, self.token_source,
                                                   reason_of(exc)).message)
                return self.interval
            if reason_of(exc) == Reason.LAYOUT_MISMATCH:
                self._stop_for(f"the master refused PS {self.index}: {detail}")
                return self.interval
            if code in RETRYABLE:
                delay = self._backoff.next_delay()
                self._unreachable.event(f"master unreachable ({code.name if code else '?'}): "
                                        f"{detail}; retrying", key=code)
                return delay
            self._note(f"the master refused this PS ({code.name if code else '?'}): {detail}",
                       logging.ERROR)
            self._backoff = Backoff(self._policy)
            return self._period

    def _register(self) -> float:
        resp = self.stub.RegisterPS(
            master_pb2.RegisterPSRequest(address=self.address, data_address=self.data_address,
                                         index=self.index, num_ps=self.asked_num_ps,
                                         data_public_key=self.data_public_key,
                                         restored=self.restored,
                                         instance=self.node.instance if self.node else ""),
            timeout=RPC_TIMEOUT_S)
        self.restored = None
        self.registered = True
        self.incarnation = resp.incarnation
        self.registrations += 1
        self._backoff = Backoff(self._policy)
        self._last_error = ""
        self._unreachable.ended("the master answers again")
        log.info("registered with the master as PS %d/%d (incarnation %d): grpc %s data %s",
                 self.index, self.num_ps, resp.incarnation, self.address, self.data_address)
        self._layout(resp.layout_version, resp.ps_slots, resp.primary.slots)
        if self.node is not None:
            self.node.on_role(resp.role, resp.generation, resp.primary, resp.replicas)
        return self._period

    def _check(self) -> float:
        resp = self.stub.ListPS(master_pb2.ListPSRequest(), timeout=RPC_TIMEOUT_S)
        self._backoff = Backoff(self._policy)
        self._unreachable.ended("the master answers again")
        # an index a resize adds is listed as joining until slots move to it
        mine = [p for p in (*resp.ps, *resp.joining) if p.index == self.index]
        if (resp.layout_version and self.index >= max(resp.num_ps, resp.target_num_ps)
                and self.on_removed is not None):
            self._layout(resp.layout_version, resp.ps_slots, [])  # it owns no slot: say so
            self.on_removed(f"PS {self.index} left the PS set: the job resized to "
                            f"{resp.target_num_ps} PS and its slots moved to the others "
                            f"(layout version {resp.layout_version}); exiting")
            self.fatal = "removed"
            return self.interval
        if len(mine) == 1:
            self._layout(resp.layout_version, resp.ps_slots, mine[0].slots)
        if self.node is not None and len(mine) == 1:
            role = self._role_in(mine[0])
            if role:
                self.node.on_role(role, mine[0].generation, mine[0], resp.replicas)
                return self._period
        elif (len(mine) == 1 and mine[0].address == self.address
                and mine[0].data_address == self.data_address and mine[0].num_ps == self.num_ps
                and mine[0].data_public_key == self.data_public_key):
            return self.interval
        why = "missing" if not mine else (
            f"listed as grpc {mine[0].address} data {mine[0].data_address}")
        log.warning("the master's PS list has this PS %s; registering again", why)
        self.registered = False
        return 0.0

    def _layout(self, version: int, num_slots: int, slots) -> None:
        if self.on_layout is not None and version and num_slots:
            self.on_layout(version, num_slots, [(r.start, r.end) for r in slots])

    def _role_in(self, entry) -> str:
        """primary / backup when the listing names this process so, else ''."""
        if (entry.instance == self.node.instance and entry.address == self.address
                and entry.data_address == self.data_address):
            return "primary"
        if any(b.instance == self.node.instance for b in entry.backups):
            return "backup"
        return ""

    def _stop_for(self, why: str) -> None:
        if self.fatal:
            return
        self.fatal = why
        log.error("stopping this PS: %s", why)
        if self.on_fatal is not None:
            self.on_fatal(why)

    def _note(self, message: str, level: int) -> None:
        if message.split(";")[0] != self._last_error.split(";")[0]:
            log.log(level, message)
        self._last_error = message

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and not self.fatal:
            try:
                delay = self.step()
            except Exception:  # noqa: BLE001 - a dead registrar would leave the PS unlisted
                log.exception("the registrar's step failed; trying again in %g s", BUG_RETRY_S)
                delay = BUG_RETRY_S
            if delay:
                self._wake.wait(delay)
                self._wake.clear()


def connect(master: str, tls_ca: str = "", token: str = "", token_source: str = ""):
    """A Master stub that follows the leader among `master` (host:port[,host:port...]), and
    what to close it with; TLS when `tls_ca` is given, the token on every call when given."""
    stub = LeaderStub(master, master_pb2_grpc.MasterStub, tls_ca=tls_ca, token=token,
                      token_source=token_source)
    return stub, stub
