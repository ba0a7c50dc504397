"""Test doubles that are real enough: a settable clock, a gRPC error with a code."""
from __future__ import annotations

import grpc


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeError(grpc.RpcError):
    """What a stub raises for a call that failed with `code`."""

    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "fake"
