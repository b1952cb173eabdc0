"""The canary judge on synthetic windows with known answers: an A/A window passes, a slower or
failing candidate fails (critical failure-rate guardrail vs. non-critical relative checks), a faster
one shows a gain, a grown tail is caught by the p95 bootstrap while the rank test is quiet, too few
samples are INCONCLUSIVE, guardrails on SLOs / acceptance / outputs; and the two-sample statistics
against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specgauge.canary.config import Guardrails, JudgeConfig
from specgauge.canary.judge import EQUIVALENT, GAIN, SLOWER, Outcome, WindowInput, judge_window, speed_finding
from specgauge.canary.observe import Role
from specgauge.canary.window import PairResult, Sample
from specgauge.records import SpecCounts
from specgauge.stats.shift import bootstrap_quantile_ratio, failure_test, hodges_lehmann, rate_above


def samples(n: int, scale: float = 1.0, seed: int = 0, fail: int = 0, tail: float = 0.0, tail_factor: float = 1.0,
            sigma: float = 0.25) -> list[Sample]:
    """n requests with log-normal latencies (TTFT ~50 ms, TPOT ~20 ms, E2E = TTFT + 100 TPOT), times
    ``scale``; the last ``fail`` failed; a ``tail`` share of requests ``tail_factor`` times slower."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = scale * (tail_factor if rng.random() < tail else 1.0)
        ttft = 0.05 * rng.lognormal(0, sigma) * k
        tp = 0.02 * rng.lognormal(0, sigma) * k
        ok = i < n - fail
        out.append(Sample(role=Role.live, ok=ok, failure=None if ok else "http_status", ttft=ttft if ok else None,
                          tpot=tp if ok else None, e2e=(ttft + 100 * tp) if ok else None))
    return out


def check(j, name):  # noqa: ANN001, ANN201
    return next(c for c in j.checks if c.name == name)


CFG = JudgeConfig(min_samples=20)


def test_a_a_window_passes_and_finds_no_regression() -> None:
    j = judge_window(WindowInput(baseline=samples(200, seed=1), candidate=samples(200, seed=2)), CFG)
    assert j.outcome is Outcome.PASS and not j.critical and j.score == 100.0
    assert j.speed not in (GAIN, SLOWER) and j.speed_metric == "tpot"
    assert {c.name for c in j.checks} >= {"guardrail:failure_rate", "relative:ttft", "relative:tpot", "relative:e2e",
                                          "relative:tpot_p95", "relative:failures", "outputs:greedy"}


def test_slower_candidate_fails_the_relative_judge_not_critically() -> None:
    j = judge_window(WindowInput(baseline=samples(100, seed=1), candidate=samples(100, scale=1.4, seed=2)), CFG)
    assert j.outcome is Outcome.FAIL and not j.critical
    assert check(j, "relative:tpot").status == "fail" and check(j, "relative:tpot").evidence["finding"] == SLOWER
    assert check(j, "guardrail:failure_rate").status == "pass"
    assert j.speed == SLOWER and j.score is not None and j.score < CFG.pass_score
    # a significant slowdown within the margin is not a failure: exactly 3 % slower with a 1.05 margin
    j2 = judge_window(WindowInput(baseline=samples(300, seed=1, sigma=0.05), candidate=samples(300, scale=1.03, seed=2, sigma=0.05)), CFG)
    ev = check(j2, "relative:tpot").evidence
    assert 1.0 < ev["ratio_low"] and ev["ratio"] < 1.05
    assert check(j2, "relative:tpot").status == "pass"


def test_faster_candidate_shows_a_gain_beyond_the_margin() -> None:
    j = judge_window(WindowInput(baseline=samples(100, seed=3), candidate=samples(100, scale=0.6, seed=4)), CFG)
    assert j.outcome is Outcome.PASS and j.speed == GAIN
    ev = check(j, "relative:tpot").evidence
    assert ev["speedup_low"] > 1.05 and ev["p_value"] < 0.01


