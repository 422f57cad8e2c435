"""Imports flow one way: pipelines → components → termrl.

The library (``termrl``) never imports a stage or a pipeline; a stage never
imports another stage (shared stage code lives in plain modules beside the
stage packages, such as ``components/images.py``); termrl's packages import
each other without a cycle, and no two modules anywhere do (a constant two
modules share lives below both, not in one of them). Every import counts,
including those inside functions.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` with the cyclic garbage collector off: on CPython 3.11 a finalizer that runs
    while the tree is built (an object an earlier test left for the collector) fails the parse
    with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), filename=str(path))
    finally:
        if enabled:
            gc.enable()


def _imports(path: Path) -> Iterator[str]:
    """Every module name ``path`` imports (absolute imports; relative ones are resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node.module


def _modules(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def test_the_library_imports_no_stage_and_no_pipeline() -> None:
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _modules("termrl")
        for name in _imports(path)
        if name.split(".")[0] in ("components", "pipelines")
    ]
    assert offending == []


def test_a_stage_imports_no_other_stage_and_no_pipeline() -> None:
    stages = {p.name for p in (ROOT / "components").iterdir() if (p / "__init__.py").is_file()}
    offending = []
    for stage in sorted(stages):
        for path in _modules(f"components/{stage}"):
            for name in _imports(path):
                parts = name.split(".")
                other_stage = (
                    parts[0] == "components" and len(parts) > 1 and parts[1] in stages - {stage}
                )
                if other_stage or parts[0] == "pipelines":
                    offending.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offending == []


def _package_graph() -> dict[str, set[str]]:
    """termrl subpackage -> the other termrl subpackages it imports (modules at the top count as their own)."""
    graph: dict[str, set[str]] = {}
    for path in _modules("termrl"):
        parts = path.relative_to(ROOT / "termrl").with_suffix("").parts
        here = parts[0]
        graph.setdefault(here, set())
        for name in _imports(path):
            words = name.split(".")
            if words[0] == "termrl" and len(words) > 1 and words[1] != here:
                graph[here].add(words[1])
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle among the packages (as a path that ends where it starts), or []."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def test_the_library_packages_import_each_other_without_a_cycle() -> None:
    # sandbox is below tbcompat (stand-ins and the test kit build on its base images and build
    # tools), tbcompat is below taskfolders (a folder is adapted as it is read), and so on.
    assert _cycle(_package_graph()) == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, known: Collection[str]) -> Iterator[str]:
    """The modules among ``known`` that ``path`` imports: ``from pkg import mod`` names ``pkg.mod``
    when that is a module, else ``pkg``; an import of a name inside a module names that module."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{above}.{base}" if base else above
            names = [f"{base}.{alias.name}" for alias in node.names]
            names = [name if name in known else base for name in names]
        else:
            continue
        for name in names:
            words = name.split(".")
            found = next(
                (m for m in (".".join(words[:n]) for n in range(len(words), 0, -1)) if m in known),
                None,
            )
            if found is not None:
                yield found


def _module_graph(tops: Sequence[str]) -> dict[str, set[str]]:
    """Module -> the other modules it imports, over every module under ``tops``."""
    paths = {_module_name(path): path for top in tops for path in _modules(top)}
    return {
        name: set(_imported_modules(path, paths)) - {name} for name, path in sorted(paths.items())
    }


def test_no_two_modules_import_each_other_even_through_others() -> None:
    # A module-level cycle hides inside a package (the package graph above cannot see it): the
    # sandbox backends once imported each other through constants parked in a sibling backend.
    cycle = _cycle(_module_graph(["termrl", "components", "pipelines"]))
    assert cycle == [], "import cycle: " + " -> ".join(cycle)


def test_the_module_graph_resolves_what_an_import_names() -> None:
    graph = _module_graph(["termrl", "components"])
    # `from termrl.sandbox import procs` imports the module procs, not the package's __init__
    assert "termrl.sandbox.procs" in graph["termrl.sandbox.fresh"]
    assert "termrl.sandbox" not in graph["termrl.sandbox.fresh"]
    # an import of a name defined in a module (a class) names that module
    assert "termrl.sandbox.spec" in graph["termrl.sandbox.manager"]
    # `from termrl.sandbox import SandboxManager` imports the package's __init__
    assert "termrl.sandbox" in graph["components.verify.runner"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
