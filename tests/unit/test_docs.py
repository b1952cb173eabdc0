"""The README and docs/ stay true to the code: links resolve, every `specgauge CMD --flag` in a code block
names a command and a flag that exist, docs/README.md indexes every page, the README stays short.

(The README's recipes themselves run in tests/integration/test_readme_recipes.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from specgauge.cli import app
from tests._markdown import ROOT, commands, fenced_blocks, links

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 250


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks, where `# ...` is a shell comment)."""
    out: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)$", line)):
            out.add(_slug(m.group(1)))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in links(text):
        dest = (page.parent / target).resolve()
        assert dest.exists(), f"{page.relative_to(ROOT)}: link to {target} goes nowhere"
    for m in re.finditer(r"\]\(([^)\s#]+\.md)#([^)\s]+)\)", text):
        dest = (page.parent / m.group(1)).resolve()
        if dest.exists():
            assert m.group(2) in _anchors(dest), f"{page.relative_to(ROOT)}: {m.group(1)} has no heading #{m.group(2)}"


def _flags() -> dict[str, set[str]]:
    group = typer.main.get_command(app)
    out: dict[str, set[str]] = {}
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        out[name] = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    return out


def _specgauge_commands(text: str) -> list[tuple[int, str]]:
    """Every `specgauge ...` in a code block, with its continuation lines (a synopsis indents them)."""
    found: list[tuple[int, str]] = []
    for block in fenced_blocks(text):
        if block.lang not in ("bash", "sh", ""):
            continue
        for c in commands(block):
            for part in re.split(r"&&|\|\||;|\|", c.text):
                part = part.strip()
                if part.startswith("specgauge "):
                    found.append((c.line, part))
        # a synopsis: indented lines continue the command above them
        cur: list[str] = []
        for i, line in enumerate(block.lines):
            if line.startswith("specgauge "):
                cur = [line]
            elif cur and line.startswith(" ") and line.strip():
                cur.append(line)
                found.append((block.first_line + i, " ".join(cur)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_and_flags_exist(page: Path) -> None:
    flags = _flags()
    for line, cmd in _specgauge_commands(page.read_text(encoding="utf-8")):
        try:
            words = shlex.split(cmd, comments=True)
        except ValueError:  # a synopsis with an unbalanced quote inside brackets: words are enough
            words = cmd.split()
        sub = words[1] if len(words) > 1 else ""
        assert sub in flags, f"{page.relative_to(ROOT)}:{line}: specgauge has no command {sub!r}"
        for w in words[2:]:
            w = w.lstrip("[(|")
            if re.match(r"--[a-z]", w):  # a quoted value (a --server-cmd template) is one word: its flags are not ours
                flag = re.split(r"[=\]\[|)]", w, maxsplit=1)[0]
                assert flag in flags[sub], f"{page.relative_to(ROOT)}:{line}: `specgauge {sub}` has no {flag}"


def test_docs_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = {Path(t).name for t in links(index)}
    for page in DOCS.glob("*.md"):
        if page.name != "README.md":
            assert page.name in listed, f"docs/README.md does not list {page.name}"


def test_readme_is_short() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; the deep notes belong in docs/ (limit {README_MAX_LINES})"
