"""Importers: logged traffic from the stacks teams already run, as workload items.

Each importer is a module with ``records(path, max_line_bytes)`` yielding ``(FILE:LINE, WorkloadItem
| WorkloadError)`` in file order, streaming, and ``looks_like(first)`` for format detection. The
loader (``specgauge.workload.loaders``) registers them by format name beside its own formats.

| format | module | what it reads |
|---|---|---|
| ``otlp`` | ``otlp``, ``otlp_calls`` | OpenTelemetry GenAI spans / events / per-message log events, OTLP JSON (collector file exporter, OpenLLMetry, OpenLIT, opentelemetry-instrumentation-openai-v2); the exports given together are joined per call |
| ``langfuse`` | ``langfuse`` | Langfuse generations: API / UI / blob-storage exports, ingestion batches |
| ``litellm`` | ``litellm`` | LiteLLM StandardLoggingPayload (callbacks) and spend-log rows |
| ``vllm-log`` | ``vllm_log`` | vLLM's request log (``--enable-log-requests --enable-log-outputs``) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specgauge.workload.importers import langfuse, litellm, otlp, otlp_calls, vllm_log
from specgauge.workload.importers.docs import array_items, layout, top_keys
from specgauge.workload.reader import WorkloadError
from specgauge.workload.schema import WorkloadItem

Records = Callable[[Path, int, int | None], Iterator[tuple[str, WorkloadItem | WorkloadError]]]
IMPORTERS: dict[str, Records] = {
    "otlp": otlp_calls.records, "langfuse": langfuse.records, "litellm": litellm.records, "vllm-log": vllm_log.records,
}
#: importers whose files given together are read as one (a call's parts may sit in several exports)
JOINED: dict[str, Callable[[list[Path], int, int | None], Iterator[tuple[str, WorkloadItem | WorkloadError]]]] = {
    "otlp": otlp_calls.records_joined,
}
_JSON_SNIFFERS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("otlp", otlp.looks_like), ("langfuse", langfuse.looks_like), ("litellm", litellm.looks_like),
)


def _sniff_json(obj: Any) -> str | None:
    return next((name for name, test in _JSON_SNIFFERS if test(obj)), None)


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
        keys = top_keys(path, max_decompressed_bytes)
        if "resourceSpans" in keys or "resourceLogs" in keys or otlp.console_record(keys) is not None:
            return "otlp"
        if "batch" in keys or ("data" in keys and "meta" in keys):
            return "langfuse"
        if "call_type" in keys:
            return "litellm"
        if str(keys.get("type", "")).upper() in ("GENERATION", "SPAN", "EVENT"):
            return "langfuse"
    return None


def records(kind: str, paths: list[Path], max_line_bytes: int,
            max_decompressed_bytes: int | None = None) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    """The records of ``paths`` (all of format ``kind``): read as one where the format joins its files
    (``JOINED``), else file after file."""
    if kind in JOINED:
        yield from JOINED[kind](paths, max_line_bytes, max_decompressed_bytes)
        return
    for p in paths:
        yield from IMPORTERS[kind](p, max_line_bytes, max_decompressed_bytes)
