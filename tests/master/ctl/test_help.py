"""Every argument of every command line says what it is for (issue 37): the parsers of
elastic-ctl (each subcommand), elastic-master and elastic-ps are walked, and an argument (or a
subcommand) without help fails here (no network, no process)."""
from __future__ import annotations

import argparse

import pytest

from master import settings as master_settings
from master.ctl import cli as ctl
from ps import settings as ps_settings
from tests.flags import server_parser


def _without_help(parser: argparse.ArgumentParser, where: str) -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            described = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not (described.get(name) or "").strip():
                    missing.append(f"{where} {name} (the subcommand)")
                missing += _without_help(sub, f"{where} {name}")
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if not (action.help or "").strip():
            name = "/".join(action.option_strings) or action.metavar or action.dest
            missing.append(f"{where} {name}")
    return missing


def test_every_elastic_ctl_argument_and_subcommand_has_help():
    parser = ctl.parser()
    assert _without_help(parser, "elastic-ctl") == []
    # the walk does reach the subcommands' arguments
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"status", "resize-ps", "drop"} <= set(commands.choices)
    resize = commands.choices["resize-ps"].format_help()
    assert "N" in resize and "PS count" in resize


@pytest.mark.parametrize("parse,name", [(master_settings.parse, "elastic-master"),
                                        (ps_settings.parse, "elastic-ps")])
def test_every_server_flag_has_help(parse, name, monkeypatch):
    parser = server_parser(parse, monkeypatch)
    assert len(parser._actions) > 10
    assert _without_help(parser, name) == []


def test_the_walk_finds_an_argument_without_help():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--fine", help="described")
    sub = parser.add_subparsers(dest="command")
    one = sub.add_parser("one", help="described")
    one.add_argument("thing")
    sub.add_parser("two")
    assert _without_help(parser, "x") == ["x one thing", "x two (the subcommand)"]


def test_the_data_ipc_help_names_the_same_host_socket_and_not_zeromq(monkeypatch):
    parser = server_parser(ps_settings.parse, monkeypatch)
    (ipc,) = [a for a in parser._actions if "--data-ipc" in a.option_strings]
    assert "same-host" in ipc.help and "unix://" in ipc.help and "not ZeroMQ" in ipc.help
    assert "ipc://" not in ipc.help
