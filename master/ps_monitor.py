"""Watches the registered parameter servers through their gRPC health service.

A PS whose health check has failed for `timeout` seconds is recorded as lost (a `ps_lost`
event and `state=lost` in status) until it registers again. Workers find the new address with
ListPS; the PS itself restores its checkpoint.
"""
from __future__ import annotations

import logging
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rpckit import auth

from .committer import Committer
from .core import MasterCore

log = logging.getLogger(__name__)


class PSMonitor:
    def __init__(self, core: MasterCore, committer: Committer, timeout: float = 3.0,
                 interval: float = 0.5, tls_ca: str = ""):
        self.core = core
        self.committer = committer
        self.timeout = timeout
        self.interval = interval
        self.tls_ca = tls_ca  # the PS serve TLS: verify them (health needs no token)
        self.stop = threading.Event()
        self._channels: dict[str, grpc.Channel] = {}
        self._failing_since: dict[tuple[int, int], float] = {}

    def start(self) -> None:
        threading.Thread(target=self._run, name="ps-monitor", daemon=True).start()

    def _check(self, address: str) -> str:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = auth.channel(address, tls_ca=self.tls_ca)
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=min(1.0, self.timeout))
        except grpc.RpcError as exc:
            return exc.code().name
        return "" if reply.status == health_pb2.HealthCheckResponse.SERVING else "NOT_SERVING"

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            targets = self.committer.read(
                lambda: [(i, r["incarnation"], r["address"]) for i, r in self.core.ps.items()
                         if i not in self.core.ps_lost]
            )
            now = time.monotonic()
            for index, incarnation, address in targets:
                problem = self._check(address)
                key = (index, incarnation)
                if not problem:
                    self._failing_since.pop(key, None)
                    continue
                since = self._failing_since.setdefault(key, now)
                if now - since >= self.timeout:
                    why = f"health check failing for {now - since:.1f} s ({problem})"
                    try:
                        if self.committer.call(
                            lambda: self.core.mark_ps_lost(index, incarnation, why)
                        ):
                            log.warning("ps %d lost: %s", index, why)
                    except Exception:  # noqa: BLE001 - the committer reports fatal errors
                        return
