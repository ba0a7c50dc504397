"""Errors the worker SDK raises; each message says what happened and what to do about it."""
from __future__ import annotations


class ElasticError(Exception):
    """Base class of the worker SDK's errors."""


class MasterUnavailable(ElasticError):
    """The master could not be reached for longer than the retry budget."""


class MasterError(ElasticError):
    """The master refused a call (bad input, unknown dataset, ...). `code` is the gRPC status
    name, `reason` the machine-readable why (rpckit.errors.Reason) to branch on."""

    def __init__(self, code: str, message: str, reason: str = ""):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class DatasetSpecMismatch(MasterError, ValueError):
    """A dataset of the same name exists on the master with a different spec."""


class Cancelled(ElasticError):
    """A call was abandoned between retries because the worker is shutting down."""
