"""docs/operations.md names every flag of elastic-master, elastic-ps and elastic-ctl."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from master.ctl import cli as ctl
from master import settings as master_settings
from ps import settings as ps_settings
from rpckit.settings import FlagParser, env_name

DOC = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()


class _Parsed(Exception):
    pass


def _parser(parse, monkeypatch) -> argparse.ArgumentParser:
    seen = {}

    def grab(self, cls, argv, check=None):
        seen["parser"] = self
        raise _Parsed

    monkeypatch.setattr(FlagParser, "settings", grab)
    with pytest.raises(_Parsed):
        parse([])
    return seen["parser"]


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[-1] for a in parser._actions
            if a.option_strings and a.option_strings[-1] != "--help"]


@pytest.mark.parametrize("parse", [master_settings.parse, ps_settings.parse],
                         ids=["master", "ps"])
def test_every_server_flag_and_its_variable_is_documented(parse, monkeypatch):
    flags = _flags(_parser(parse, monkeypatch))
    assert "--metrics-port" in flags
    for flag in flags:
        assert f"| `{flag}` |" in DOC, flag
        assert f"`{env_name(flag)}`" in DOC, env_name(flag)


def test_every_ctl_option_and_command_is_documented():
    parser = ctl.parser()
    for flag in _flags(parser):
        assert f"| `{flag}` |" in DOC, flag
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name in commands.choices:
        assert f"| `{name}` |" in DOC, name
