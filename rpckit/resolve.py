"""Tell a misspelled host from a server that is briefly away.

gRPC answers both with UNAVAILABLE, and clients retry UNAVAILABLE for minutes: right for a
master that restarts, wrong for `--master mastr:50051`, which will never resolve. When a
failed call's details say the name did not resolve, `unresolvable` asks the system resolver
itself: only a definite "no such name" (EAI_NONAME) for every host of the address list fails
fast; a resolver that is merely unreachable (EAI_AGAIN) is retried like any outage.
"""
from __future__ import annotations

import socket

# what grpc-core says when resolution fails (c-ares and the native resolver word it apart)
DNS_WORDS = ("DNS resolution failed", "errors resolving", "Domain name not found",
             "hostname lookup error")


def _hosts(addresses: str) -> list[str]:
    hosts = []
    for address in addresses.split(","):
        address = address.strip()
        if address.startswith("dns:"):
            address = address[4:].lstrip("/")
        if address.startswith("["):  # [v6]:port
            hosts.append(address[1:address.find("]")])
        elif address:
            hosts.append(address.rpartition(":")[0] if ":" in address else address)
    return [h for h in hosts if h]


def unresolvable(addresses: str, details: str = "") -> str:
    """A message when no host of `addresses` (host:port[,host:port...]) exists in DNS, else
    ''. With `details` (a failed call's), only asks the resolver when they speak of DNS."""
    if details and not any(word in details for word in DNS_WORDS):
        return ""
    hosts = _hosts(addresses)
    if not hosts:
        return ""
    for host in hosts:
        try:
            socket.getaddrinfo(host, None)
            return ""  # this one resolves: the outage is elsewhere
        except socket.gaierror as exc:
            if exc.errno not in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                return ""  # EAI_AGAIN and friends: the resolver may answer later
        except OSError:
            return ""
    names = ", ".join(repr(h) for h in hosts)
    return (f"no such host: {names} does not resolve (DNS says the name does not exist); "
            f"check the address {addresses!r}")
