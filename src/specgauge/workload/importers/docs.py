"""JSON documents of an exported log, streamed: one per line (JSON lines: the OTel collector's file
exporter, LiteLLM and Langfuse JSONL exports), or the items of the arrays a pretty-printed document
holds (``resourceSpans``, ``batch``, ``data``, a top-level array), never the whole file at once.

Yields ``(where, value | WorkloadError)``: ``FILE:LINE`` for JSON lines, ``FILE:KEY N`` (1-based)
for an array's items.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson

from specgauge.workload.reader import (
    MAX_JSON_DEPTH,
    WorkloadError,
    iter_json_array,
    iter_lines,
    loads_bounded,
    open_binary,
)


def layout(path: Path, max_line_bytes: int, max_decompressed_bytes: int | None = None) -> tuple[str, Any]:
    """('lines', first document) when the first non-blank line is a whole JSON value, ('array' | 'object',
    None) for a pretty-printed document, ('text', first line) otherwise, ('empty', None)."""
    for _, line in iter_lines(path, max_line_bytes, max_decompressed_bytes):
        if isinstance(line, WorkloadError):
            raise line
        s = line.strip()
        if not s:
            continue
        try:
            return "lines", loads_bounded(s, str(path))
        except WorkloadError:
            if s[0] == "[":
                return "array", None
            if s[0] == "{":
                return "object", None
            return "text", s
    return "empty", None


def top_keys(path: Path, max_decompressed_bytes: int | None, limit: int = 20000) -> dict[str, Any]:
    """Top-level keys of a pretty-printed object (scalar values kept), read until ``limit`` events."""
    keys: dict[str, Any] = {}
    depth, key = 0, None
    with open_binary(path, max_decompressed_bytes) as f:
        try:
            for n, (event, value) in enumerate(ijson.basic_parse(f, use_float=True)):
                if n > limit:
                    break
                if event in ("start_map", "start_array"):
                    depth += 1
                elif event in ("end_map", "end_array"):
                    depth -= 1
                elif depth == 1 and event == "map_key":
                    key = value
                    keys[key] = None
                elif depth == 1 and key is not None:
                    keys[key] = value
        except (ijson.JSONError, ValueError, EOFError, OSError, WorkloadError):
            pass
    return keys


def _json_lines(path: Path, max_line_bytes: int, max_decompressed_bytes: int | None) -> Iterator[tuple[str, Any]]:
    for n, line in iter_lines(path, max_line_bytes, max_decompressed_bytes):
        where = f"{path}:{n}"
        if isinstance(line, WorkloadError):
            yield where, line
        elif line.strip():
            try:
                doc = loads_bounded(line, where)
            except WorkloadError as e:
                yield where, e
                continue
            if isinstance(doc, list):  # a whole JSON array on one line (a UI export): its items
                for i, item in enumerate(doc, start=1):
                    yield f"{where}:item {i}", item
            else:
                yield where, doc


def array_items(path: Path, max_decompressed_bytes: int | None) -> Iterator[tuple[str, Any]]:
    with open_binary(path, max_decompressed_bytes) as f:
        i = 0
        try:
            for i, obj in iter_json_array(f, str(path)):
                yield f"{path}:item {i}", obj
        except WorkloadError as e:
            yield f"{path}:item {i + 1}", e


def _key_items(path: Path, targets: dict[str, str], max_decompressed_bytes: int | None) -> Iterator[tuple[str, Any]]:
    """Items of the arrays held by the top-level keys in ``targets`` (key -> label) of a JSON object,
    each built alone, with the reader's nesting bound kept on the parser's events."""
    counts = dict.fromkeys(targets, 0)
    depth, key, in_array, builder = 0, None, False, None
    label = "item"
    with open_binary(path, max_decompressed_bytes) as f:
        try:
            for event, value in ijson.basic_parse(f, use_float=True):
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


def documents(path: Path, max_line_bytes: int, arrays: dict[str, str],
              max_decompressed_bytes: int | None = None) -> Iterator[tuple[str, Any]]:
    """Every document of the file: its lines, the items of a top-level array, or the items of the
    arrays under ``arrays``' keys (key -> label, e.g. ``{"resourceSpans": "resourceSpans"}``) of a
    pretty-printed object. An object holding none of those is one document, read whole when under
    ``max_line_bytes``."""
    kind, _ = layout(path, max_line_bytes, max_decompressed_bytes)
    if kind == "lines":
        yield from _json_lines(path, max_line_bytes, max_decompressed_bytes)
        return
    if kind == "array":
        yield from array_items(path, max_decompressed_bytes)
        return
    if kind != "object":
        raise WorkloadError(str(path), "not a JSON export (neither JSON lines nor a JSON document)")
    found = False
    if arrays:
        for where, value in _key_items(path, arrays, max_decompressed_bytes):
            found = True
            yield where, value
    if found:
        return
    with open_binary(path, max_decompressed_bytes) as f:
        raw = f.read(max_line_bytes + 1)
    if len(raw) > max_line_bytes:
        raise WorkloadError(str(path), f"one JSON document longer than {max_line_bytes} bytes (raise --max-line-bytes)")
    try:
        yield f"{path}:1", loads_bounded(raw, f"{path}:1")
    except WorkloadError as e:
        yield f"{path}:1", e
