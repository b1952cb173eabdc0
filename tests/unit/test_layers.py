"""The one-way rule (ARCHITECTURE.md): no import circle between specgauge's packages, lazy
(function-level) imports counted. A circle prints the edges that close it, each with the modules."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in (SRC / "specgauge").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _package(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


def package_edges() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["importer -> imported", ...], every import statement counted."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, list[str]]] = {}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for n in names:
                target = resolve(n)
                a, b = _package(mod), _package(target) if target else ""
                if target and a != b and "specgauge" not in (a, b):
                    edges.setdefault(a, {}).setdefault(b, []).append(f"{mod} -> {target}")
    return edges


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_package_import_circle() -> None:
    edges = package_edges()
    cycles = _cycles({a: set(b) for a, b in edges.items()})
    lines = []
    for c in cycles:
        lines.append(" <-> ".join(sorted(c)))
        for a in sorted(c):
            for b in sorted(c & set(edges.get(a, {}))):
                lines.append(f"    {a} -> {b}: " + ", ".join(sorted(set(edges[a][b]))[:3]))
    assert not cycles, "package import circles (lazy imports count):\n" + "\n".join(lines)


def test_the_checker_sees_a_lazy_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    edges = package_edges()
    assert "specgauge.drafters" in edges.get("specgauge.offline", {})  # offline replays through drafters
    assert "specgauge.simulate" not in edges.get("specgauge.stats", {})  # stats sits below simulate
    assert "specgauge.nn" in edges.get("specgauge.drafters", {})  # the draft model and the heads run on nn
    assert "specgauge.engine" not in edges.get("specgauge.drafters", {})  # the engine sits above the drafters


def test_the_product_never_imports_its_test_doubles() -> None:
    """``specgauge.testing`` (fake and scripted servers, tiny random models) sits above everything:
    the tests, the benchmarks and a user's checks use it; no product module does, lazily or not."""
    users = {a: b["specgauge.testing"] for a, b in package_edges().items() if "specgauge.testing" in b}
    assert not users, f"product modules import specgauge.testing: {users}"
    assert "specgauge.predict" in package_edges().get("specgauge.testing", {})  # the checker sees testing's own imports
