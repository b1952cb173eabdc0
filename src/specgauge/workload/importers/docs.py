"""JSON documents of an exported log, streamed: one per line (JSON lines: the OTel collector's file
exporter, LiteLLM and Langfuse JSONL exports), or the items of the arrays a pretty-printed document
holds (``resourceSpans``, ``batch``, ``data``, a top-level array), never the whole file at once.

Yields ``(where, value | WorkloadError)``: ``FILE:LINE`` for JSON lines, ``FILE:KEY N`` (1-based)
for an array's items.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ijson

from specgauge.workload.reader import MAX_JSON_DEPTH, WorkloadError, WorkloadFile, loads_bounded


def _json_lines(f: WorkloadFile) -> Iterator[tuple[str, Any]]:
    for where, doc in f.json_lines():
        if isinstance(doc, list):  # a whole JSON array on one line (a UI export): its items
            for i, item in enumerate(doc, start=1):
                yield f"{where}:item {i}", item
        else:
            yield where, doc


def _key_items(f: WorkloadFile, targets: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """Items of the arrays held by the top-level keys in ``targets`` (key -> label) of a JSON object,
    each built alone, with the reader's nesting bound kept on the parser's events."""
    counts = dict.fromkeys(targets, 0)
    depth, key, in_array, builder = 0, None, False, None
    label = "item"
    path = f.name
    try:
        for event, value in ijson.basic_parse(f.stream(), use_float=True):
            if event in ("start_map", "start_array"):
                depth += 1
                if depth > MAX_JSON_DEPTH + 2:
                    raise WorkloadError(f"{path}:{label}", f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels")
                if depth == 2 and key in targets and event == "start_array":
                    in_array = True
                    continue
            elif event in ("end_map", "end_array"):
                depth -= 1
                if depth == 1 and in_array:
                    in_array = False
                    continue
            elif depth == 1 and event == "map_key":
                key = value
                continue
            if not in_array:
                continue
            if builder is None:
                builder = ijson.ObjectBuilder()
                counts[key] += 1  # type: ignore[index]
                label = f"{targets[key]} {counts[key]}"  # type: ignore[index]
            builder.event(event, value)
            if depth == 2:  # a scalar item, or a container closed back to the array's level
                yield f"{path}:{label}", builder.value
                builder = None
    except WorkloadError as e:
        yield f"{path}:{label}", e
    except (ijson.JSONError, ValueError, EOFError, OSError) as e:
        yield f"{path}:{label}", WorkloadError(f"{path}:{label}", f"invalid JSON document: {e}")


def documents(f: WorkloadFile, arrays: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """Every document of the file: its lines, the items of a top-level array, or the items of the
    arrays under ``arrays``' keys (key -> label, e.g. ``{"resourceSpans": "resourceSpans"}``) of a
    pretty-printed object. An object holding none of those is one document, read whole when under
    ``max_line_bytes``."""
    kind, _ = f.head.layout()
    if kind == "lines":
        yield from _json_lines(f)
        return
    if kind == "array":
        yield from f.array_items()
        return
    if kind != "object":
        raise WorkloadError(f.name, "not a JSON export (neither JSON lines nor a JSON document)")
    found = False
    if arrays:
        for where, value in _key_items(f, arrays):
            found = True
            yield where, value
    if found:
        return
    raw = f.stream().read(f.max_line_bytes + 1)
    if len(raw) > f.max_line_bytes:
        raise WorkloadError(f.name, f"one JSON document longer than {f.max_line_bytes} bytes (raise --max-line-bytes)")
    try:
        yield f"{f.name}:1", loads_bounded(raw, f"{f.name}:1")
    except WorkloadError as e:
        yield f"{f.name}:1", e
