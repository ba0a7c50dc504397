"""The PS count a PS started without `--num-ps` runs with: the master's PS layout says.

Asked once at start-up, before the PS restores (its checkpoint files and its share of a
table's `max_rows` depend on the count). The rule is `pswire.slots.size_for`, the one the
master registers PS by: an index of the layout runs with the layout's size, an index a resize
adds (`elastic-ctl resize-ps`) with the target, and with no layout yet the PS is the first of
the job and runs with 1. An index that fits none raises `NoPlace`, its message naming the fix.
An unreachable master is asked again (bounded backoff) until it answers or `stop` is set.
"""
from __future__ import annotations

import logging
import threading

import grpc

from protos import master_pb2
from pswire.slots import LayoutMismatch, size_for
from rpckit.auth import CredentialsRefused, credentials_refused
from rpckit.errors import reason_of
from rpckit.retry import NEVER_RETRIED, RETRYABLE, Backoff, RetryPolicy
from rpckit.tls_check import TLSMismatch

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 5.0


class NoPlace(Exception):
    """This PS cannot run: its index does not fit the layout, or the master refuses it."""


def ask_master(stub, index: int, stop: threading.Event, first_backoff: float = 0.1,
               max_backoff: float = 2.0, token_source: str = "") -> int:
    """The PS count PS `index` runs with (0 when `stop` was set first); raises NoPlace."""
    backoff = Backoff(RetryPolicy(initial_s=first_backoff, max_s=max_backoff,
                                  total_s=float("inf")))
    said = False
    while not stop.is_set():
        try:
            resp = stub.ListPS(master_pb2.ListPSRequest(), timeout=RPC_TIMEOUT_S)
        except (CredentialsRefused, TLSMismatch) as exc:
            raise NoPlace(exc.message) from None
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code in NEVER_RETRIED:
                raise NoPlace(credentials_refused("the master", code.name, token_source,
                                                  reason_of(exc)).message) from None
            if code not in RETRYABLE:
                raise NoPlace(f"the master refused ListPS ({code.name if code else '?'}): "
                              f"{exc.details() if hasattr(exc, 'details') else exc}") from None
            delay = backoff.next_delay()
            if not said:
                log.warning("--num-ps left out: waiting for the master to say the PS count "
                            "(%s); retrying", code.name if code else "?")
                said = True
            stop.wait(delay)
            continue
        num_ps = resp.num_ps if resp.layout_version else 0  # 0: no layout yet
        try:
            size = size_for(index, 0, num_ps, resp.target_num_ps or num_ps)
        except LayoutMismatch as exc:
            raise NoPlace(str(exc)) from None
        log.info("--num-ps left out: the master's PS layout (version %d) gives PS %d a count "
                 "of %d", resp.layout_version, index, size)
        return size
    return 0
