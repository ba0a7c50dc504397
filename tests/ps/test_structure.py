"""The PS store owns its state (issue 41), read from the code with `ast`.

- No module of ps/ assigns another object's private attribute (`x._name = ...`,
  `x._name[k] = ...`, `x._name += ...` where x is not `self` or `cls`): the class that owns
  a field is the only code that changes it, so a helper module cannot edit a table's or the
  store's internals behind its methods.
- A `Table` is constructed in one place only, `ParamStore.make_table` (ps/store/params.py):
  every table a declaration, a restore, a delta or a slot move creates gets the same options
  (its share of `max_rows` under the slots this PS owns).
- No function in ps/ is over 100 lines (a project rule).
"""
from __future__ import annotations

import ast
from pathlib import Path

from cluster.launch import CODE_ROOT

PS = CODE_ROOT / "ps"
TABLE_MAKER = ("ps/store/params.py", "make_table")
MAX_FUNCTION_LINES = 100


def _sources(root: Path) -> dict[str, ast.Module]:
    return {str(p.relative_to(root.parent)): ast.parse(p.read_text(), str(p))
            for p in sorted(root.rglob("*.py"))}


def _targets(node) -> list:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def private_assignments(trees: dict[str, ast.Module]) -> list[str]:
    """`path:line target` for every assignment to a private attribute of an object other
    than `self` / `cls` (the attribute itself, an item of it, or within a tuple target)."""
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            for target in _targets(node):
                for sub in ast.walk(target):
                    if not (isinstance(sub, ast.Attribute) and sub.attr.startswith("_")
                            and not sub.attr.startswith("__")):
                        continue
                    owner = sub.value
                    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                        continue
                    found.append(f"{path}:{node.lineno} {ast.unparse(target)}")
    return found


def _functions(tree: ast.Module):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


class _TableCalls(ast.NodeVisitor):
    """Calls `Table(...)` / `x.Table(...)`, each with the innermost function it is in."""

    def __init__(self, path: str) -> None:
        self.path, self.where, self.found = path, ["<module>"], []

    def visit_FunctionDef(self, node) -> None:
        self.where.append(node.name)
        self.generic_visit(node)
        self.where.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")) == "Table":
            self.found.append((self.path, self.where[-1]))
        self.generic_visit(node)


def table_constructions(trees: dict[str, ast.Module]) -> list[tuple[str, str]]:
    """(path, enclosing function) of every call that constructs a Table."""
    found = []
    for path, tree in trees.items():
        calls = _TableCalls(path)
        calls.visit(tree)
        found += calls.found
    return sorted(found)


def long_functions(trees: dict[str, ast.Module], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    return [f"{path}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
            for path, tree in trees.items() for fn in _functions(tree)
            if fn.end_lineno - fn.lineno + 1 > limit]


def test_no_module_of_ps_assigns_another_objects_private_attribute():
    trees = _sources(PS)
    assert len(trees) > 40  # the walk found the code
    assert private_assignments(trees) == []


def test_a_table_is_constructed_in_one_place():
    made = table_constructions(_sources(PS))
    assert made == [TABLE_MAKER]


def test_no_function_of_ps_is_over_100_lines():
    assert long_functions(_sources(PS)) == []


def test_the_checks_find_what_they_refuse(tmp_path):
    """The checks above can fail: a planted package with each fault is caught, and what the
    rules allow passes."""
    root = tmp_path / "ps"
    root.mkdir()
    (root / "a.py").write_text(
        "class T:\n"
        "    def __init__(self):\n"
        "        self._rows = None\n"          # its own field: allowed
        "        self._by_id[1] = 2\n"
        "def helper(table, store):\n"
        "    table._rows = []\n"               # another object's field
        "    store.part._cache[3] = 4\n"       # an item of another object's field
        "    store._count += 1\n"
        "    table.public, table._hidden = 1, 2\n"
        "    table.__dict__ = {}\n")           # a dunder: not a private field
    (root / "b.py").write_text(
        "from .t import Table\n"
        "def make():\n"
        "    return Table()\n"
        "def other(m):\n"
        "    return m.Table(1)\n"
        "def long():\n" + "    x = 1\n" * 101)
    trees = _sources(root)
    assert private_assignments(trees) == [
        "ps/a.py:6 table._rows", "ps/a.py:7 store.part._cache[3]", "ps/a.py:8 store._count",
        "ps/a.py:9 (table.public, table._hidden)"]
    assert table_constructions(trees) == [("ps/b.py", "make"), ("ps/b.py", "other")]
    assert long_functions(trees) == ["ps/b.py:6 long (102 lines)"]
