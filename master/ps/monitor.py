"""Watches the registered parameter servers through their gRPC health service.

A primary whose health check has failed for `failover_timeout` seconds while its index has an
in-sync backup is replaced by that backup (master/ps/replicas.py: promotion, new generation).
A primary failing for `timeout` seconds is recorded as lost (a `ps_lost` event and
`state=lost` in status) until it registers again; a backup that is not in sync, if any, takes
over then, but not before the primary's lease ran out (master/ps/leases.py: until then the
primary is not marked lost and the next round asks again). A backup failing for `timeout` is dropped from its index. Workers find the new
address with ListPS; a PS without a backup restores its checkpoint.
"""
from __future__ import annotations

import logging
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rpckit import auth, tls_check
from rpckit.channels import CHANNEL_OPTIONS

from ..core import MasterCore
from ..persistence.committer import Committer

log = logging.getLogger(__name__)
TLS_PROBE_EVERY_S = 5.0


class PSMonitor:
    def __init__(self, core: MasterCore, committer: Committer, timeout: float = 3.0,
                 interval: float = 0.5, tls_ca: str = "", failover_timeout: float = 1.0):
        self.core = core
        self.committer = committer
        self.timeout = timeout
        self.failover_timeout = min(failover_timeout, timeout)
        # a failover should not wait a whole interval more than its timeout
        self.interval = min(interval, max(0.1, self.failover_timeout / 4))
        self.tls_ca = tls_ca  # the PS serve TLS: verify them (health needs no token)
        self.stop = threading.Event()
        self._channels: dict[str, grpc.Channel] = {}
        self._failing_since: dict[tuple, float] = {}
        self._tls_told: dict[str, str] = {}  # address -> its TLS mismatch
        self._probed: dict[str, float] = {}  # address -> when TLS was last probed
        self._answered: set[str] = set()  # addresses whose health check answered once

    def start(self) -> None:
        threading.Thread(target=self._run, name="ps-monitor", daemon=True).start()

    def _check(self, address: str) -> str:
        channel = self._channels.get(address)
        if channel is None:
            # short reconnect backoff: a PS restarted at the address of a dead one (a deposed
            # primary coming back as a backup) is seen serving within a fraction of a second
            channel = self._channels[address] = auth.channel(address, tls_ca=self.tls_ca,
                                                             options=CHANNEL_OPTIONS)
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""),
                timeout=min(1.0, self.failover_timeout))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE and address not in self._answered:
                return self._tls_problem(address) or exc.code().name
            return exc.code().name
        self._answered.add(address)
        return "" if reply.status == health_pb2.HealthCheckResponse.SERVING else "NOT_SERVING"

    def _tls_problem(self, address: str) -> str:
        """Why TLS with the PS at `address` fails ('' when it does not, or is not known), told
        once per address: a master given the wrong --tls-ca would otherwise see every PS as
        lost with no reason (a handshake failure looks like a PS that is down). Only an
        address that never answered is probed, at most every TLS_PROBE_EVERY_S: a PS that
        answered before and fails now is down or frozen, and a probe must not hold up its
        failover."""
        if address in self._tls_told:
            return self._tls_told[address]
        now = time.monotonic()
        if now - self._probed.get(address, -TLS_PROBE_EVERY_S) < TLS_PROBE_EVERY_S:
            return ""
        self._probed[address] = now
        mismatch = tls_check.probe(address, self.tls_ca, timeout_s=0.3,
                                   server=f"the PS at {address}")
        if mismatch is None:
            return ""
        self._tls_told[address] = mismatch.message
        log.error("the master cannot health-check %s: %s", address, mismatch.message)
        return mismatch.message

    def _targets(self) -> list[tuple]:
        core = self.core
        out = [(("primary", i, r["incarnation"]), r["address"],
                bool(core.replicas.in_sync(i)))
               for i, r in core.ps.items() if i not in core.ps_lost]
        for i in sorted(core.replicas.backups):
            out += [(("backup", i, b["instance"]), b["address"], False)
                    for b in core.replicas.backups_of(i)]
        return out

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            targets = self.committer.read(self._targets)
            now = time.monotonic()
            for key, address, can_fail_over in targets:
                problem = self._check(address)
                if not problem:
                    self._failing_since.pop(key, None)
                    continue
                failing = now - self._failing_since.setdefault(key, now)
                why = f"health check failing for {failing:.1f} s ({problem})"
                kind, index, who = key
                if kind == "primary" and can_fail_over and failing >= self.failover_timeout:
                    act = lambda: self.core.promote_ps(index, who, why)  # noqa: E731
                elif failing >= self.timeout:
                    act = (lambda: self.core.mark_ps_lost(index, who, why)) if kind == "primary" \
                        else (lambda: self.core.lose_ps_backup(index, who, why))
                else:
                    continue
                try:
                    if self.committer.call(act):
                        log.warning("ps %d %s lost: %s", index, kind, why)
                except Exception:  # noqa: BLE001 - the committer reports fatal errors
                    return
