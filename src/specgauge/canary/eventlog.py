"""``decisions.jsonl``: every start, resume, evaluation (with its evidence) and stop, one JSON object a
line, appended and flushed as it happens (fsync'd: a decision is never lost to a crash). A torn
last line (a crash mid-write) is cut before appending and skipped when reading.

Each line has ``event`` (start | resume | evaluation | stop), ``t`` (Unix seconds) and ``seq``;
an evaluation also has ``window``, ``judgement``, ``decision`` and ``state`` (docs/canary.md: "Decision log format").
"""

from __future__ import annotations

import json
import math
import os
from enum import Enum
from pathlib import Path
from typing import IO, Any


class DecisionLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._f: IO[str] | None = None
        self.seq = 0

    def open(self) -> DecisionLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            cut_torn_tail(self.path)
            self.seq = len(read_events(self.path))
        self._f = open(self.path, "a", encoding="utf-8")
        return self

    def append(self, event: dict[str, Any]) -> dict[str, Any]:
        if self._f is None:
            self.open()
        assert self._f is not None
        event = {"seq": self.seq, **event}
        self.seq += 1
        self._f.write(json.dumps(clean(event), ensure_ascii=False, allow_nan=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        return event

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def clean(v: Any) -> Any:
    """JSON-ready: models dumped, NaN/inf as null (with the reason left to the field's neighbours),
    paths as their names only (no machine paths in a log)."""
    if hasattr(v, "model_dump"):
        v = v.model_dump(mode="json")
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [clean(x) for x in v]
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, Path):
        return v.name
    return v


def cut_torn_tail(path: Path) -> int:
    """Cut a torn last line (no newline: a crash mid-write) so the next append starts a line of its
    own; returns the bytes cut. Reads only the file's tail."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "r+b") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        pos, block = size, 1 << 16
        while pos > 0:  # the last newline, searched backwards block by block
            start = max(0, pos - block)
            f.seek(start)
            i = f.read(pos - start).rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        else:
            keep = 0
        f.truncate(keep)
        return size - keep


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events of a decision log, in order (a torn or unreadable line is skipped: bytes
    that are not UTF-8, JSON that does not parse or is not an object)."""
    out: list[dict[str, Any]] = []
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            continue  # a torn line, or bytes that were never ours
        if isinstance(obj, dict):
            out.append(obj)
    return out
