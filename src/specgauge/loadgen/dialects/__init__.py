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

from specgauge.loadgen.metrics_scrape import CounterDiff, Snapshot
from specgauge.records import SpecCounts


class Dialect:
    """Base: a plain OpenAI-compatible server (no speculative counters known)."""

    name = "openai"
    metric_prefix = ""

    def body_extras(self) -> dict[str, Any]:
        """Merged into every streamed request body (``stream_options`` is merged key-wise)."""
        return {}

    def cumulative_tokens(self, event: dict[str, Any]) -> int | None:
        """Output tokens produced so far, when this event tells (``usage``). The runner uses it
        per chunk only once chunks have carried counts: a lone final usage is a total, not a chunk."""
        usage = event.get("usage")
        if type(usage) is dict:
            v = usage.get("completion_tokens")
            return v if type(v) is int else None
        return None

    def request_spec(self, final: dict[str, Any]) -> SpecCounts | None:
        """The server's per-request speculative counts from the final event; None when absent."""
        return None

    def request_extra(self, final: dict[str, Any]) -> dict[str, Any]:
        """Dialect fields worth keeping in the record (timings, meta_info)."""
        return {}

    def counter_spec(self, d: CounterDiff, model: str | None = None) -> SpecCounts | None:
        """Speculative counts over the run from the ``/metrics`` diff; None without the counters."""
        return None

    def memory(self, snap: Snapshot) -> dict[str, Any]:
        """KV-cache usage/configuration read from a snapshot; keys absent when not exposed."""
        return {}

    def spec_config(self, snap: Snapshot) -> dict[str, Any]:
        """What the counters reveal of the speculative config: k = the number of positions."""
        if not self.metric_prefix:
            return {}
        pos = {dict(ls).get("position") for ls in snap.select(f"{self.metric_prefix}:spec_decode_num_accepted_tokens_per_pos_total")}
        pos.discard(None)
        if not pos:
            return {}
        return {"num_speculative_tokens": len(pos), "source": "position labels of the per-position counter"}

    def spec_gauges(self, snap: Snapshot) -> dict[str, float]:
        """Acceptance figures the server exposes only as gauges (reported, never diffed)."""
        return {}

    def traffic(self, d: CounterDiff) -> dict[str, float | None]:
        """Server-side totals to compare with ours: finished requests, generated tokens."""
        return {"requests": None, "generation_tokens": None}

    def identity_paths(self) -> list[str]:
        """GET paths whose JSON describes the server (version, speculative config)."""
        return ["/v1/models"]


def spec_from_prefix(d: CounterDiff, prefix: str, source: str, **match: str) -> SpecCounts | None:
    """vLLM-style counters ``{prefix}:spec_decode_*_total`` (vLLM, llama.cpp, embedded share them)."""
    drafts = d.get(f"{prefix}:spec_decode_num_drafts_total", **match)
    dtoks = d.get(f"{prefix}:spec_decode_num_draft_tokens_total", **match)
    acc = d.get(f"{prefix}:spec_decode_num_accepted_tokens_total", **match)
    if drafts is None and dtoks is None and acc is None:
        return None
    pos = d.by_label(f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total", "position", **match)
    per_pos: list[int] | None = None
    if pos:
        try:
            k = max(int(p) for p in pos) + 1
            per_pos = [int(pos.get(str(i), 0.0)) for i in range(k)]
        except ValueError:
            per_pos = None
    return SpecCounts.from_numbers(drafts, dtoks, acc, per_pos, source)


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
