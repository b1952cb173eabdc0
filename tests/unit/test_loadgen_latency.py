"""Latency metrics from records: per-token ITL, TPOT, goodput, NaN-with-reason, vLLM percentiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgauge.distributions import describe
from specgauge.records import Chunk, FailureKind, RequestRecord, TokenCountSource
from specgauge.stats.latency import chunk_itls, is_good, latency_metrics, parse_goodput, per_token_itls, tpot


def rec(chunks: list[tuple[float, int]], e2e: float | None = None, ok: bool = True, rid: str = "a", **kw) -> RequestRecord:
    cs = [Chunk(t=t, n=n) for t, n in chunks]
    out = sum(n for _, n in chunks)
    return RequestRecord(
        id=rid, index=0, scheduled_s=0.0, sent_s=0.0, started_at=1000.0, ok=ok,
        failure=None if ok else FailureKind.timeout, ttft_s=cs[0].t if cs else None,
        e2e_s=(e2e if e2e is not None else (cs[-1].t if cs else None)) if ok else None,
        elapsed_s=e2e or (cs[-1].t if cs else 0.0), chunks=cs, token_counts=TokenCountSource.usage,
        prompt_tokens=10, output_tokens=out if ok else None, **kw,
    )


def test_a_chunk_spreads_its_gap_over_its_tokens() -> None:
    # first chunk (1 token) at 0.1; then a 4-token chunk 0.2 s later; then 1 token 0.05 s later
    r = rec([(0.1, 1), (0.3, 4), (0.35, 1)])
    assert per_token_itls(r.chunks) == pytest.approx([0.05] * 4 + [0.05])
    assert chunk_itls(r.chunks) == pytest.approx([0.2, 0.05])
    assert sum(per_token_itls(r.chunks)) == pytest.approx(r.chunks[-1].t - r.chunks[0].t)


def test_tokens_in_the_first_chunk_have_no_gap() -> None:
    r = rec([(0.1, 3), (0.2, 2)])
    assert per_token_itls(r.chunks) == pytest.approx([0.05, 0.05])


def test_tpot_is_vllms_definition() -> None:
    r = rec([(0.1, 1), (0.3, 4), (0.35, 1)], e2e=0.4)
    assert tpot(r) == pytest.approx((0.4 - 0.1) / 5)
    assert tpot(rec([(0.1, 1)])) is None


def test_empty_data_is_nan_with_a_reason_never_zero() -> None:
    m = latency_metrics([rec([], ok=False)], duration_s=1.0)
    assert m.completed == 0 and m.failed == 1 and m.failures == {"timeout": 1}
    assert math.isnan(m.ttft.mean) and m.ttft.reason == "no successful request"
    j = m.to_json()
    assert j["ttft"]["mean_ms"] is None and j["reasons"]["ttft"] == "no successful request"
    single = latency_metrics([rec([(0.1, 1)])], duration_s=1.0)
    assert math.isnan(single.tpot.mean) and "more than one output token" in (single.tpot.reason or "")


def test_percentiles_match_numpy_like_vllm() -> None:
    xs = list(np.random.default_rng(0).exponential(size=101))
    d = describe(xs, [50.0, 99.0])
    assert d.pct(99.0) == pytest.approx(float(np.percentile(xs, 99)))
    assert d.median == pytest.approx(float(np.median(xs)))


def test_throughput_and_counts_use_usage_of_successful_requests() -> None:
    rs = [rec([(0.1, 1), (0.2, 3)], rid="a"), rec([(0.1, 2)], rid="b"), rec([], ok=False, rid="c")]
    m = latency_metrics(rs, duration_s=2.0)
    assert m.total_output_tokens == 6 and m.total_input_tokens == 20
    assert m.output_throughput == pytest.approx(3.0) and m.request_throughput == pytest.approx(1.0)
    assert m.failure_rate == pytest.approx(1 / 3)


def test_goodput() -> None:
    assert parse_goodput(["ttft:150", "e2el:1000"]) == {"ttft": 150.0, "e2el": 1000.0}
    fast, slow = rec([(0.1, 1), (0.2, 1)], rid="f"), rec([(0.2, 1), (0.3, 1)], rid="s")
    slo = parse_goodput(["ttft:150"])
    assert is_good(fast, slo) and not is_good(slow, slo)
    assert latency_metrics([fast, slow], 2.0, goodput_ms=slo).request_goodput == pytest.approx(0.5)
    for bad, msg in ((["ttft"], "NAME:MILLISECONDS"), (["foo:1"], "choose one of"), (["tpot:x"], "not a number")):
        with pytest.raises(ValueError, match=msg):
            parse_goodput(bad)


def test_peak_output_tokens_per_second_bucket() -> None:
    a = rec([(0.1, 1), (0.5, 3), (1.2, 4)], rid="a")
    b = rec([(0.2, 2), (1.9, 1)], rid="b")
    assert latency_metrics([a, b], 2.0).max_output_tokens_per_s == 6.0  # second 0: 1+3+2
    assert math.isnan(latency_metrics([rec([], ok=False)], 1.0).max_output_tokens_per_s)
