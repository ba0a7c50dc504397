"""PSError: a refusal with a gRPC status code name and a message a person can act on.

The store raises it, the data plane puts its code and message into `DataResponse`, the gRPC
servicer aborts with it, and the client raises it again on the worker's side.
"""
from __future__ import annotations

CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)


class PSError(Exception):
    """A request the PS refused (or could not answer); `code` is a gRPC status code name."""

    def __init__(self, code: str, message: str):
        if code not in CODES:
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def invalid(message: str) -> PSError:
    return PSError("INVALID_ARGUMENT", message)


def not_found(message: str) -> PSError:
    return PSError("NOT_FOUND", message)


def precondition(message: str) -> PSError:
    return PSError("FAILED_PRECONDITION", message)


def unavailable(message: str) -> PSError:
    return PSError("UNAVAILABLE", message)
