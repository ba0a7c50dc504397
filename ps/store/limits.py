"""What one data-plane request may cost the PS: the per-request bounds and their checks.

A request is refused whole before anything is allocated or changed when it is over a bound
(RESOURCE_EXHAUSTED, reason TOO_LARGE; the message names the flag to raise), so no single
message can make the PS allocate without limit or hold a table's lock for seconds. Names that
repeat inside one request are INVALID_ARGUMENT (a Pull naming one tensor K times would
otherwise answer K frames of it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rpckit.errors import Reason, ServiceError, invalid, quote


@dataclass(frozen=True)
class Limits:
    # Tensor names in one Pull (and tensors in one Push or InitParameters).
    max_names: int = 10_000
    # Frames in one message, the header included; a longer message is refused before its
    # frames are taken from the socket.
    max_frames: int = 10_001
    # Embedding rows one PullRows or PushRows may create (ids seen for the first time).
    max_new_rows: int = 131_072

    def check(self) -> list[str]:
        problems = []
        if self.max_names < 1:
            problems.append("--max-request-names must be >= 1")
        if self.max_frames < 3:
            problems.append("--max-request-frames must be >= 3")
        if self.max_new_rows < 1:
            problems.append("--max-new-rows must be >= 1")
        return problems


def too_large(message: str) -> ServiceError:
    return ServiceError("RESOURCE_EXHAUSTED", Reason.TOO_LARGE, message)


def check_names(names: Sequence[str], limits: Limits, what: str) -> None:
    """Refuse more than `limits.max_names` names, or a name twice, in one request."""
    if len(names) > limits.max_names:
        raise too_large(f"{what} names {len(names)} tensors; at most {limits.max_names} per "
                        "request (--max-request-names): split it")
    if len(set(names)) != len(names):
        seen: set[str] = set()
        twice = next(n for n in names if n in seen or seen.add(n))
        raise invalid(f"{what} names tensor {quote(twice)} more than once; name each once")


