"""rpckit.server.announce: a start line and its newline leave in one write."""
from __future__ import annotations

import io
import sys

from rpckit.server import announce


class Writes(io.StringIO):
    """A stdout that records each write, as an unbuffered stream passes each one on."""

    def __init__(self):
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_a_start_line_is_one_write_ending_in_a_newline(monkeypatch):
    out = Writes()
    monkeypatch.setattr(sys, "stdout", out)
    announce("elastic-master listening on 127.0.0.1:5 (pid 1) as leader")
    # print() would make two writes: a log line of another thread could land between them
    assert out.writes == ["elastic-master listening on 127.0.0.1:5 (pid 1) as leader\n"]
