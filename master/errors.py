"""Errors the master's core raises; the gRPC adapter maps `code` to a grpc.StatusCode name."""
from __future__ import annotations


class ServiceError(Exception):
    """A refused request. `code` is a gRPC status name; the message says what to fix."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> ServiceError:
    return ServiceError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServiceError:
    return ServiceError("NOT_FOUND", message)


def already_exists(message: str) -> ServiceError:
    return ServiceError("ALREADY_EXISTS", message)


def precondition(message: str) -> ServiceError:
    return ServiceError("FAILED_PRECONDITION", message)
