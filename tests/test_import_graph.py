"""Who imports whom, checked against docs/architecture.md (issue 24).

The table under "Layers" in docs/architecture.md says which packages each package may import;
this test reads it from the page and checks every import of every module (also those inside
functions; not those under `if TYPE_CHECKING:`), so the page cannot drift from the code. It
also refuses import cycles between modules and hand-written modules over 450 lines.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cluster.launch import CODE_ROOT

MAX_LINES = 450
DOC = CODE_ROOT / "docs" / "architecture.md"


def layers(doc: Path = DOC) -> dict[str, set[str]]:
    """package -> the packages it may import, from the page's "Layers" table."""
    text = doc.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rules = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("package", "") or set(cells[0]) <= {"-", " "}:
            continue
        rules[cells[0]] = {p.strip() for p in cells[1].split(",") if p.strip()}
    return rules


def modules(root: Path, packages) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree) -> set[int]:
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            hidden |= {id(sub) for sub in ast.walk(node)}
    return hidden


def import_graph(root: Path, packages) -> dict[str, set[str]]:
    """module -> the project's modules it imports (a package's own parents are implicit)."""
    mods = modules(root, packages)
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        hidden = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        wanted = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                wanted |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    candidate = f"{base}.{alias.name}" if base else alias.name
                    wanted.add(candidate if candidate in mods else base)
        targets = set()
        for target in wanted:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def violations(graph: dict[str, set[str]], rules: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        own = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != own and other not in rules.get(own, set()):
                bad.append(f"{module} imports {target}")
            if module.startswith("worker_sdk.data") and target.startswith("worker_sdk.ps"):
                bad.append(f"{module} imports {target} (the data side never imports the "
                           "model side)")
    return bad


def test_the_layers_table_names_every_package():
    rules = layers()
    on_disk = {p.name for p in CODE_ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests"}
    assert set(rules) == on_disk
    assert all(deps <= set(rules) for deps in rules.values())


def test_every_import_follows_the_layers_of_docs_architecture():
    rules = layers()
    graph = import_graph(CODE_ROOT, rules)
    assert len(graph) > 100  # the walk found the code
    assert violations(graph, rules) == []


def test_no_module_is_part_of_an_import_cycle():
    assert cycles(import_graph(CODE_ROOT, layers())) == []


def test_no_hand_written_module_is_over_450_lines():
    long = {}
    for path in modules(CODE_ROOT, layers()).values():
        if re.search(r"_pb2(_grpc)?\.py$", path.name):
            continue  # generated
        n = len(path.read_text().splitlines())
        if n > MAX_LINES:
            long[str(path.relative_to(CODE_ROOT))] = n
    assert long == {}


def test_the_checks_find_a_cycle_a_layer_breach_and_the_model_side_imported(tmp_path):
    """The checks above can fail: a planted tree with each fault is caught."""
    def write(name: str, text: str = "") -> None:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    for package in ("worker_sdk", "worker_sdk/data", "worker_sdk/ps", "ps", "pswire"):
        write(f"{package}/__init__.py")
    write("worker_sdk/data/a.py", "from . import b\n")
    write("worker_sdk/data/b.py", "def f():\n    from .a import x\n")  # a lazy cycle
    write("worker_sdk/data/c.py", "from ..ps import client\n")         # data -> ps
    write("worker_sdk/ps/client.py", "import ps.params\nfrom pswire import frames\n")
    write("ps/params.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    import worker_sdk\n")                      # hidden: allowed
    write("pswire/frames.py")
    rules = {"worker_sdk": {"pswire"}, "ps": {"pswire"}, "pswire": set()}
    graph = import_graph(tmp_path, rules)
    assert cycles(graph) == [["worker_sdk.data.a", "worker_sdk.data.b"]]
    assert violations(graph, rules) == [
        "worker_sdk.data.c imports worker_sdk.ps.client (the data side never imports the "
        "model side)",
        "worker_sdk.ps.client imports ps.params",
    ]


@pytest.mark.parametrize("row, expected", [("| ps | protos, pswire |", {"ps": {"protos", "pswire"}}),
                                           ("| protos | |", {"protos": set()})])
def test_the_layers_table_is_read_as_written(tmp_path, row, expected):
    doc = tmp_path / "a.md"
    doc.write_text(f"# x\n\n## Layers\n\n| package | may import |\n| --- | --- |\n{row}\n\n## Next\n"
                   "| master | ps |\n")
    assert layers(doc) == expected
