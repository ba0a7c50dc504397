"""docs/architecture.md names only what exists: every package of its Layers table, every path
(`ps/slots/ownership.py`, `master/job/`, also in its drawings) and every dotted module name
(`pswire.slots`, `ps.dataplane.data_plane`) is in the tree. Modules move; the test lists every
name the page lost at once, so one run says everything to fix."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from cluster.launch import CODE_ROOT
from tests.test_import_graph import DOC, layers

# a relative path: names joined by "/", ending in "/" (a folder) or a file with its suffix
PATH = re.compile(r"(?<![\w./:-])"
                  r"((?:[A-Za-z_][\w-]*/)+(?:[\w-]+\.(?:py|md|proto|toml|sh|ya?ml))?)"
                  r"(?![\w/-])")
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)`")


def named_paths(text: str, roots: set[str]) -> set[str]:
    """The repository paths the text names: those whose first part is a top-level folder."""
    return {p for p in PATH.findall(text) if p.split("/", 1)[0] in roots}


def named_modules(text: str, packages: set[str]) -> set[str]:
    """The dotted names in backticks that start with one of the project's packages."""
    return {m for m in DOTTED.findall(text) if m.split(".", 1)[0] in packages}


def _module_file(root: Path, parts: list[str]) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _defines(path: Path, name: str) -> bool:
    """Whether the module at `path` binds `name` at its top level (def, class, =, import)."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def module_exists(root: Path, dotted: str) -> bool:
    """`a.b.c` is a module or package, or a name its longest module prefix defines."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module_file(root, parts[:cut])
        if found is not None:
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and _defines(found, rest[0]))
    return False


def missing_names(text: str, root: Path, rules: dict[str, set[str]]) -> list[str]:
    roots = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")}
    missing = [f"package {p}" for p in sorted(rules) if _module_file(root, [p]) is None]
    for path in sorted(named_paths(text, roots | set(rules))):
        there = root / path
        if not (there.is_dir() if path.endswith("/") else there.is_file()):
            missing.append(path)
    missing += [m for m in sorted(named_modules(text, set(rules))) if not module_exists(root, m)]
    return missing


def test_every_module_and_package_the_page_names_exists():
    text = DOC.read_text()
    rules = layers()
    assert len(named_paths(text, set(rules))) >= 20  # the page is read: it names many
    missing = missing_names(text, CODE_ROOT, rules)
    assert not missing, "docs/architecture.md names what is not in the tree:\n  " + \
        "\n  ".join(missing)


def test_the_check_reports_every_missing_name_at_once(tmp_path):
    (tmp_path / "ps" / "dataplane").mkdir(parents=True)
    (tmp_path / "ps" / "__init__.py").write_text("")
    (tmp_path / "ps" / "dataplane" / "__init__.py").write_text(
        "from .transport import DataPlane\n\ndef data_plane():\n    pass\n")
    (tmp_path / "ps" / "params.py").write_text("class ParamStore:\n    pass\n")
    text = ("| ps | protos |\n`ps/params.py` and `ps/store/` (ps/gone.py), "
            "`ps.dataplane.data_plane`, `ps.dataplane.DataPlane`, `ps.params.Nothing`, "
            "`ps.slots`, https://example.com/ps/x.py, `other/thing.py`")
    rules = {"ps": {"protos"}, "protos": set()}
    assert missing_names(text, tmp_path, rules) == [
        "package protos", "ps/gone.py", "ps/store/", "ps.params.Nothing", "ps.slots"]
