"""The one-way rule (ARCHITECTURE.md): no import circle between specgauge's packages, nor between its
files, every import statement counted (lazy, function-level ones and those under ``TYPE_CHECKING`` too).
A circle prints the edges that close it, each with the modules."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _modules(src: Path = SRC) -> dict[str, Path]:
    mods = {}
    for p in (src / "specgauge").rglob("*.py"):
        name = ".".join(p.relative_to(src).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _package(mod: str) -> str:
    return ".".join(mod.split(".")[:2])


@cache
def _imports(src: Path = SRC) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """(module, every specgauge module a statement of it names (``from a import b``: ``a`` and ``a.b``),
    the file each statement imports: ``a.b`` where that is a module, else ``a``), every statement counted."""
    mods = _modules(src)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out = []
    for mod, path in mods.items():
        named: list[str] = []
        files: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
                targets = names
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            else:
                continue
            named += [t for n in names if (t := resolve(n))]
            files += [t for n in targets if (t := resolve(n)) and t != mod]
        out.append((mod, tuple(named), tuple(files)))
    return tuple(out)


def package_edges() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["importer -> imported", ...], every import statement counted."""
    edges: dict[str, dict[str, list[str]]] = {}
    for mod, named, _ in _imports(SRC):
        for target in named:
            a, b = _package(mod), _package(target)
            if a != b and "specgauge" not in (a, b):
                edges.setdefault(a, {}).setdefault(b, []).append(f"{mod} -> {target}")
    return edges


def file_edges(src: Path = SRC) -> dict[str, set[str]]:
    """module -> the modules (files) it imports. ``from pkg import name`` imports ``pkg/__init__.py``
    unless ``name`` is a module of its own; a module's parent packages, which Python runs first, are
    not counted (every submodule would close a circle with an ``__init__.py`` that re-exports it)."""
    return {mod: set(files) for mod, _, files in _imports(src)}


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


def test_no_file_import_circle() -> None:
    """No two files import each other, directly or around a loop (``drafters/suffix/`` was one:
    ``suffix.py`` imported ``_suffix_positions.py``, which imported ``suffix.py`` back for a type)."""
    edges = file_edges()
    cycles = _cycles(edges)
    lines = []
    for c in cycles:
        lines.append(" <-> ".join(sorted(c)))
        lines += [f"    {a} -> {b}" for a in sorted(c) for b in sorted(c & edges[a])]
    assert not cycles, "file import circles (lazy and TYPE_CHECKING imports count):\n" + "\n".join(lines)


def test_the_file_checker_sees_a_circle_through_a_lazy_or_type_only_import(tmp_path: Path) -> None:
    """A lazy import and one under ``TYPE_CHECKING`` close a circle too; a package's ``__init__`` that
    re-exports its module does not."""
    pkg = tmp_path / "specgauge"
    (pkg / "p").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "p" / "__init__.py").write_text("from specgauge.p.a import A\n")
    (pkg / "p" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specgauge.p.b import B\nA = 1\n")
    (pkg / "p" / "b.py").write_text("def f():\n    from specgauge.p import a\n    return a\nB = 2\n")
    (pkg / "p" / "c.py").write_text("from specgauge.p.a import A\n")
    edges = file_edges(tmp_path)
    assert _cycles(edges) == [{"specgauge.p.a", "specgauge.p.b"}]
    assert edges["specgauge.p.c"] == {"specgauge.p.a"}


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


# --- floors: ARCHITECTURE.md's table is the one list; an import may stay on its floor or go down, never up ---

ARCHITECTURE = SRC.parent / "ARCHITECTURE.md"


def floor_table(text: str | None = None) -> dict[str, tuple[int, str]]:
    """``specgauge``'s top-level name (``stats``, ``calibrate``, ``__init__``) -> (floor number, floor name),
    read from ARCHITECTURE.md's table: one row per floor, lowest first; its second column names the floor's
    folders (``stats/``) and modules (``calibrate.py``) in backticks."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| floor", "|---"))]
    table: dict[str, tuple[int, str]] = {}
    for i, line in enumerate(rows):
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[1]):
            key = name.removesuffix("/").removesuffix(".py")
            assert key not in table, f"ARCHITECTURE.md places {name} twice"
            table[key] = (i, cells[0])
    return table


def _top(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_statements(src: Path = SRC) -> list[tuple[str, Path, int, str]]:
    """(importer module, its file, line, imported specgauge module) for every import statement, lazy ones
    and those under ``TYPE_CHECKING`` included; ``from specgauge import x`` names ``specgauge.x`` when that
    is a module, else the package's own ``__init__``; relative imports resolved against the importer."""
    mods = _modules(src)
    out = []
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            out += [(mod, path, node.lineno, n) for n in names if n == "specgauge" or n.startswith("specgauge.")]
    return out


def floor_breaks(src: Path = SRC, table: dict[str, tuple[int, str]] | None = None) -> tuple[list[str], list[str]]:
    """(imports that climb a floor, as ``file:line importer floor -> imported floor (module)``; modules
    no row of the table places)."""
    table = floor_table() if table is None else table
    unplaced = sorted({m for m in _modules(src) if _top(m) not in table})
    ups = []
    for mod, path, line, target in import_statements(src):
        a, b = table.get(_top(mod)), table.get(_top(target))
        if a is None or b is None:
            continue
        if b[0] > a[0]:
            where = path.relative_to(src).as_posix()
            ups.append(f"{where}:{line} {a[1]} ({_top(mod)}) -> {b[1]} ({target})")
    return sorted(ups), unplaced


def test_every_import_stays_on_its_floor_or_goes_down() -> None:
    ups, unplaced = floor_breaks()
    assert not unplaced, "modules no floor of ARCHITECTURE.md's table places (add them to a row):\n    " + "\n    ".join(unplaced)
    assert not ups, "imports that climb a floor (ARCHITECTURE.md's table, lowest row first):\n    " + "\n    ".join(ups)


def test_the_floor_checker_sees_a_lazy_climb_and_an_unplaced_module(tmp_path: Path) -> None:
    pkg = tmp_path / "specgauge"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from specgauge.high.b import B\n    return B\n")
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "high" / "b.py").write_text("from specgauge.low import a\nfrom typing import TYPE_CHECKING\n"
                                       "if TYPE_CHECKING:\n    from specgauge import stray\nB = 1\n")
    (pkg / "stray.py").write_text("")
    text = "| floor | folder / module | its job |\n|---|---|---|\n| ground | `__init__.py`, `low/` | x |\n| top | `high/` | y |\n"
    table = floor_table(text)
    assert table == {"__init__": (0, "ground"), "low": (0, "ground"), "high": (1, "top")}
    ups, unplaced = floor_breaks(tmp_path, table)
    assert ups == ["specgauge/low/a.py:2 ground (low) -> top (specgauge.high.b)"]
    assert unplaced == ["specgauge.stray"]


def test_the_table_names_only_what_exists() -> None:
    """A row that names a folder or module the code does not have is stale."""
    tops = {_top(m) for m in _modules()}
    assert not set(floor_table()) - tops, f"ARCHITECTURE.md places what does not exist: {sorted(set(floor_table()) - tops)}"
