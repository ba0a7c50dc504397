"""Clients of a service with standbys: a list of addresses, and calls that follow the leader.

Every client of the master takes a comma-separated list of addresses (`--master a:1,b:2`,
`master="a:1,b:2"`). One of them is the leader; the others are standbys that answer every call
UNAVAILABLE with reason NOT_LEADER and the leader's address in the ErrorInfo metadata
(`{"leader": "host:port"}`). `Endpoints` decides where the next call goes (pure, no I/O);
`LeaderStub` is a stub over it that callers use like a generated one: each call goes to the
current address, and when that address is down or a standby, the call hops at once to the leader
it named, or to the next address, until every address was tried once. What is left to wait out
(no leader yet: a standby is taking over) is the caller's retry loop's business; `retry_cap()`
tells it how long a wait is worth while a standby is about to take over.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import grpc

from . import auth, tls_check
from .errors import Reason, metadata_of, reason_of
from .retry import NEVER_RETRIED, retryable

# grpc's own reconnect backoff grows to 120 s by default: a restarted server would then be
# found late. Keep it in step with our retry backoff.
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)
# While a standby answers, a leader is at most a lease away: ask this often, not at the
# retry policy's growing interval (which reaches seconds and would add them to a failover).
STANDBY_POLL_S = 0.2
LEADER_KEY = "leader"


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    """'a:1, b:2' or ['a:1', 'b:2'] -> ['a:1', 'b:2'] (order kept, duplicates dropped)."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    out: list[str] = []
    for item in items:
        item = item.strip()
        if item and item not in out:
            out.append(item)
    if not out:
        raise ValueError(f"no address in {addresses!r}: give host:port[,host:port...]")
    return out


def leader_hint(exc: BaseException) -> str:
    """The leader a standby named in its NOT_LEADER refusal ('' when none or unknown)."""
    if reason_of(exc) != Reason.NOT_LEADER:
        return ""
    return metadata_of(exc).get(LEADER_KEY, "")


class Endpoints:
    """Where the next call goes: the current address while it answers; after a failure, the
    leader a standby named, else the next address of the list. Thread-safe, no I/O."""

    def __init__(self, addresses: str | Sequence[str]):
        self.addresses = parse_addresses(addresses)
        self.current = self.addresses[0]
        self._lock = threading.Lock()
        self._failures = 0  # consecutive, since the last answer
        self._standby_seen = False  # a standby answered since the last success

    def succeeded(self, address: str) -> None:
        with self._lock:
            if address == self.current:
                self._failures = 0
                self._standby_seen = False

    def failed(self, address: str, hint: str = "", standby: bool = False) -> bool:
        """`address` did not serve the call (down, or a standby naming `hint` as leader).
        Returns whether the next address is worth trying at once: True until every address
        failed once in a row."""
        with self._lock:
            if address != self.current:
                return True  # another thread moved on already
            self._failures += 1
            self._standby_seen |= standby
            if hint and hint != address:
                self.current = hint  # may be outside the list: a leader we were not told of
            else:
                self.current = self._after(address)
            return self._failures < len(self.addresses) + (1 if hint else 0)

    def retry_cap(self) -> float:
        """The longest wait before the next attempt worth making: short while a standby
        answers (a leader is at most a lease away), unbounded otherwise."""
        with self._lock:
            return STANDBY_POLL_S if self._standby_seen else float("inf")

    def _after(self, address: str) -> str:
        if address not in self.addresses:
            return self.addresses[0]
        return self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]


class LeaderStub:
    """A stub of `stub_class` over the addresses in `addresses` that follows the leader:
    `stub.Method(request, timeout=...)` as with a generated stub. Raises the last error when
    no address served the call (retryable ones included: the caller's policy retries).
    Channels are `rpckit.auth.channel`s: TLS with `tls_ca`, the token on every call.

    Two failures no retry can mend are raised at once instead, as ServiceErrors whose message
    names the fix: a refusal of the token (`auth.CredentialsRefused`, naming `token_source`)
    and a TLS mismatch (`tls_check.TLSMismatch`: an address that fails at the transport is
    probed, at most every PROBE_EVERY_S)."""

    PROBE_EVERY_S = 5.0

    def __init__(self, addresses: str | Sequence[str], stub_class: Callable[[grpc.Channel], object],
                 options: Sequence[tuple[str, object]] = CHANNEL_OPTIONS, *,
                 tls_ca: str | None = None, token: str | None = None, token_source: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.endpoints = Endpoints(addresses)
        self._stub_class = stub_class
        self._options = options
        self._tls_ca = tls_ca
        self._token = token
        self._token_source = token_source if token else ""
        self._clock = clock
        self._probed: dict[str, float] = {}  # address -> when it was last probed for TLS
        self._lock = threading.Lock()
        self._channels: dict[str, tuple[grpc.Channel, object]] = {}

    @property
    def address(self) -> str:
        """The address the next call goes to (the leader, once one answered)."""
        return self.endpoints.current

    @property
    def addresses(self) -> str:
        return ",".join(self.endpoints.addresses)

    def retry_cap(self) -> float:
        return self.endpoints.retry_cap()

    def _stub(self, address: str):
        with self._lock:
            entry = self._channels.get(address)
            if entry is None:
                channel = auth.channel(address, tls_ca=self._tls_ca, token=self._token,
                                       options=self._options)
                entry = self._channels[address] = (channel, self._stub_class(channel))
            return entry[1]

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)

        def call(request, *args, **kwargs):
            while True:
                address = self.endpoints.current
                try:
                    response = getattr(self._stub(address), method)(request, *args, **kwargs)
                except grpc.RpcError as exc:
                    self._raise_unmendable(address, exc)
                    if not retryable(exc):
                        raise
                    hint = leader_hint(exc)
                    standby = reason_of(exc) == Reason.NOT_LEADER
                    if not self.endpoints.failed(address, hint, standby):
                        raise
                    continue
                self.endpoints.succeeded(address)
                return response

        call.__name__ = method
        return call

    def _raise_unmendable(self, address: str, exc: grpc.RpcError) -> None:
        code = exc.code()
        if code in NEVER_RETRIED:
            raise auth.credentials_refused(f"the server at {address}", code.name,
                                           self._token_source, reason_of(exc)) from None
        if code != grpc.StatusCode.UNAVAILABLE or reason_of(exc):
            return  # answered by one of our servers (a standby, one stopping): not the transport
        now = self._clock()
        with self._lock:
            if now - self._probed.get(address, -self.PROBE_EVERY_S) < self.PROBE_EVERY_S:
                return
            self._probed[address] = now
        mismatch = tls_check.probe(address, self._tls_ca or "")
        if mismatch is not None:
            raise mismatch from None

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            channel.close()
