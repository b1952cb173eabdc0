"""Format detection: which loader reads a workload file, from its head.

Every look is at one ``WorkloadFile`` (opened once): its head (the first non-blank line, read once and
kept) decides most files; the few that need more rewind the same handle, the bytes already read
replayed from memory: a JSON array's first item, a pretty-printed object's top-level keys, or the
first 50 lines of a text file (vLLM's request log). The trace importers' formats are tried first,
then the loader's own from the first record:

| first record | format |
|---|---|
| ``[`` (a JSON array file) | ``sharegpt`` |
| ``{"custom_id": ..., "body": ...}`` / ``{"custom_id": ...}`` | ``batch`` / ``batch-output`` |
| ``{"conversations": ...}`` or ``{"conversation": ...}`` | ``sharegpt`` |
| ``{"prompt": ..., "output_tokens": ...}`` without ``messages`` | ``vllm-custom`` |
| any other JSON line, or a line that is not JSON | ``openai`` |
| text | ``text`` (one prompt a line) |
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from specgauge.workload.importers import langfuse, litellm, otlp, vllm_log
from specgauge.workload.reader import DEFAULT_MAX_LINE_BYTES, NOT_JSON, WorkloadError, WorkloadFile

FirstRecord = Literal["empty", "array", "json", "text", "badjson"]
_JSON_SNIFFERS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("otlp", otlp.looks_like), ("langfuse", langfuse.looks_like), ("litellm", litellm.looks_like),
)


def first_record(f: WorkloadFile) -> FirstRecord:
    """How the loader's own formats open: a JSON ``array``, a ``json`` object line (``badjson`` when it
    does not parse: reported, with its line, when the file is read), ``text``, or ``empty``. Unreadable
    lines before the first are passed over (raised when nothing else is found); a broken stream is raised."""
    h = f.head
    if h.broken is not None:
        raise h.broken
    if h.first is None:
        if h.unreadable is not None:
            raise h.unreadable
        return "empty"
    if h.first.startswith("["):
        return "array"
    if h.first.startswith("{"):
        return "json" if h.value is not NOT_JSON else "badjson"
    return "text"


def _sniff_json(obj: Any) -> str | None:
    return next((name for name, test in _JSON_SNIFFERS if test(obj)), None)


def importer_format(f: WorkloadFile) -> str | None:
    """The trace importer's format of a file, from its first document, or None when it is none of theirs."""
    try:
        kind, first = f.head.layout()
    except WorkloadError:
        return None
    if kind == "lines":
        return _sniff_json(first[0] if isinstance(first, list) and first else first)
    if kind == "text":
        return "vllm-log" if vllm_log.looks_like_log(f) else None
    if kind == "array":
        _, item = next(f.array_items(), ("", None))
        return _sniff_json(item) if not isinstance(item, WorkloadError) else None
    if kind == "object":
        keys = f.top_keys()
        if "resourceSpans" in keys or "resourceLogs" in keys or otlp.console_record(keys) is not None:
            return "otlp"
        if "batch" in keys or ("data" in keys and "meta" in keys):
            return "langfuse"
        if "call_type" in keys:
            return "litellm"
        if str(keys.get("type", "")).upper() in ("GENERATION", "SPAN", "EVENT"):
            return "langfuse"
    return None


def format_of(f: WorkloadFile) -> str:
    """A file's format: a ``FORMATS`` name (``loaders``) or ``batch-output``."""
    imported = importer_format(f)
    if imported is not None:
        return imported
    kind = first_record(f)
    if kind == "empty":
        raise WorkloadError(f.name, "empty workload (no requests)")
    if kind == "array":
        return "sharegpt"
    if kind == "text":
        return "text"
    obj = f.head.value
    if kind == "badjson" or not isinstance(obj, dict):
        return "openai"  # JSON lines; the bad line is reported when read
    if "custom_id" in obj:
        return "batch" if "body" in obj else "batch-output"
    if "conversations" in obj or "conversation" in obj:
        return "sharegpt"
    if "prompt" in obj and "output_tokens" in obj and "messages" not in obj:
        return "vllm-custom"
    return "openai"


def detect_format(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_decompressed_bytes: int | None = None) -> str:
    """``format_of`` a file given by its path."""
    with WorkloadFile(path, max_line_bytes, max_decompressed_bytes) as f:
        return format_of(f)
