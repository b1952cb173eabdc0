"""What the README and docs/ say, read the way a person pastes it: fenced blocks, the commands in them, links.

Used by tests/integration/test_readme_recipes.py (runs the README's recipes) and tests/unit/test_docs.py
(every link resolves, every `specgauge CMD --flag` names a flag CMD has)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\S*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    lang: str
    lines: tuple[str, ...]
    first_line: int  # 1-based line number of the block's first content line


@dataclass(frozen=True)
class Command:
    text: str  # one shell command, continuation lines joined
    line: int  # where it starts in the file
    comments_before: tuple[str, ...]  # full-line comments between the previous command and this one


def fenced_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lang, buf, start = None, [], 0
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if lang is None and m:
            lang, buf, start = m.group(1), [], n + 1
        elif lang is not None and line.startswith("```"):
            blocks.append(Block(lang, tuple(buf), start))
            lang = None
        elif lang is not None:
            buf.append(line)
    return blocks


def commands(block: Block) -> list[Command]:
    """The block's shell commands: backslash continuations joined; full-line comments kept aside."""
    out: list[Command] = []
    comments: list[str] = []
    cur: list[str] = []
    start = 0
    for i, line in enumerate(block.lines):
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            if s:
                comments.append(s)
            continue
        if not cur:
            start = block.first_line + i
        cur.append(s[:-1].rstrip() if s.endswith("\\") else s)
        if not s.endswith("\\"):
            out.append(Command(" ".join(cur), start, tuple(comments)))
            cur, comments = [], []
    return out


def trailing_comments(block: Block) -> tuple[str, ...]:
    """Full-line comments after the block's last command."""
    tail: list[str] = []
    for line in reversed(block.lines):
        s = line.strip()
        if s and not s.startswith("#"):
            break
        if s:
            tail.append(s)
    return tuple(reversed(tail))


def links(text: str) -> list[str]:
    """Relative link targets outside code blocks (no scheme, no pure anchors), without their #anchor."""
    out: list[str] = []
    in_code = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            out.append(target.split("#", 1)[0])
    return out
