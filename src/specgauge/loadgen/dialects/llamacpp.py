"""llama.cpp ``llama-server``: per-response ``timings`` and ``llamacpp:spec_decode_*`` counters.

Per response (and in the final streamed chunk, next to ``usage``): ``timings.draft_n`` (drafted
tokens) and ``timings.draft_n_accepted``; drafts and per-position counts exist only as counters
(``llamacpp:spec_decode_num_drafts_total``, ``..._num_accepted_tokens_per_pos_total{position}``).
``timings_per_token: true`` makes every streamed chunk carry ``timings.predicted_n`` (tokens so
far), which gives exact per-chunk token counts. The stop token has no text: it is counted by the
final (choice-less) event's ``predicted_n``, and lands as a token-only chunk at that event's time.
"""

from __future__ import annotations

from typing import Any

from specgauge.loadgen.dialects.base import Dialect, spec_from_prefix
from specgauge.loadgen.metrics_scrape import CounterDiff, Snapshot
from specgauge.records import SpecCounts


class LlamaCppDialect(Dialect):
    name = "llamacpp"
    metric_prefix = "llamacpp"

    def body_extras(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True}, "timings_per_token": True}

    def cumulative_tokens(self, event: dict[str, Any]) -> int | None:
        t = event.get("timings")
        if type(t) is dict:
            v = t.get("predicted_n")
            if type(v) is int:
                return v
        return super().cumulative_tokens(event)

    def request_spec(self, final: dict[str, Any]) -> SpecCounts | None:
        t = final.get("timings")
        if not isinstance(t, dict) or "draft_n" not in t:
            return None
        try:
            return SpecCounts(
                draft_tokens=int(t["draft_n"]),
                accepted_tokens=int(t.get("draft_n_accepted", 0)),
                source="llamacpp:timings",
            )
        except (TypeError, ValueError):
            return None

    def request_extra(self, final: dict[str, Any]) -> dict[str, Any]:
        t = final.get("timings")
        return {"timings": t} if isinstance(t, dict) else {}

    def counter_spec(self, d: CounterDiff, model: str | None = None) -> SpecCounts | None:
        return spec_from_prefix(d, self.metric_prefix, "llamacpp:/metrics")

    def traffic(self, d: CounterDiff) -> dict[str, float | None]:
        return {"requests": None, "generation_tokens": d.get("llamacpp:tokens_predicted_total")}

    def memory(self, snap: Snapshot) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("llamacpp:kv_cache_usage_ratio", "llamacpp:kv_cache_tokens"):
            v = snap.get(name)
            if v is not None:
                out[name.split(":", 1)[1]] = v
        return out

    def identity_paths(self) -> list[str]:
        return ["/props", "/v1/models"]
