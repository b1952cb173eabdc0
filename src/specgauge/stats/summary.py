"""The run summary: ``vllm bench serve``-compatible keys at the top level, ours under ``specgauge``.

Built from the records on disk and the per-session server snapshots in ``run.json``, so a resumed or
re-analysed run summarises every request, whichever session sent it. Top-level keys mean what
vLLM's mean (``mean_ttft_ms``, ``p99_itl_ms``…, ``spec_decode_*`` from the counter diff); note that
``*_itl_ms`` here is per token (a chunk carrying n tokens gives n gaps of g/n), vLLM's per-chunk ITL
is kept as ``specgauge.latency.chunk_itl``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specgauge import __version__
from specgauge.distributions import finite_or_none, pct_label
from specgauge.i18n import en
from specgauge.records import (
    BenchSummary,
    MetricStats,
    RequestRecord,
    RunRecord,
    SessionRecord,
    SpecCounts,
    SpecDecodeStats,
    SpecgaugeSummary,
)
from specgauge.stats.acceptance import acceptance_summary, agreement, counts_json
from specgauge.stats.latency import LatencyMetrics, latency_metrics
from specgauge.stats.outputs import outputs_summary
from specgauge.stats.stalls import Held, reference_tpot, summarize_stalls
from specgauge.stats.server_memory import server_memory, session_logs


def _kv_summary(sessions: Sequence[SessionRecord]) -> dict[str, Any] | None:
    last = sessions[-1].kv_cache if sessions else None
    samples = [x.kv_cache_usage for s in sessions for x in s.kv_samples or []]
    if last is None and not samples:
        return None
    out: dict[str, Any] = dict(last or {})
    if samples:
        out["peak_kv_cache_usage_during_run"] = max(samples)
        out["samples_during_run"] = len(samples)
    else:
        out["reason_no_samples"] = "no /metrics sample during the run (shorter than --memory-interval, or not exposed)"
    return out


def counter_total(sessions: Sequence[SessionRecord]) -> tuple[SpecCounts | None, str]:
    """The counter diffs summed over sessions; None (with why) unless every session has one."""
    if not sessions:
        return None, en("acc.r.no_session")
    if not all(s.counters_read for s in sessions):
        return None, en("acc.r.interrupted")
    counts = [s.counter_spec for s in sessions]
    if any(c is None for c in counts):
        return None, en("acc.r.no_counters")
    return SpecCounts.total([c for c in counts if c is not None]), ""


def _segments(records: Sequence[RequestRecord]) -> dict[str, list[RequestRecord]]:
    out: dict[str, list[RequestRecord]] = {}
    for r in records:
        out.setdefault(r.segment, []).append(r)
    return out


def summarize(
    records: Sequence[RequestRecord], sessions: Sequence[SessionRecord], run: RunRecord, config: dict[str, Any],
    percentiles: Sequence[float], selected: Sequence[str], goodput: dict[str, float],
) -> BenchSummary:
    dur = sum(float(s.duration_s or 0.0) for s in sessions) or 0.0
    pcts = sorted(set(percentiles) | {50.0, 90.0, 95.0, 99.0})
    m = latency_metrics(records, dur, pcts, goodput or None)
    per_req_acc = acceptance_summary(records, pcts)
    counters, counters_why = counter_total(sessions)
    per_req_total = SpecCounts.total([r.spec for r in records if r.ok and r.spec is not None])
    spec_src = counters or per_req_total
    spec_decode = None
    if spec_src is not None and spec_src.draft_tokens:
        spec_decode = SpecDecodeStats(
            acceptance_rate=finite_or_none(spec_src.acceptance_rate * 100),
            acceptance_length=finite_or_none(spec_src.mean_acceptance_length),
            num_drafts=spec_src.drafts, draft_tokens=spec_src.draft_tokens, accepted_tokens=spec_src.accepted_tokens,
            per_position_acceptance_rates=spec_src.per_position_rate,
        )
    gauges = {k: v for sess in sessions for k, v in (sess.spec_gauges or {}).items()}
    tpot_ref = reference_tpot(records)  # stalls per segment against the whole run's TPOT
    held = Held.of_sessions(sessions)  # the load generator's own hold-ups are not the server's stalls
    block = SpecgaugeSummary(
        version=__version__, dialect=run.dialect, server=run.server, sessions=len(sessions),
        resumed_from=run.resumed_from, warnings=run.warnings, latency=m.to_json(),
        acceptance={
            "counters": counts_json(counters, counters_why),
            **per_req_acc,
            "agreement": agreement(per_req_total, counters),
            "server_gauges": gauges,
        },
        segments={
            seg: {
                "latency": latency_metrics(rs, dur, pcts, goodput or None).to_json(),
                "acceptance": acceptance_summary(rs, pcts),
                **({"structured_outputs": so} if (so := outputs_summary(rs)) is not None else {}),
                **({"stalls": st.model_dump()} if (st := summarize_stalls(rs, tpot_ref_s=tpot_ref, held=held)) is not None else {}),
            }
            for seg, rs in sorted(_segments(records).items())
        },
        structured_outputs=outputs_summary(records),
        stalls=stalls.model_dump() if (stalls := summarize_stalls(records, tpot_ref_s=tpot_ref, held=held)) is not None else None,
        memory={
            "device": sessions[-1].memory if sessions else None,
            "kv_cache": _kv_summary(sessions),
            "server": server_memory(_kv_summary(sessions), session_logs(sessions)),
        },
    )
    return _vllm_keys(m, config, percentiles, selected, goodput).model_copy(update={"spec_decode": spec_decode, "specgauge": block})


def _vllm_keys(m: LatencyMetrics, config: dict[str, Any], percentiles: Sequence[float], selected: Sequence[str], goodput: dict[str, float]) -> BenchSummary:
    dists = m.dists()
    metrics = {
        name: MetricStats(mean=finite_or_none(dists[name].mean * 1000), median=finite_or_none(dists[name].median * 1000),
                          std=finite_or_none(dists[name].std * 1000),
                          percentiles={pct_label(p): finite_or_none(dists[name].pct(p) * 1000) for p in percentiles})
        for name in selected
    }
    return BenchSummary(
        duration=m.duration_s, completed=m.completed, failed=m.failed, total_input_tokens=m.total_input_tokens,
        total_output_tokens=m.total_output_tokens, request_throughput=finite_or_none(m.request_throughput),
        request_goodput=finite_or_none(m.request_goodput) if goodput and m.request_goodput is not None else None,
        output_throughput=finite_or_none(m.output_throughput), total_token_throughput=finite_or_none(m.total_token_throughput),
        max_concurrent_requests=m.max_concurrent_requests, max_output_tokens_per_s=finite_or_none(m.max_output_tokens_per_s),
        max_concurrency=config.get("max_concurrency"),
        request_rate="inf" if math.isinf(float(config.get("request_rate", math.inf))) else config.get("request_rate"),
        burstiness=config.get("burstiness"), metrics=metrics,
    )
