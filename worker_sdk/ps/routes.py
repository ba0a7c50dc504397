"""Where the PS set takes requests, and which PS owns what.

`master_placement` asks the master (any address of a comma-separated list; it follows the
leader) for the slot layout (`pswire.slots.Layout`, from `ListPS`) and the primary of each PS
index, its CURVE key and generation, and says what it waits for while the set is incomplete;
`master_routes` is its routes alone. `DataClient` builds on it, with one
`pswire.connection.Connection` per PS index.
"""
from __future__ import annotations

import time
from typing import NamedTuple


from pswire.slots import DEFAULT_SLOTS, Layout
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
    found = master_placement(master, timeout_s, poll_s, tls_ca=tls_ca, token=token,
                             token_source=token_source, stub=stub)
    return [found.routes[i] for i in sorted(found.routes)]


class Placement(NamedTuple):
    """The layout and where each of its indices takes requests."""

    routes: dict[int, Route]  # PS index -> its primary
    layout: Layout


def layout_of(resp) -> Layout | None:
    """The layout a ListPSResponse shows; None while its ranges do not cover every slot (a
    listing taken mid-change: ask again). A master that keeps no slots (version 0, no
    ranges) places as a PS started without one: `Layout.initial(num_ps)`."""
    num_slots = resp.ps_slots or DEFAULT_SLOTS
    ranges = {p.index: [(r.start, r.end) for r in p.slots] for p in resp.ps if p.slots}
    try:
        if not ranges:
            return Layout.initial(resp.num_ps, num_slots, resp.layout_version) \
                if resp.num_ps else None
        return Layout.from_ranges(ranges, num_slots, resp.layout_version)
    except ValueError:
        return None


def master_placement(master: str, timeout_s: float = 30.0, poll_s: float = 0.2, *,
                     tls_ca: str = "", token: str = "", token_source: str = "",
                     stub=None, min_version: int = 0) -> Placement:
    """The layout (at least `min_version`) and the primary of every index that owns slots,
    waiting until every such index registered, at most `timeout_s`; the rest as
    `master_routes`."""
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
                layout = layout_of(resp) if resp.complete else None
                if layout is not None and layout.version >= min_version:
                    said.done()
                    return Placement({p.index: Route(p.data_address, p.data_public_key,
                                                     p.generation) for p in resp.ps}, layout)
                if resp.complete and layout is not None:
                    last = (f"the master's PS layout is version {layout.version}; a PS knows "
                            f"version {min_version}")
                elif resp.complete:
                    last = "the master listed slot ranges that do not cover every slot"
                else:
                    last = (f"{len(resp.ps)} of {resp.num_ps} PS registered" if resp.num_ps
                            else "no PS has registered with the master yet: start elastic-ps "
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
