"""Importers: logged traffic from the stacks teams already run, as workload items.

Each importer is a module with ``records(path, max_line_bytes)`` yielding ``(FILE:LINE, WorkloadItem
| WorkloadError)`` in file order, streaming, and ``looks_like(first)`` for format detection. The
loader (``specgauge.workload.loaders``) registers them by format name beside its own formats.

| format | module | what it reads |
|---|---|---|
| ``otlp`` | ``otlp`` | OpenTelemetry GenAI spans / events, OTLP JSON (collector file exporter, OpenLLMetry, OpenLIT) |
| ``langfuse`` | ``langfuse`` | Langfuse generations: API / UI / blob-storage exports, ingestion batches |
| ``litellm`` | ``litellm`` | LiteLLM StandardLoggingPayload (callbacks) and spend-log rows |
| ``vllm-log`` | ``vllm_log`` | vLLM's request log (``--enable-log-requests --enable-log-outputs``) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ijson

from specgauge.workload.importers import langfuse, litellm, otlp, vllm_log
from specgauge.workload.importers.docs import array_items, layout
from specgauge.workload.reader import WorkloadError, open_binary
from specgauge.workload.schema import WorkloadItem

Records = Callable[[Path, int, int | None], Iterator[tuple[str, WorkloadItem | WorkloadError]]]
IMPORTERS: dict[str, Records] = {
    "otlp": otlp.records, "langfuse": langfuse.records, "litellm": litellm.records, "vllm-log": vllm_log.records,
}
_JSON_SNIFFERS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("otlp", otlp.looks_like), ("langfuse", langfuse.looks_like), ("litellm", litellm.looks_like),
)


def _sniff_json(obj: Any) -> str | None:
    return next((name for name, test in _JSON_SNIFFERS if test(obj)), None)


def _top_keys(path: Path, max_decompressed_bytes: int | None, limit: int = 20000) -> dict[str, Any]:
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


def sniff(path: Path, max_line_bytes: int, max_decompressed_bytes: int | None = None) -> str | None:
    """The importer format of a file, from its first document, or None when it is none of theirs."""
    try:
        kind, first = layout(path, max_line_bytes, max_decompressed_bytes)
    except WorkloadError:
        return None
    if kind == "lines":
        return _sniff_json(first[0] if isinstance(first, list) and first else first)
    if kind == "text":
        return "vllm-log" if vllm_log.looks_like_log(path, max_line_bytes, max_decompressed_bytes) else None
    if kind == "array":
        head = next(iter(array_items(path, max_decompressed_bytes)), None)
        return _sniff_json(head[1]) if head is not None and not isinstance(head[1], WorkloadError) else None
    if kind == "object":
        keys = _top_keys(path, max_decompressed_bytes)
        if "resourceSpans" in keys or "resourceLogs" in keys:
            return "otlp"
        if "batch" in keys or ("data" in keys and "meta" in keys):
            return "langfuse"
        if "call_type" in keys:
            return "litellm"
        if str(keys.get("type", "")).upper() in ("GENERATION", "SPAN", "EVENT"):
            return "langfuse"
    return None


def records(kind: str, path: Path, max_line_bytes: int,
            max_decompressed_bytes: int | None = None) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    return IMPORTERS[kind](path, max_line_bytes, max_decompressed_bytes)
