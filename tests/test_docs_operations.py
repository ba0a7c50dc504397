"""docs/operations.md names every flag of elastic-master, elastic-ps and elastic-ctl, and its
certificate recipe makes files our servers serve TLS with."""
from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster.launch import Launcher
from master.ctl import cli as ctl
from master import settings as master_settings
from ps import settings as ps_settings
from rpckit.settings import env_name
from tests.flags import server_parser

DOC = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[-1] for a in parser._actions
            if a.option_strings and a.option_strings[-1] != "--help"]


@pytest.mark.parametrize("parse", [master_settings.parse, ps_settings.parse],
                         ids=["master", "ps"])
def test_every_server_flag_and_its_variable_is_documented(parse, monkeypatch):
    flags = _flags(server_parser(parse, monkeypatch))
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


def test_no_table_repeats_its_header_row():
    lines = DOC.splitlines()
    for i, line in enumerate(lines[2:], start=2):
        if line.startswith("|") and lines[i - 2] == line and set(lines[i - 1]) <= set("|- "):
            raise AssertionError(f"docs/operations.md line {i + 1} repeats the header {line!r}")


def _recipe() -> str:
    """The shell block that follows the `certificate-recipe` marker in docs/operations.md."""
    after = DOC.split("<!-- certificate-recipe -->", 1)[1]
    fence = after.index("```sh\n") + len("```sh\n")
    return after[fence:after.index("```", fence)]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="the recipe needs openssl")
def test_the_certificate_recipe_makes_files_the_servers_and_clients_accept(tmp_path):
    """Runs the documented recipe as it stands, then a master and a PS serving TLS with its
    files: the PS registers over TLS, the master health-checks it over TLS, and elastic-ctl
    given the recipe's CA sees both."""
    certs = tmp_path / "certs"
    certs.mkdir()
    made = subprocess.run(["bash", "-c", _recipe()], cwd=certs, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    ca = str(certs / "ca.pem")
    with Launcher(tmp_path / "procs") as launcher:
        master = launcher.master("--tls-cert", str(certs / "master.pem"),
                                 "--tls-key", str(certs / "master.key"), "--tls-ca", ca,
                                 tls_ca=ca)
        launcher.ps(master.address, "--tls-cert", str(certs / "ps0.pem"),
                    "--tls-key", str(certs / "ps0.key"), "--tls-ca", ca)
        deadline = time.monotonic() + 30
        while True:
            out = launcher.run("-m", "master.ctl", "--master", master.address, "--tls-ca", ca,
                               "status")
            assert out.returncode == 0, out.stderr
            if " primary  alive " in out.stdout:  # registered, and its health check passes
                break
            assert time.monotonic() < deadline, out.stdout
            time.sleep(0.2)
        plain = launcher.run("-m", "master.ctl", "--master", master.address, "status")
        assert plain.returncode == 1 and "ELASTIC_PS_TLS_CA" in plain.stderr
