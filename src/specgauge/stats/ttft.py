"""The candidate's TTFT against the baseline's, split by where the time went.

TTFT = the wait for a place in a step (the server's queue) + the step that prefills the prompt (a
speculative server with a draft model, EAGLE or DFlash head also prefills its drafter there: on the
critical path, vllm #39790) + what lies outside the engine (HTTP, the first chunk's detokenising).
Means add up, so the mean of the paired TTFT differences splits exactly into

    Δ TTFT = Δ queue + Δ prefill + Δ rest

with Δ queue and Δ prefill the differences of the two runs' mean ``vllm:request_queue_time_seconds``
and ``vllm:request_prefill_time_seconds`` (the server's own histograms, diffed over each run by
bench: their ``_sum`` / ``_count``) and Δ rest the remainder. The step law's prediction of the
drafter's part is added beside it by ``predict.ttft`` when a cost profile is given.

Boundary: records and the runs' counter diffs in, a ``TtftSplit`` out; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from scipy import stats as _st
from pydantic import BaseModel

from specgauge.i18n import en
from specgauge.records import RequestRecord

QUEUE = "request_queue_time_seconds"
PREFILL = "request_prefill_time_seconds"


class TtftSplit(BaseModel):
    """Means in milliseconds, candidate − baseline (positive: the candidate is slower)."""

    pairs: int = 0
    measured_delta_ms: float | None = None  #: mean of the paired TTFT differences
    measured_delta_p50_ms: float | None = None
    queue_delta_ms: float | None = None  #: the server's mean queue time, candidate − baseline
    prefill_delta_ms: float | None = None  #: the server's mean prefill time, candidate − baseline
    rest_delta_ms: float | None = None  #: measured − queue − prefill
    predicted_prefill_delta_ms: float | None = None  #: the step law's drafter prefill (``predict.ttft``)
    predicted_basis: str | None = None  #: how the prediction was made (English, stored)
    #: what dominates a TTFT that got worse: the drafter's prefill or the queue (None: not worse, or unknown)
    finding: Literal["prefill", "queue"] | None = None
    reason: str | None = None  #: why a part is missing (English, stored)


def server_mean(counter_diffs: Sequence[Mapping[str, float]], name: str) -> float | None:
    """Mean of a vLLM histogram ``{prefix}:{name}`` over the diffs (its ``_sum`` / ``_count``, any
    prefix and label set), or None when no diff has it."""
    total = count = 0.0
    seen = False
    for d in counter_diffs:
        for key, v in d.items():
            base = key.split("{", 1)[0]
            if base.endswith(f":{name}_sum"):
                total, seen = total + v, True
            elif base.endswith(f":{name}_count"):
                count += v
    return total / count if seen and count > 0 else None


def split_ttft(baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord],
               baseline_counters: Sequence[Mapping[str, float]], candidate_counters: Sequence[Mapping[str, float]],
               alpha: float = 0.01) -> TtftSplit:
    """The split over requests both runs served successfully (paired by id). ``finding`` names the
    part that holds most of a TTFT that got worse: the mean paired difference above 0 by a one-sided
    t-test (p < ``alpha``; the mean is what splits, and a reordered queue makes single pairs swing both
    ways), the part more than half of it."""
    cmap = {r.id: r for r in candidate if r.ok and r.ttft_s is not None}
    d = [(cmap[r.id].ttft_s - r.ttft_s) * 1000 for r in baseline if r.ok and r.ttft_s is not None and r.id in cmap]  # type: ignore[operator]
    out = TtftSplit(pairs=len(d))
    if not d:
        out.reason = en("ttft.r.no_pairs")
        return out
    out.measured_delta_ms = float(np.mean(d))
    out.measured_delta_p50_ms = float(np.median(d))
    parts = {}
    for name in (QUEUE, PREFILL):
        b, c = server_mean(baseline_counters, name), server_mean(candidate_counters, name)
        parts[name] = None if b is None or c is None else (c - b) * 1000
    out.queue_delta_ms, out.prefill_delta_ms = parts[QUEUE], parts[PREFILL]
    if out.queue_delta_ms is None or out.prefill_delta_ms is None:
        out.reason = en("ttft.r.no_histograms")
        return out
    out.rest_delta_ms = out.measured_delta_ms - out.queue_delta_ms - out.prefill_delta_ms
    if len(d) >= 6 and out.measured_delta_ms > 0 and _st.ttest_1samp(d, 0.0, alternative="greater").pvalue < alpha:
        share = {"prefill": out.prefill_delta_ms, "queue": out.queue_delta_ms}
        part, v = max(share.items(), key=lambda kv: kv[1])
        if v > 0.5 * out.measured_delta_ms:
            out.finding = part  # type: ignore[assignment]
    return out
