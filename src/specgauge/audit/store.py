"""``samples.jsonl``: every completion the audit receives, appended (and flushed) as it arrives.

Line 1 is a header with the settings that decide what a sample means (prompts, temperature,
lengths); ``--resume`` continues only a file with the same header and requests only what is
missing. Record types::

    {"type": "sample", "side": "candidate", "prompt": 0, "tokens": [...], "finish_reason": "length"}
    {"type": "greedy_alone", "side": "reference", "prompt": 0, "tokens": [...]}
    {"type": "greedy_mixed", "side": "candidate", "round": 0, "prompt": 0, "tokens": [...]}

A line cut short by a crash is skipped on reading (and counted); a later ``greedy_mixed`` record
for the same (side, round, prompt) replaces an earlier one (a round is redone as a whole).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from specgauge.audit.client import AuditError, Completion

FORMAT_VERSION = 1


class SampleStore:
    def __init__(self, path: Path, settings: dict[str, Any], resume: bool = False) -> None:
        self.path = path
        self.samples: dict[tuple[str, int], list[Completion]] = defaultdict(list)
        self.greedy_alone: dict[tuple[str, int], list[int | str]] = {}
        self.greedy_mixed: dict[tuple[str, int, int], list[int | str]] = {}
        self.skipped_lines = 0
        header = {"type": "header", "version": FORMAT_VERSION, "settings": settings}
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > 0:
            if not resume:
                raise AuditError(f"{path}: an audit is already recorded here; pass --resume to continue it, "
                                 "or choose another --output-dir")
            self._load(header)
            with open(path, "rb+") as f:  # a crash may have left a last line without its newline
                f.seek(-1, 2)
                if f.read(1) != b"\n":
                    f.write(b"\n")
        else:
            self._append(header)

    def _load(self, header: dict[str, Any]) -> None:
        with open(self.path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    self.skipped_lines += 1
                    continue
                if n == 1:
                    if rec.get("type") != "header" or rec.get("version") != FORMAT_VERSION:
                        raise AuditError(f"{self.path}:1: not a specgauge audit sample file (version {FORMAT_VERSION})")
                    self._check_header(rec.get("settings") or {}, header["settings"])
                    continue
                self._index(rec)

    def _check_header(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if differ:
            raise AuditError(f"{self.path}:1: recorded with other settings ({', '.join(differ)}); "
                             "--resume needs the same ones, or choose another --output-dir")

    def _index(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        if kind == "sample":
            self.samples[(rec["side"], rec["prompt"])].append(
                Completion(tokens=rec["tokens"], finish_reason=rec.get("finish_reason")))
        elif kind == "greedy_alone":
            self.greedy_alone[(rec["side"], rec["prompt"])] = rec["tokens"]
        elif kind == "greedy_mixed":
            self.greedy_mixed[(rec["side"], rec["round"], rec["prompt"])] = rec["tokens"]

    def _append(self, rec: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()

    def add(self, rec: dict[str, Any]) -> None:
        """Append one record and index it."""
        self._append(rec)
        self._index(rec)

    def add_sample(self, side: str, prompt: int, c: Completion) -> None:
        self.add({"type": "sample", "side": side, "prompt": prompt, "tokens": c.tokens,
                  "finish_reason": c.finish_reason})

    def count(self, side: str, prompt: int) -> int:
        return len(self.samples.get((side, prompt), []))