def test_grown_tail_is_caught_by_the_p95_bootstrap_not_the_rank_test() -> None:
    base = samples(400, seed=5)
    cand = samples(400, seed=6, tail=0.08, tail_factor=4.0)
    j = judge_window(WindowInput(baseline=base, candidate=cand), CFG)
    assert check(j, "relative:e2e").status == "pass"  # the typical request did not change
    assert check(j, "relative:e2e_p95").status == "fail"
    assert j.outcome is Outcome.FAIL


def test_failures_critical_guardrail_rolls_back_on_small_samples_fisher_on_larger() -> None:
    # 5 of 5 candidate requests failed: too few successes to compare latency, but the binomial test is sure
    j = judge_window(WindowInput(baseline=samples(30), candidate=samples(5, fail=5)), CFG)
    assert j.outcome is Outcome.FAIL and j.critical
    assert check(j, "guardrail:failure_rate").status == "fail" and check(j, "relative:tpot").status == "skipped"
    # one failure in three: not significant above 1 % at alpha 0.01 -> not a failure, and too few samples
    j = judge_window(WindowInput(baseline=samples(30), candidate=samples(3, fail=1)), CFG)
    assert check(j, "guardrail:failure_rate").status == "pass" and j.outcome is Outcome.INCONCLUSIVE
    # 10 of 80 vs 0 of 80 with a lenient 20 % guardrail: Fisher fails it (non-critical)
    cfg = JudgeConfig(min_samples=20, guardrails=Guardrails(max_failure_rate=0.2))
    j = judge_window(WindowInput(baseline=samples(80, seed=1), candidate=samples(80, seed=2, fail=10)), cfg)
    assert check(j, "guardrail:failure_rate").status == "pass"
    assert check(j, "relative:failures").status == "fail" and j.outcome is Outcome.FAIL and not j.critical
    # failure_rate taken off the critical list: the same failure still fails, but not critically
    cfg = JudgeConfig(min_samples=20, guardrails=Guardrails(critical=[]))
    j = judge_window(WindowInput(baseline=samples(30), candidate=samples(5, fail=5)), cfg)
    assert j.outcome is Outcome.FAIL and not j.critical


def test_too_few_samples_is_inconclusive() -> None:
    j = judge_window(WindowInput(baseline=samples(100), candidate=samples(19)), CFG)
    assert j.outcome is Outcome.INCONCLUSIVE and "candidate 19 of 20" in j.reasons[-1]
    j = judge_window(WindowInput(baseline=samples(5), candidate=samples(100)), CFG)
    assert j.outcome is Outcome.INCONCLUSIVE and "baseline 5 of 20" in j.reasons[-1]
    j = judge_window(WindowInput(baseline=[], candidate=[]), CFG)
    assert j.outcome is Outcome.INCONCLUSIVE
    # 4 a side pass min_samples=4, but at 99 % confidence give no bounded interval: still no verdict, never a pass
    j = judge_window(WindowInput(baseline=samples(4), candidate=samples(4, scale=10.0)), JudgeConfig(min_samples=4))
    assert j.outcome is Outcome.INCONCLUSIVE and check(j, "relative:tpot").evidence.get("unbounded")
    assert "bounded interval" in j.reasons[-1]


def test_last_step_judges_the_candidate_alone() -> None:
    j = judge_window(WindowInput(baseline=[], candidate=samples(40), baseline_expected=False), CFG)
    assert j.outcome is Outcome.PASS and j.speed is None
    assert not any(c.kind == "relative" for c in j.checks)


def test_slo_and_acceptance_guardrails() -> None:
    g = Guardrails(ttft_p95_ms=40.0, e2e_p95_ms=100_000.0, min_acceptance_rate=0.5, min_draft_tokens=100)
    cfg = JudgeConfig(min_samples=20, guardrails=g)
    low = SpecCounts(drafts=100, draft_tokens=400, accepted_tokens=120, source="test")
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=9), spec=low, spec_source="test"), cfg)
    assert check(j, "guardrail:ttft_p95").status == "fail"  # TTFT p95 is ~75 ms
    assert check(j, "guardrail:e2e_p95").status == "pass"
    acc = check(j, "guardrail:acceptance")
    assert acc.status == "fail" and acc.evidence["acceptance_rate"] == pytest.approx(0.3)
    assert j.outcome is Outcome.FAIL and not j.critical
    few = SpecCounts(drafts=10, draft_tokens=40, accepted_tokens=1, source="test")
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=9), spec=few), cfg)
    assert check(j, "guardrail:acceptance").status == "skipped"
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=9), spec=None), cfg)
    assert check(j, "guardrail:acceptance").status == "skipped"
    cfg = JudgeConfig(min_samples=20, guardrails=Guardrails(min_acceptance_rate=0.5, critical=["acceptance"]))
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=9), spec=low), cfg)
    assert j.critical


