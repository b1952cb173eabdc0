"""GO / NO-GO / INCONCLUSIVE with reasons, SLO parsing, exit codes, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.records import ResultsFile
from specgauge.stats.compare import compare_records
from specgauge.stats.verdict import (
    EQUIVALENT, GAIN, NO_GAIN, UNSETTLED, RunInfo, Verdict, VerdictCriteria, VerdictError, decide, parse_slo,
)
from tests.unit.test_compare import rec, run

INFO = (RunInfo(label="base", path="a", kind="bench"), RunInfo(label="cand", path="b", kind="bench"))


def verdict(base, cand, **kw):  # type: ignore[no-untyped-def]
    crit = VerdictCriteria(**{k: v for k, v in kw.items() if k in VerdictCriteria.model_fields})
    rest = {k: v for k, v in kw.items() if k not in VerdictCriteria.model_fields}
    return decide(base, cand, *INFO, criteria=crit, **rest)


def jittered(base, speed: float, sigma: float, seed: int):  # type: ignore[no-untyped-def]
    """The baseline's requests, each ``speed``× faster times its own noise factor 1 + sigma·z (paired ids)."""
    z = np.clip(np.random.default_rng(seed).standard_normal(len(base)), -2.5, 2.5)
    return [r.model_copy(update={"e2e_s": r.e2e_s * (1 + sigma * x) / speed, "elapsed_s": r.elapsed_s * (1 + sigma * x) / speed})
            for r, x in zip(base, z)]


def test_twice_as_fast_is_go_with_ci_around_2() -> None:
    res = verdict(run(), run(scale=0.5), temperature=0.0)
    v = res.verdict.overall
    assert v.verdict is Verdict.GO and res.verdict.exit_code == 0 and v.finding == GAIN
    assert "faster" in v.reasons[0] and "2.000×" in v.reasons[0] and "1.05× margin" in v.reasons[0]
    assert res.overall.speedup.low == pytest.approx(2.0)  # type: ignore[union-attr]
    assert set(res.verdict.segments) == {"a", "b"} and all(s.verdict is Verdict.GO for s in res.verdict.segments.values())


def test_identical_runs_are_equivalent_within_the_margin_not_a_request_for_more() -> None:
    base = run()
    res = verdict(base, [r.model_copy() for r in base])
    v = res.verdict.overall
    assert v.verdict is Verdict.NO_GO and res.verdict.exit_code == 1 and v.finding == EQUIVALENT
    assert "equivalent within the margin" in v.reasons[0] and "nothing worth turning on" in v.reasons[0]
    assert v.more_requests is None and v.more_requests_reason is None


def test_a_noisy_aa_pair_and_a_real_but_small_gain_are_both_equivalent() -> None:
    base = run()
    for speed in (1.0, 1.02):  # a 2 % gain, measured tightly, is inside the 1.05× band: not worth turning on
        res = verdict(base, jittered(base, speed, 0.03, seed=0))
        v = res.verdict.overall
        lo, hi = res.overall.speedup.low, res.overall.speedup.high  # type: ignore[union-attr]
        assert 1 / 1.05 <= lo and hi <= 1.05 and v.verdict is Verdict.NO_GO and v.finding == EQUIVALENT, (lo, hi)


def test_a_wide_ci_below_the_margin_is_no_gain_worth_turning_on() -> None:
    base = run()
    res = verdict(base, jittered(base, 0.97, 0.35, seed=3))
    v = res.verdict.overall
    lo, hi = res.overall.speedup.low, res.overall.speedup.high  # type: ignore[union-attr]
    assert lo < 1 / 1.05 and 1 <= hi < 1.05, (lo, hi)  # straddles 1, so not "slower"; too wide for the band
    assert v.verdict is Verdict.NO_GO and v.finding == NO_GAIN and "no gain worth turning on" in v.reasons[0]
    assert v.more_requests is None


