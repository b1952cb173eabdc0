"""vLLM: ``vllm:*`` Prometheus counters and per-request ``metrics.speculative_decoding``.

Counters (vLLM v0.32): ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total{position}``, labelled by
``engine`` and ``model_name``. With ``--per-request-spec-decode-metrics`` the final streamed chunk
carries ``metrics.speculative_decoding`` = {num_spec_steps, num_draft_tokens,
num_accepted_draft_tokens, acceptance_histogram, …}; ``acceptance_histogram[i]`` counts steps in
which exactly i draft tokens were accepted, so position j was accepted in Σ_{i>j} hist[i] drafts.
"""

from __future__ import annotations

from typing import Any

from specgauge.loadgen.dialects.base import Dialect, spec_from_prefix
from specgauge.loadgen.metrics_scrape import CounterDiff, Snapshot
from specgauge.records import SpecCounts


def _model_match(d: CounterDiff | Snapshot, prefix: str, model: str | None) -> dict[str, str]:
    """Restrict to ``model_name=model`` when the server labels by model and that label exists."""
    if model is None:
        return {}
    items = d.delta if isinstance(d, CounterDiff) else d.values
    for name, ls in items:
        if name.startswith(prefix) and ("model_name", model) in ls:
            return {"model_name": model}
    return {}


def spec_from_vllm_request(sd: Any, source: str = "vllm:per-request") -> SpecCounts | None:
    if not isinstance(sd, dict):
        return None
    try:
        drafts = sd.get("num_spec_steps")
        dtoks = sd.get("num_draft_tokens")
        acc = sd.get("num_accepted_draft_tokens")
        hist = sd.get("acceptance_histogram")
        per_pos: list[int] | None = None
        if isinstance(hist, list) and hist:
            h = [int(x) for x in hist]
            per_pos = [sum(h[i + 1 :]) for i in range(len(h) - 1)]
        return SpecCounts.from_numbers(drafts, dtoks, acc, per_pos, source)
    except (TypeError, ValueError):
        return None


class VLLMDialect(Dialect):
    name = "vllm"
    metric_prefix = "vllm"

    def body_extras(self) -> dict[str, Any]:
        # token ids (vLLM >= 0.10.2): the output comparison and the replay check read them
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}, "return_token_ids": True}

    def request_spec(self, final: dict[str, Any]) -> SpecCounts | None:
        m = final.get("metrics")
        if isinstance(m, dict):
            return spec_from_vllm_request(m.get("speculative_decoding"), f"{self.name}:per-request")
        return None

    def request_extra(self, final: dict[str, Any]) -> dict[str, Any]:
        m = final.get("metrics")
        return {"metrics": m} if isinstance(m, dict) else {}

    def counter_spec(self, d: CounterDiff, model: str | None = None) -> SpecCounts | None:
        p = self.metric_prefix
        return spec_from_prefix(d, p, f"{self.name}:/metrics", **_model_match(d, p + ":", model))

    def traffic(self, d: CounterDiff) -> dict[str, float | None]:
        p = self.metric_prefix
        return {
            "requests": d.get(f"{p}:request_success_total"),
            "generation_tokens": d.get(f"{p}:generation_tokens_total"),
        }

    def memory(self, snap: Snapshot) -> dict[str, Any]:
        p = self.metric_prefix
        out: dict[str, Any] = {}
        usage = snap.get(f"{p}:kv_cache_usage_perc")
        if usage is not None:
            out["kv_cache_usage"] = usage
        info = snap.select(f"{p}:cache_config_info")
        if info:
            out["cache_config"] = dict(next(iter(info)))
        return out

    def identity_paths(self) -> list[str]:
        return ["/version", "/v1/models"]