def test_greedy_output_pairs() -> None:
    pairs = [PairResult(f"id:r{i}", "shadow", i != 3) for i in range(10)]
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=2), pairs=pairs), CFG)
    c = check(j, "outputs:greedy")
    assert c.status == "fail" and c.evidence["exact_match_rate"] == 0.9 and c.evidence["mismatched_keys"] == ["id:r3"]
    assert j.outcome is Outcome.FAIL
    j = judge_window(WindowInput(baseline=samples(50), candidate=samples(50, seed=2), pairs=pairs[:3]), CFG)
    assert check(j, "outputs:greedy").status == "skipped"


def test_speed_metric_falls_back_to_e2e_without_token_counts() -> None:
    base, cand = samples(60, seed=1), samples(60, scale=0.5, seed=2)
    for s in base + cand:
        s.tpot = None  # clients that did not ask for usage
    j = judge_window(WindowInput(baseline=base, candidate=cand), CFG)
    assert j.speed_metric == "e2e" and j.speed == GAIN


def test_speed_findings_against_the_margin() -> None:
    assert speed_finding(1.2, 1.5, 1.3, 1.05) == GAIN
    assert speed_finding(0.97, 1.03, 1.0, 1.05) == EQUIVALENT
    assert speed_finding(0.5, 0.8, 0.7, 1.05) == SLOWER
    assert speed_finding(0.9, 0.99, 0.97, 1.05) != SLOWER  # significant but within the margin


# ---------------------------------------------------------------------------- stats.shift


def test_hodges_lehmann_against_brute_force() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 23), rng.normal(0.8, 1, 31)
    h = hodges_lehmann(x, y, confidence=0.95)
    diffs = sorted(b - a for a, b in itertools.product(x, y))
    assert h.estimate == pytest.approx(float(np.median(diffs)))
    assert h.low in diffs and h.high in diffs and h.low < h.estimate < h.high
    assert h.p_value < 0.05 and h.low > 0
    r = hodges_lehmann(np.exp(x), 2.0 * np.exp(x), log=True)  # y = 2x exactly: ratio 2
    assert r.estimate == pytest.approx(2.0) and r.log_scale
    tiny = hodges_lehmann([1.0, 2.0], [3.0], confidence=0.99)
    assert tiny.low == -np.inf and tiny.high == np.inf  # too few for a 99 % interval


def test_hodges_lehmann_interval_covers_the_shift() -> None:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        h = hodges_lehmann(rng.normal(0, 1, 15), rng.normal(0.5, 1, 20), confidence=0.9)
        hits += h.low <= 0.5 <= h.high
    assert 0.84 <= hits / 200 <= 0.97


def test_quantile_ratio_and_count_tests() -> None:
    rng = np.random.default_rng(1)
    x = rng.lognormal(0, 0.3, 300)
    q = bootstrap_quantile_ratio(x, 1.5 * x, seed=3)
    assert q.estimate == pytest.approx(1.5) and q.low > 1.2
    assert q == bootstrap_quantile_ratio(x, 1.5 * x, seed=3)  # seeded
    assert failure_test(10, 50, 0, 50).p_value < 0.01
    assert failure_test(1, 50, 1, 50).p_value > 0.5
    assert rate_above(5, 5, 0.01).p_value < 1e-6
    assert rate_above(0, 0, 0.01).p_value == 1.0
    assert rate_above(1, 10, 0.0).p_value == 0.0 and rate_above(0, 10, 0.0).p_value == 1.0