def test_a_ci_straddling_the_margin_is_inconclusive_with_an_n_estimate() -> None:
    base = run()
    res = verdict(base, jittered(base, 1.06, 0.35, seed=0))
    v = res.verdict.overall
    s = res.overall.speedup  # type: ignore[union-attr]
    assert s.low < 1.05 < s.high and v.verdict is Verdict.INCONCLUSIVE and res.verdict.exit_code == 3  # type: ignore[operator]
    assert v.finding == UNSETTLED and any("1.05× margin" in n and "not settled" in n for n in v.notes)
    # n' = n·(h/d)² with d the distance of the estimate from the margin (1.05), not from 1
    h, d = (s.high - s.low) / 2, abs(s.estimate - 1.05)  # type: ignore[operator]
    assert v.more_requests == math.ceil(200 * (h / d) ** 2) - 200 and "more paired requests" in (v.more_requests_reason or "")


def test_the_same_ci_decides_differently_under_another_margin() -> None:
    base = run()
    cand = jittered(base, 1.06, 0.35, seed=0)  # CI about 1.02–1.12
    assert verdict(base, cand, min_speedup=1.0).verdict.overall.verdict is Verdict.GO
    wide = verdict(base, cand, min_speedup=1.2).verdict.overall  # band 0.833–1.2 holds the whole CI
    assert wide.verdict is Verdict.NO_GO and wide.finding == EQUIVALENT


def test_latency_gain_counts_only_beyond_the_margin() -> None:
    from specgauge.stats.compare import CI, MetricDelta
    from specgauge.stats.verdict import judge

    g = compare_records(run(), run())[0]
    g.speedup = CI(estimate=1.0, low=0.99, high=1.01, n=200)  # equivalent on throughput
    g.latency = [MetricDelta(metric="e2e", stat="p95", baseline_ms=100.0, candidate_ms=97.0,
                             delta_ms=CI(estimate=-3.0, low=-4.0, high=-2.0, n=200))]
    v = judge(g, VerdictCriteria())
    assert v.verdict is Verdict.NO_GO and v.finding == EQUIVALENT  # 3 % lower p95 is below the margin (4.8 %)
    assert any("not by the 1.05× margin" in n for n in v.notes)
    g.latency[0] = MetricDelta(metric="e2e", stat="p95", baseline_ms=100.0, candidate_ms=80.0,
                               delta_ms=CI(estimate=-20.0, low=-25.0, high=-15.0, n=200))
    v2 = judge(g, VerdictCriteria())
    assert v2.verdict is Verdict.GO and "by more than the 1.05× margin" in v2.reasons[0]


def test_n_estimate_scales_the_ci_half_width_as_one_over_sqrt_n() -> None:
    from specgauge.stats.verdict import _needed

    # half-width 0.02, effect 0.01 from the threshold: n' = n·(h/d)² = 4n, so 3n more
    assert _needed(100, 1.01, 0.99, 1.03, 1.0) == 300
    assert _needed(100, 1.02, 1.00, 1.04, 1.0) == 0
    assert _needed(100, 1.0, 0.98, 1.02, 1.0) is None  # no effect: no n settles it
    assert _needed(50, -3.0, -9.0, 3.0, 0.0) == 150  # latency delta: h = 6, d = 3


def test_slo_violated_is_no_go_with_the_reason() -> None:
    res = verdict(run(), run(scale=0.5), slo_ms=parse_slo("e2e_p95_ms=100,ttft_p95_ms=1000"))
    v = res.verdict.overall
    assert v.verdict is Verdict.NO_GO and res.verdict.exit_code == 1
    assert any("misses the SLO E2E latency p95 ≤ 100 ms" in r for r in v.reasons)
    assert any("meets the SLO TTFT p95" in n for n in v.notes)


def test_slower_candidate_is_no_go() -> None:
    res = verdict(run(), run(scale=1.3))
    assert res.verdict.overall.verdict is Verdict.NO_GO
    assert "slower" in res.verdict.overall.reasons[0]


def test_more_failures_is_no_go() -> None:
    cand = run(scale=0.5)
    for i in range(0, 200, 5):
        cand[i] = rec(i, 1.0, ok=False, segment=cand[i].segment)
    res = verdict(run(), cand)
    v = res.verdict.overall
    assert v.verdict is Verdict.NO_GO and any("more requests fail" in r for r in v.reasons)


