"""The base dialect (a plain OpenAI-compatible server) and the vLLM-style counter reader the built-in
dialects share; the registry and detection are the package's."""

from __future__ import annotations

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
