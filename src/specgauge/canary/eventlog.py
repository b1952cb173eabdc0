"""``decisions.jsonl``: every start, resume, evaluation (with its evidence) and stop, one JSON object a
line, appended and flushed as it happens (fsync'd: a decision is never lost to a crash). A torn
last line (a crash mid-write) is cut before appending and skipped when reading.

Each line has ``event`` (start | resume | evaluation | stop), ``t`` (Unix seconds) and ``seq``;
an evaluation also has ``window``, ``judgement``, ``decision`` and ``state`` (README: "Decision log").
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
            raw = self.path.read_bytes()
            if raw and not raw.endswith(b"\n"):
                with open(self.path, "r+b") as f:
                    f.truncate(raw.rfind(b"\n") + 1)
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


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events of a decision log, in order."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a torn line
        if isinstance(obj, dict):
            out.append(obj)
    return out
