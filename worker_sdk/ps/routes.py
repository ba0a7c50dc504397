"""Where the PS set takes requests, and one connection to one PS.

`master_routes` asks the master (any address of a comma-separated list; it follows the
leader) for the primary of each PS index, its CURVE key and generation, and says what it
waits for while the set is incomplete. `DataClient` builds on it, with one
`pswire.connection.Connection` per PS.
"""
from __future__ import annotations

import time
from typing import NamedTuple


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

    from ..notice import WaitNotice

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
