"""Server dialects: what differs between vLLM, llama.cpp, SGLang and the embedded server.

The runner, the SSE parser and the metrics are shared; a dialect only says
- what to add to a request body (``stream_options`` extras such as ``continuous_usage_stats``),
- how many output tokens the server has produced so far, from one stream event (``cumulative_tokens``),
- the server's own per-request speculative counts, from the final event (``request_spec``),
- the speculative counts of a run, from the ``/metrics`` diff (``counter_spec``),
- the server's identity and memory/KV information.

Dialects are registered by name (built-ins, plus plugins under the entry-point group
``specgauge.dialects``); ``detect`` picks one from ``/metrics`` names.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points
from typing import Any

from specgauge.loadgen.dialects.base import Dialect, spec_from_prefix
from specgauge.loadgen.metrics_scrape import Snapshot

__all__ = ["DIALECT_NAMES", "Dialect", "detect", "get_dialect", "spec_from_prefix"]


def _registry() -> dict[str, type[Dialect]]:
    from specgauge.loadgen.dialects.embedded import EmbeddedDialect
    from specgauge.loadgen.dialects.llamacpp import LlamaCppDialect
    from specgauge.loadgen.dialects.sglang import SGLangDialect
    from specgauge.loadgen.dialects.vllm import VLLMDialect

    reg: dict[str, type[Dialect]] = {
        "openai": Dialect,
        "vllm": VLLMDialect,
        "llamacpp": LlamaCppDialect,
        "sglang": SGLangDialect,
        "embedded": EmbeddedDialect,
    }
    # plugins: an entry point in group "specgauge.dialects" naming a Dialect subclass
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in reg:
            try:
                cls = ep.load()
            except Exception as e:  # a broken plugin must not break the built-ins
                warnings.warn(f"dialect plugin {ep.name!r} failed to load: {e}", stacklevel=2)
                continue
            if isinstance(cls, type) and issubclass(cls, Dialect):
                reg[ep.name] = cls
    return reg


ENTRY_POINT_GROUP = "specgauge.dialects"
DIALECT_NAMES = ("auto", "openai", "vllm", "llamacpp", "sglang", "embedded")


def get_dialect(name: str) -> Dialect:
    reg = _registry()
    if name not in reg:
        raise ValueError(f"unknown server dialect {name!r}; choose one of auto, {', '.join(reg)}")
    return reg[name]()


def detect(snap: Snapshot | None, models: dict[str, Any] | None = None) -> Dialect:
    """Pick a dialect from the /metrics names (and /v1/models ``owned_by`` for the embedded server)."""
    owners = {str(m.get("owned_by", "")) for m in (models or {}).get("data", []) if isinstance(m, dict)}
    if "specgauge" in owners:
        return get_dialect("embedded")
    names = snap.names() if snap is not None else set()
    for prefix, dialect in (("vllm:", "vllm"), ("llamacpp:", "llamacpp"), ("sglang:", "sglang")):
        if any(n.startswith(prefix) for n in names):
            return get_dialect(dialect)
    if "vllm" in owners:
        return get_dialect("vllm")
    if "llamacpp" in owners:
        return get_dialect("llamacpp")
    return get_dialect("openai")
