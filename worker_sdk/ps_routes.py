"""Where the PS set takes requests, and one connection to one PS.

`master_routes` asks the master (any address of a comma-separated list; it follows the
leader) for the primary of each PS index, its CURVE key and generation, and says what it
waits for while the set is incomplete. `_Connection` is one DEALER socket to one PS, switched
to the PS's same-host Unix socket when that exists here. `DataClient` (worker_sdk/ps_data.py)
builds on both.
"""
from __future__ import annotations

import os
import stat
import time
from typing import NamedTuple

import zmq

from rpckit.errors import Reason, ServiceError

PSError = ServiceError  # a refusal from a PS: `code`, `reason` (rpckit.errors.Reason), `message`


class PSUnavailable(ServiceError):
    """A PS did not answer after every retry."""

    def __init__(self, message: str):
        super().__init__("UNAVAILABLE", Reason.UNAVAILABLE, message)


def master_endpoints(master: str, timeout_s: float = 30.0, poll_s: float = 0.2, *,
                     tls_ca: str = "", token: str = "") -> list[str]:
    """The data addresses of the PS set, by index, from the master's ListPS (waits until every
    index registered, at most `timeout_s`); TLS and the token as rpckit.auth.channel."""
    return [address for address, _ in master_data_plane(master, timeout_s, poll_s,
                                                         tls_ca=tls_ca, token=token)]


def master_data_plane(master: str, timeout_s: float = 30.0, poll_s: float = 0.2, *,
                      tls_ca: str = "", token: str = "") -> list[tuple[str, str]]:
    """(data address, CURVE public key or '') of each PS, by index, as `master_endpoints`."""
    return [(r.data_address, r.data_public_key)
            for r in master_routes(master, timeout_s, poll_s, tls_ca=tls_ca, token=token)]


class Route(NamedTuple):
    """Where a PS index's primary takes requests, and its generation (0: not replicated)."""

    data_address: str
    data_public_key: str = ""
    generation: int = 0


def master_routes(master: str, timeout_s: float = 30.0, poll_s: float = 0.2, *,
                  tls_ca: str = "", token: str = "", token_source: str = "",
                  stub=None) -> list[Route]:
    """The primary of each PS index, by index, as `master_endpoints`; `stub`: a Master stub
    to reuse (else one is made and closed). A refused token or a TLS mismatch raises at once
    (rpckit.auth.CredentialsRefused, rpckit.tls_check.TLSMismatch): waiting cannot mend it."""
    import grpc

    from protos import master_pb2, master_pb2_grpc
    from rpckit.auth import credentials_refused
    from rpckit.channels import LeaderStub
    from rpckit.resolve import unresolvable
    from rpckit.retry import NEVER_RETRIED

    from .notice import WaitNotice

    started = time.monotonic()
    deadline = started + timeout_s
    said = WaitNotice(f"the PS set from the master at {master}")
    last = "no answer"
    # host:port[,host:port...]: follows the leader
    own = stub is None
    if own:
        stub = LeaderStub(master, master_pb2_grpc.MasterStub, tls_ca=tls_ca, token=token,
                          token_source=token_source)
    try:
        while True:
            try:
                resp = stub.ListPS(master_pb2.ListPSRequest(), timeout=max(0.5, poll_s * 5))
                if resp.complete:
                    said.done()
                    return [Route(p.data_address, p.data_public_key, p.generation)
                            for p in sorted(resp.ps, key=lambda p: p.index)]
                last = (f"{len(resp.ps)} of {resp.num_ps} PS registered" if resp.num_ps else
                        "no PS has registered with the master yet: start elastic-ps "
                        f"--master {master}")
            except grpc.RpcError as exc:
                if exc.code() in NEVER_RETRIED:
                    raise credentials_refused(f"the master at {master}", exc.code().name,
                                              token_source if token else "") from None
                last = f"the master does not answer ({exc.code().name}: {exc.details()})"
                misspelled = unresolvable(master, exc.details() or "")
                if misspelled:
                    raise PSUnavailable(f"cannot reach the master to find the PS: "
                                        f"{misspelled}") from None
            said.still(last, time.monotonic() - started, timeout_s)
            if time.monotonic() >= deadline:
                raise PSUnavailable(f"the master at {master} did not list a complete PS set "
                                    f"within {timeout_s:.0f}s ({last})")
            time.sleep(poll_s)
    finally:
        if own:
            stub.close()


class _Connection:
    """One DEALER socket to one PS, created lazily and thrown away on a timeout.

    `endpoint` is the PS's registered (TCP) address. When the PS announces a same-host
    endpoint (a Unix socket) that exists on this machine, later requests go there; if it ever
    fails to answer, the connection goes back to TCP and does not use that path again.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, prefer_local: bool = True,
                 server_key: str = "", client_keys: tuple[bytes, bytes] | None = None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.server_key = server_key    # the PS's CURVE public key: encrypt, else plaintext
        self.client_keys = client_keys  # this client's (public, secret) CURVE keys
        self.prefer_local = prefer_local
        self.generation = 0  # the PS generation this connection's endpoint serves
        self.local = ""
        self._refused: set[str] = set()
        self.socket: zmq.Socket | None = None

    @property
    def current(self) -> str:
        return self.local or self.endpoint

    def send(self, parts: list) -> zmq.Socket:
        if self.socket is None:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            if self.server_key:
                s.curve_serverkey = self.server_key.encode()
                s.curve_publickey, s.curve_secretkey = self.client_keys
            s.connect(self.current)
            self.socket = s
        self.socket.send_multipart(parts, copy=False)
        return self.socket

    def reset(self) -> None:
        if self.socket is not None:
            self.socket.close(0)
            self.socket = None

    def failed(self) -> None:
        """No answer in time: start over, on TCP if the same-host socket was in use."""
        if self.local:
            self._refused.add(self.local)
            self.local = ""
        self.reset()

    def moved(self, endpoint: str, server_key: str = "") -> None:
        self.reset()
        self.endpoint = endpoint
        self.server_key = server_key
        self.local = ""

    def offer(self, local: str) -> None:
        """The PS said it also listens on `local` (ipc://PATH): use it if it is on this host."""
        if (not self.prefer_local or not local or local == self.local
                or local in self._refused or not local.startswith("ipc://")):
            return
        try:
            if not stat.S_ISSOCK(os.stat(local[len("ipc://"):]).st_mode):
                return
        except OSError:
            return  # another machine (or a PS that is gone): stay on TCP
        self.reset()
        self.local = local
