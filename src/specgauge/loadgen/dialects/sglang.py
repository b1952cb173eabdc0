"""SGLang: per-request draft counts in ``usage``/``meta_info``, ``sglang:spec_accept_*`` gauges.

On its OpenAI endpoints (recent SGLang, ``UsageProcessor``) the usage carries
``completion_tokens_details.accepted_prediction_tokens`` and ``rejected_prediction_tokens``
(draft tokens kept / proposed-but-rejected), which give draft and accepted tokens exactly; the
number of verify steps (drafts) is not in that shape. SGLang's native responses report per request, when a speculative algorithm is on, ``meta_info.spec_verify_ct`` (verify
steps = drafts) next to ``completion_tokens``; newer builds add explicit counts
(``spec_accept_token_num`` / ``spec_num_correct_drafts``, ``spec_draft_token_num`` /
``spec_num_proposed_drafts``). Its mean acceptance length is completion_tokens / spec_verify_ct,
the same quantity as vLLM's 1 + accepted/drafts when accepted = completion - verify steps; that
derivation is used (and labelled) only when explicit counts are absent. ``/metrics`` exposes
``sglang:spec_accept_length`` and ``sglang:spec_accept_rate`` as *gauges* (recent-window values),
which cannot be diffed over a run: they are reported as the server's own figure, not summed.
"""

from __future__ import annotations

from typing import Any

from specgauge.loadgen.dialects.base import Dialect
from specgauge.loadgen.metrics_scrape import CounterDiff, Snapshot
from specgauge.records import SpecCounts


def _meta(final: dict[str, Any]) -> dict[str, Any] | None:
    m = final.get("meta_info")
    if isinstance(m, dict):
        return m
    for c in final.get("choices") or []:
        if isinstance(c, dict) and isinstance(c.get("meta_info"), dict):
            return c["meta_info"]
    return None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def spec_from_meta_info(meta: dict[str, Any], completion_tokens: int | None = None) -> SpecCounts | None:
    verify = _int(meta.get("spec_verify_ct"))
    if verify is None:
        return None
    acc = _int(meta.get("spec_accept_token_num"))
    if acc is None:
        acc = _int(meta.get("spec_num_correct_drafts"))
    drafted = _int(meta.get("spec_draft_token_num"))
    if drafted is None:
        drafted = _int(meta.get("spec_num_proposed_drafts"))
    source = "sglang:meta_info"
    if acc is None:
        ct = _int(meta.get("completion_tokens"))
        ct = ct if ct is not None else completion_tokens
        if ct is None:
            return SpecCounts(drafts=verify, source=source)
        acc = max(0, ct - verify)
        source = "sglang:meta_info(accepted=completion_tokens-spec_verify_ct)"
    return SpecCounts(drafts=verify, draft_tokens=drafted, accepted_tokens=acc, source=source)


def spec_from_usage_details(usage: dict[str, Any]) -> SpecCounts | None:
    det = usage.get("completion_tokens_details")
    if not isinstance(det, dict):
        return None
    acc, rej = _int(det.get("accepted_prediction_tokens")), _int(det.get("rejected_prediction_tokens"))
    if acc is None or rej is None:
        return None
    return SpecCounts(draft_tokens=acc + rej, accepted_tokens=acc, source="sglang:usage.completion_tokens_details")


class SGLangDialect(Dialect):
    name = "sglang"
    metric_prefix = "sglang"

    def body_extras(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def request_spec(self, final: dict[str, Any]) -> SpecCounts | None:
        usage = final.get("usage") if isinstance(final.get("usage"), dict) else {}
        meta = _meta(final)
        from_meta = spec_from_meta_info(meta, _int(usage.get("completion_tokens"))) if meta is not None else None
        from_usage = spec_from_usage_details(usage)
        if from_usage is None:
            return from_meta
        if from_meta is not None and from_meta.drafts is not None:
            from_usage.drafts = from_meta.drafts
        return from_usage

    def request_extra(self, final: dict[str, Any]) -> dict[str, Any]:
        meta = _meta(final)
        return {"meta_info": meta} if meta is not None else {}

    def counter_spec(self, d: CounterDiff, model: str | None = None) -> SpecCounts | None:
        return None  # SGLang's acceptance metrics are gauges: see spec_gauges

    def spec_gauges(self, snap: Snapshot) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate"):
            v = snap.get(name)
            if v is not None:
                out[name] = v
        return out

    def traffic(self, d: CounterDiff) -> dict[str, float | None]:
        return {"requests": d.get("sglang:num_requests_total"), "generation_tokens": d.get("sglang:generation_tokens_total")}

    def memory(self, snap: Snapshot) -> dict[str, Any]:
        out: dict[str, Any] = {}
        v = snap.get("sglang:token_usage")
        if v is not None:
            out["kv_cache_usage"] = v
        return out

    def identity_paths(self) -> list[str]:
        return ["/get_server_info", "/get_model_info", "/v1/models"]