def test_divergence_at_temperature_0_beyond_tolerance_is_no_go_within_is_a_note() -> None:
    base = run(n=100)
    cand = run(n=100, scale=0.5)
    cand[7] = cand[7].model_copy(update={"text": "changed"})
    ok = verdict(base, cand, temperature=0.0)
    assert ok.verdict.overall.verdict is Verdict.GO
    assert any("rare divergence: 1 of 100" in n for n in ok.verdict.overall.notes)
    for i in (8, 9, 10):
        cand[i] = cand[i].model_copy(update={"text": "changed"})
    bad = verdict(base, cand, temperature=0.0)
    assert bad.verdict.overall.verdict is Verdict.NO_GO
    assert any("outputs changed: 4 of 100" in r for r in bad.verdict.overall.reasons)


def test_too_few_pairs_is_inconclusive() -> None:
    res = verdict(run(n=4), run(n=4, scale=0.5))
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE and v.more_requests == 6


def test_parse_slo() -> None:
    assert parse_slo("e2e_p95_ms=500, ttft_p95_ms=200,tpot_p50_ms=20") == {"e2e_p95": 500.0, "ttft_p95": 200.0, "tpot_p50": 20.0}
    assert parse_slo(None) == {}
    for bad, msg in (("e2e=5", "name a statistic"), ("e2e_p95_ms", "NAME=MILLISECONDS"), ("e2e_p95_ms=x", "not a number"),
                     ("e2e_p95_ms=-1", "> 0")):
        with pytest.raises(VerdictError, match=msg):
            parse_slo(bad)


def _dir(d: Path, records) -> Path:  # type: ignore[no-untyped-def]
    d.mkdir()
    f = ResultsFile(d / "results.jsonl").open()
    for r in records:
        f.append(r)
    f.close()
    return d


def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    a, b = _dir(tmp_path / "a", run(n=40)), _dir(tmp_path / "b", run(n=40, scale=0.5))
    cli = CliRunner()
    go = cli.invoke(app, ["compare", str(a), str(b), "--json"])
    assert go.exit_code == 0, go.output
    data = json.loads(go.stdout)
    assert data["kind"] == "specgauge.compare" and data["verdict"]["overall"]["verdict"] == "GO"
    nogo = cli.invoke(app, ["compare", str(a), str(b), "--slo", "e2e_p95_ms=1"])
    assert nogo.exit_code == 1 and "NO-GO" in nogo.stdout and "misses the SLO" in nogo.stdout
    same = cli.invoke(app, ["compare", str(a), str(a)])  # A/A: equivalent within the margin, NO-GO
    assert same.exit_code == 1 and "NO-GO" in same.stdout and "equivalent within the margin" in same.stdout
    base = run()
    c, d = _dir(tmp_path / "c", base), _dir(tmp_path / "d", jittered(base, 1.06, 0.35, seed=0))  # CI straddles 1.05
    unsettled = cli.invoke(app, ["compare", str(c), str(d)])
    assert unsettled.exit_code == 3 and "INCONCLUSIVE" in unsettled.stdout and "more paired requests" in unsettled.stdout
    go = cli.invoke(app, ["compare", str(c), str(d), "--min-speedup", "1.0"])  # the whole CI above 1
    assert go.exit_code == 0, go.stdout
    bad = cli.invoke(app, ["compare", str(a), str(b), "--slo", "latency=5"])
    assert bad.exit_code == 2 and "--slo" in bad.output
    missing = cli.invoke(app, ["compare", str(a), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "nope: no such file" in missing.output


def test_too_few_pairs_never_gives_a_ci_based_verdict() -> None:
    """Two pairs make a degenerate bootstrap 'interval': no NO-GO (or GO) may rest on it."""
    res = verdict(run(n=2), run(n=2, scale=2.0), temperature=0.0)  # clearly slower, but only 2 pairs
    v = res.verdict.overall
    assert v.verdict is Verdict.INCONCLUSIVE
    assert any("too few pairs" in n for n in v.notes)
    slow = verdict(run(), run(scale=2.0), temperature=0.0)  # the same with 200 pairs is NO-GO
    assert slow.verdict.overall.verdict is Verdict.NO_GO


def test_cli_and_library_share_the_margin_default() -> None:
    import inspect

    from specgauge.cli.decide import compare

    assert inspect.signature(compare).parameters["min_speedup"].default == VerdictCriteria().min_speedup == 1.05
