"""The ``/metrics`` text the test servers write, in vLLM's names and layout (what ``loadgen``'s
scrape reads from a real vLLM): request and token counters, gauges, and the spec-decode counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def vllm_metrics_text(model: str, counters: Mapping[str, int], per_pos: Sequence[int], *, spec: bool,
                      gauges: Mapping[str, float] | None = None,
                      histograms: Mapping[str, tuple[float, int]] | None = None) -> str:
    """Prometheus text: ``gauges`` (name -> value, e.g. ``num_requests_running``) first, then
    ``kv_cache_usage_perc``, ``request_success`` / ``generation_tokens`` (and ``prompt_tokens`` when
    ``counters`` has ``prompt``), and with ``spec`` the drafts, draft tokens, accepted tokens and
    accepted tokens per position; ``histograms`` (name -> (sum, count)), e.g. ``request_queue_time_seconds``."""
    c = counters
    lb = f'engine="0",model_name="{model}"'
    out: list[str] = []
    for name, v in (gauges or {}).items():
        out += [f"# TYPE vllm:{name} gauge", f"vllm:{name}{{{lb}}} {v:g}"]
    out += [
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lb}}} 0.0",
        "# TYPE vllm:request_success counter", f'vllm:request_success_total{{{lb},finished_reason="length"}} {c["success"]}',
        "# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{lb}}} {c['gen']}",
    ]
    for name, (total, n) in (histograms or {}).items():  # (sum, count) only: what a mean needs
        out += [f"# TYPE vllm:{name} histogram", f'vllm:{name}_bucket{{{lb},le="+Inf"}} {n}',
                f"vllm:{name}_sum{{{lb}}} {total!r}", f"vllm:{name}_count{{{lb}}} {n}"]
    if "prompt" in c:
        out += ["# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{lb}}} {c['prompt']}"]
    if spec:
        out += [
            "# TYPE vllm:spec_decode_num_drafts counter", f"vllm:spec_decode_num_drafts_total{{{lb}}} {c['drafts']}",
            "# TYPE vllm:spec_decode_num_draft_tokens counter", f"vllm:spec_decode_num_draft_tokens_total{{{lb}}} {c['draft_tokens']}",
            "# TYPE vllm:spec_decode_num_accepted_tokens counter", f"vllm:spec_decode_num_accepted_tokens_total{{{lb}}} {c['accepted']}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ] + [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lb},position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    return "\n".join(out) + "\n"
