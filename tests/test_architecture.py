"""The import rule of docs/design.md: no import cycle in ``suite/``, and every import goes down the floors or stays on one.

The graph is read from the source with :mod:`ast`, so it sees every import, at module level or inside a function
(a lazy import is still a dependency), except those under ``if TYPE_CHECKING:`` (annotations only; they never run).
An edge goes to the module an import names: ``from suite.envs import specs`` to ``suite.envs.specs`` (a module),
``from suite.envs import make_vec_env`` to the package ``suite.envs``. A package's ``__init__`` that runs when a
submodule is imported is not an edge of that import (it would put every package in a loop with its re-exports).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parent.parent / "suite"

FLOORS: tuple[tuple[str, ...], ...] = (
    ("suite", "suite.errors", "suite.config", "suite.context", "suite.seeding", "suite.loading", "suite.interrupts",
     "suite.provenance", "suite.textmatch", "suite.kernels"),
    ("suite.envs", "suite.store", "suite.stats", "suite.memory_probe", "suite.throughput",
     "suite.schedstat"),
    ("suite.registry",),
    ("suite.algorithms", "suite.accel"),
    ("suite.plugins",),
    ("suite.trial",),
    ("suite.study", "suite.plan", "suite.executors", "suite.profile", "suite.parity", "suite.api"),
    ("suite.report", "suite.claims", "suite.regress"),
    ("suite.cli",),
)  # fmt: skip
"""The floors, lowest first; an entry holds a module and, for a package, everything in it. A module may import its
own floor and the floors below, never one above (docs/design.md, "Floors")."""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, int]]:
    """Every import statement outside ``if TYPE_CHECKING:`` blocks (their ``else`` counts), at any depth."""
    found: list[tuple[ast.Import | ast.ImportFrom, int]] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, node.lineno))
        todo.extend(ast.iter_child_nodes(node))
    return found


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` for every module of the package at ``root`` (its own modules only)."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}

    def known(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node, line in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else known(base) for a in node.names]
            for target in targets:
                if target is not None and target != module:
                    edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def describe_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    """One shortest loop through the component's first module, with the line of each import."""
    members, first = set(component), component[0]
    parent: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for child in graph[node]:
            if child == first:
                path = [node]
                while path[-1] != first:
                    path.append(parent[path[-1]])
                path.reverse()
                hops = [f"{a} (line {graph[a][b]})" for a, b in zip(path, [*path[1:], first], strict=True)]
                return " -> ".join([*hops, first])
            if child in members and child not in parent and child != first:
                parent[child] = node
                queue.append(child)
    return " <-> ".join(component)  # not reached for a real component


def floor_of(module: str) -> int | None:
    for level, entries in enumerate(FLOORS):
        if any(module == e or (e != "suite" and module.startswith(e + ".")) for e in entries):
            return level
    return None


def test_the_suite_has_no_import_cycle() -> None:
    graph = import_graph(SUITE)
    loops = cycles(graph)
    assert not loops, "import cycles:\n" + "\n".join(describe_cycle(graph, c) for c in loops)


def test_every_module_has_a_floor_and_imports_only_its_floor_or_below() -> None:
    graph = import_graph(SUITE)
    unplaced = sorted(m for m in graph if floor_of(m) is None)
    assert not unplaced, f"modules on no floor (add them to FLOORS and to docs/design.md): {unplaced}"
    upward = [
        f"{module} (floor {floor_of(module)}) imports {target} (floor {floor_of(target)}) at line {line}"
        for module, targets in graph.items()
        for target, line in targets.items()
        if (floor_of(target) or 0) > (floor_of(module) or 0)
    ]
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    "low", ["suite.errors", "suite.config", "suite.context", "suite.store", "suite.envs", "suite.registry"]
)
def test_low_floors_never_import_the_runner_the_algorithms_the_executors_or_the_cli(low: str) -> None:
    graph = import_graph(SUITE)
    high = ("suite.trial", "suite.algorithms", "suite.executors", "suite.cli", "suite.plugins")
    bad = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m == low or m.startswith(low + ".")
        for t in targets
        if t.startswith(high)
    )
    assert not bad


def test_the_graph_sees_lazy_imports_and_skips_type_checking_blocks(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.c import C\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\nelse:\n    import json\n"
        "def f():\n    from pkg.sub import c\n"
    )
    (pkg / "b.py").write_text("import pkg.a\n")
    (pkg / "sub" / "c.py").write_text("from ..b import x\nclass C:\n    def g(self):\n        from pkg.sub import C\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.c": 7}  # the lazy import counts, the TYPE_CHECKING one does not
    assert graph["pkg.b"] == {"pkg.a": 1}
    assert graph["pkg.sub.c"] == {"pkg.b": 1, "pkg.sub": 4}  # relative import; the package for a name in it
    assert graph["pkg.sub"] == {"pkg.sub.c": 1}
    [loop] = cycles(graph)
    assert loop == ["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"]
    assert describe_cycle(graph, loop) == "pkg.a (line 7) -> pkg.sub.c (line 1) -> pkg.b (line 1) -> pkg.a"
