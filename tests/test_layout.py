"""What is installed and who imports whom (issue 24): `pip install .` installs only the
project's own packages as top-level names, and nothing infrastructural imports the examples
or the benchmarks (they run from the checkout)."""
from __future__ import annotations

import ast

import pytest
from setuptools import find_packages

from cluster.launch import CODE_ROOT

INSTALLED = {"master", "ps", "worker_sdk", "protos", "rpckit", "pswire", "engines"}
INFRASTRUCTURE = sorted(INSTALLED | {"cluster"})
RUN_FROM_THE_CHECKOUT = {"examples", "benchmarks", "tests", "scripts"}


def test_only_the_projects_own_packages_are_installed_as_top_level_names():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    config = tomllib.loads((CODE_ROOT / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(CODE_ROOT), include=find["include"],
                             exclude=find.get("exclude", ()))
    top = {name.split(".")[0] for name in packages}
    assert top <= INSTALLED and not top & RUN_FROM_THE_CHECKOUT, top
    assert {"master", "ps", "worker_sdk", "protos", "rpckit"} <= top


def imported_top_level_names(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_infrastructure_imports_the_examples_or_the_benchmarks():
    offenders = {}
    for package in INFRASTRUCTURE:
        for path in sorted((CODE_ROOT / package).rglob("*.py")):
            bad = imported_top_level_names(path) & RUN_FROM_THE_CHECKOUT
            if bad:
                offenders[str(path.relative_to(CODE_ROOT))] = sorted(bad)
    assert offenders == {}
