"""A server's command line as a parser the tests can walk: `server_parser(parse, monkeypatch)`
is the FlagParser that `master.settings.parse` or `ps.settings.parse` builds, caught before it
parses anything (no process, no network)."""
from __future__ import annotations

import argparse

import pytest

from rpckit.settings import FlagParser


class _Parsed(Exception):
    pass


def server_parser(parse, monkeypatch) -> argparse.ArgumentParser:
    seen = {}

    def grab(self, cls, argv, check=None):
        seen["parser"] = self
        raise _Parsed

    monkeypatch.setattr(FlagParser, "settings", grab)
    with pytest.raises(_Parsed):
        parse([])
    return seen["parser"]
