"""Judge one window: the candidate against fixed guardrails, then against the baseline on the same
window, then a score. Pure: samples in, a ``Judgement`` with its evidence out (nothing here does I/O).

Order (``judge_window``):
1. **Guardrails** (the candidate alone). Failure rate: failed when a one-sided exact binomial test
   says the rate is above ``max_failure_rate`` (p < α) — so a small sample with one failure does
   not trip it, and a run of failures does at once. TTFT / TPOT / E2E p95 against their SLOs (point
   estimate, once the candidate has ``min_samples`` values). Acceptance rate (accepted / drafted,
   from the candidate's ``/metrics`` diff over the window) against its floor, once
   ``min_draft_tokens`` tokens were drafted.
2. **Relative judge** (Kayenta-like, candidate vs baseline on the same window, each side serving its
   own share of the same traffic, so the samples are independent). Per latency metric:
   - the typical ratio candidate/baseline, exp(Hodges–Lehmann shift of the logs), with its
     Mann–Whitney confidence interval; as a speedup s = 1/ratio with CI [lo, hi] it is read
     against the practical margin m (``min_speedup``, as ``compare --min-speedup``):
       gain beyond the margin    lo > m
       slower beyond the margin  hi < 1 and s < 1/m   → the check fails
       equivalent within margin  1/m ≤ lo and hi ≤ m
       not settled               anything else        → passes (no regression shown)
   - the p95 ratio with a bootstrap CI: fails when the CI lies above 1 and the ratio exceeds m
     (a tail that grew, which a rank test barely sees); judged from ``min_tail_samples`` values a
     side (the p95 of fewer is about the maximum);
   - failures: Fisher's exact test, one-sided (the candidate fails more often), p < α fails;
   - outputs: exact-match rate of greedy (temperature 0) pairs — mirrored requests in shadow mode,
     equal request bodies seen on both sides in live mode — fails above ``max_divergence``.
3. **Too few samples**: fewer than ``min_samples`` successful requests on a side, or too few values
   for a bounded interval at the chosen confidence → INCONCLUSIVE (hold; never promote). Guardrails and the failure tests still act on small samples: their
   tests account for the sample size.
4. **Score and outcome**: score = 100 × passed / decided checks. FAIL when a guardrail failed or
   the score is below ``pass_score``; ``critical`` is set when a critical guardrail failed.
The speed finding (``speed``) comes from ``speed_metric`` (TPOT by default; E2E when too few
requests reported token counts) and is what the controller needs to promote beyond
``max_weight_without_speedup``: equivalent is safe, not a reason to move all traffic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from specgauge.canary.config import JudgeConfig
from specgauge.canary.field_checks import field_checks
from specgauge.canary.window import PairResult, Sample
from specgauge.records import SpecCounts
from specgauge.stats.replay_check import ReplayCheck
from specgauge.stats.shift import (
    bootstrap_quantile_ratio,
    failure_test,
    hodges_lehmann,
    rate_above,
)

GAIN = "gain beyond the margin"
SLOWER = "slower beyond the margin"
EQUIVALENT = "equivalent within the margin"
UNSETTLED = "not settled"
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency"}


class Outcome(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


class Check(BaseModel):
    name: str  #: e.g. guardrail:failure_rate, relative:tpot, relative:tpot_p95, relative:failures, outputs:greedy
    kind: Literal["guardrail", "relative", "outputs"]
    status: Literal["pass", "fail", "skipped"]
    critical: bool = False
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class Judgement(BaseModel):
    outcome: Outcome
    critical: bool = False
    score: float | None = None  #: None when no check was decided
    speed: str | None = None  #: the speed metric's finding (GAIN, SLOWER, EQUIVALENT, UNSETTLED), None when not judged
    speed_metric: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    checks: list[Check] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)  #: why this outcome, in plain words

    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]


class WindowInput(BaseModel):
    """What the judge sees of a window (the service builds it from a ``Window``)."""

    model_config = {"arbitrary_types_allowed": True}

    baseline: list[Sample]
    candidate: list[Sample]
    spec: SpecCounts | None = None  #: the candidate's acceptance over the window
    spec_source: str | None = None
    pairs: list[PairResult] = Field(default_factory=list)
    baseline_expected: bool = True  #: False at weight 100: no baseline traffic by design
    #: the candidate's outputs replayed through its own drafter, against its counts (``stats.replay_check``)
    replay: ReplayCheck | None = None


def _values(samples: Sequence[Sample], metric: str) -> list[float]:
    out = []
    for s in samples:
        v = getattr(s, metric)
        if v is not None and v > 0 and math.isfinite(v):
            out.append(v)
    return out


def _ms(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v * 1000.0, 3)


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def speed_finding(lo: float, hi: float, est: float, margin: float) -> str:
    """Classify a speedup CI [lo, hi] (candidate over baseline) against the margin m."""
    if lo > margin:
        return GAIN
    if hi < 1.0 and est < 1.0 / margin:
        return SLOWER
    if lo >= 1.0 / margin and hi <= margin:
        return EQUIVALENT
    return UNSETTLED


def _guardrails(cand: Sequence[Sample], inp: WindowInput, cfg: JudgeConfig) -> list[Check]:
    g = cfg.guardrails
    crit = set(g.critical)
    checks: list[Check] = []
    n = len(cand)
    nf = sum(1 for s in cand if not s.ok)
    t = rate_above(nf, n, g.max_failure_rate)
    failed = n > 0 and t.p_value < cfg.alpha
    checks.append(Check(
        name="guardrail:failure_rate", kind="guardrail", status="fail" if failed else "pass",
        critical="failure_rate" in crit,
        reason=(f"{nf} of {n} candidate requests failed: above the {g.max_failure_rate:.2%} limit (binomial p={t.p_value:.2g} < {cfg.alpha:g})"
                if failed else f"{nf} of {n} candidate requests failed (limit {g.max_failure_rate:.2%}, binomial p={t.p_value:.2g})"),
        evidence={"failed": nf, "requests": n, "limit": g.max_failure_rate, "p_value": t.p_value,
                  "kinds": _failure_kinds(cand)},
    ))
    for metric, limit in (("ttft", g.ttft_p95_ms), ("tpot", g.tpot_p95_ms), ("e2e", g.e2e_p95_ms)):
        if limit is None:
            continue
        name = f"{metric}_p95"
        vals = _values(cand, metric)
        if len(vals) < cfg.min_samples:
            checks.append(Check(name=f"guardrail:{name}", kind="guardrail", status="skipped", critical=name in crit,
                                reason=f"{_WORDS[metric]} p95: {len(vals)} of {cfg.min_samples} values needed",
                                evidence={"n": len(vals), "limit_ms": limit}))
            continue
        p95 = float(np.percentile(vals, 95)) * 1000.0
        bad = p95 > limit
        checks.append(Check(name=f"guardrail:{name}", kind="guardrail", status="fail" if bad else "pass", critical=name in crit,
                            reason=f"candidate {_WORDS[metric]} p95 {p95:.1f} ms {'above' if bad else 'within'} the {limit:g} ms SLO",
                            evidence={"n": len(vals), "p95_ms": round(p95, 3), "limit_ms": limit}))
    if g.min_acceptance_rate is not None:
        spec = inp.spec
        ev: dict[str, Any] = {"floor": g.min_acceptance_rate, "source": inp.spec_source}
        if spec is None or spec.draft_tokens is None or spec.accepted_tokens is None:
            checks.append(Check(name="guardrail:acceptance", kind="guardrail", status="skipped", critical="acceptance" in crit,
                                reason="no acceptance counts from the candidate in this window", evidence=ev))
        elif spec.draft_tokens < g.min_draft_tokens:
            ev["draft_tokens"] = spec.draft_tokens
            checks.append(Check(name="guardrail:acceptance", kind="guardrail", status="skipped", critical="acceptance" in crit,
                                reason=f"acceptance: {spec.draft_tokens} of {g.min_draft_tokens} drafted tokens needed", evidence=ev))
        else:
            rate = spec.acceptance_rate
            bad = rate < g.min_acceptance_rate
            ev.update(draft_tokens=spec.draft_tokens, accepted_tokens=spec.accepted_tokens, drafts=spec.drafts,
                      acceptance_rate=rate, mean_acceptance_length=_finite(spec.mean_acceptance_length))
            checks.append(Check(name="guardrail:acceptance", kind="guardrail", status="fail" if bad else "pass",
                                critical="acceptance" in crit,
                                reason=f"candidate acceptance {rate:.1%} {'below' if bad else 'at or above'} the {g.min_acceptance_rate:.1%} floor",
                                evidence=ev))
    return checks


def _failure_kinds(samples: Sequence[Sample]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in samples:
        if not s.ok and s.failure:
            out[s.failure] = out.get(s.failure, 0) + 1
    return out


def _relative_metric(metric: str, base: list[float], cand: list[float], cfg: JudgeConfig) -> tuple[list[Check], str | None]:
    m = cfg.min_speedup
    word = _WORDS[metric]
    if len(base) < cfg.min_samples or len(cand) < cfg.min_samples:
        why = f"{word}: {len(base)} baseline and {len(cand)} candidate values, {cfg.min_samples} needed on each side"
        ev = {"n_baseline": len(base), "n_candidate": len(cand)}
        return [Check(name=f"relative:{metric}", kind="relative", status="skipped", reason=why, evidence=ev),
                Check(name=f"relative:{metric}_p95", kind="relative", status="skipped", reason=why, evidence=ev)], None
    hl = hodges_lehmann(base, cand, confidence=cfg.confidence, log=True, seed=cfg.seed)  # ratio candidate/baseline
    ratio, r_lo, r_hi = hl.estimate, hl.low, hl.high
    if r_lo <= 0 or not math.isfinite(r_hi):  # too few values for an interval at this confidence: no verdict
        why = (f"{word}: {len(base)} baseline and {len(cand)} candidate values give no bounded "
               f"{cfg.confidence:.0%} interval; more are needed")
        ev = {"n_baseline": len(base), "n_candidate": len(cand), "unbounded": True}
        return [Check(name=f"relative:{metric}", kind="relative", status="skipped", reason=why, evidence=ev),
                Check(name=f"relative:{metric}_p95", kind="relative", status="skipped", reason=why, evidence=ev)], None
    s_est = 1.0 / ratio
    s_lo = 1.0 / r_hi if r_hi > 0 and math.isfinite(r_hi) else 0.0
    s_hi = 1.0 / r_lo if r_lo > 0 else math.inf
    finding = speed_finding(s_lo, s_hi, s_est, m)
    shift_check = Check(
        name=f"relative:{metric}", kind="relative", status="fail" if finding == SLOWER else "pass",
        reason=(f"{word}: candidate typically {ratio:.2f}x the baseline (speedup {s_est:.2f}, "
                f"{cfg.confidence:.0%} CI {s_lo:.2f}-{s_hi:.2f}): {finding}"),
        evidence={"ratio": ratio, "ratio_low": r_lo, "ratio_high": _finite(r_hi), "speedup": s_est, "speedup_low": s_lo,
                  "speedup_high": _finite(s_hi), "p_value": hl.p_value, "finding": finding, "margin": m,
                  "median_baseline_ms": _ms(float(np.median(base))), "median_candidate_ms": _ms(float(np.median(cand))),
                  "n_baseline": len(base), "n_candidate": len(cand), "test": "Mann-Whitney U, Hodges-Lehmann shift of log values"},
    )
    if min(len(base), len(cand)) < cfg.min_tail_samples:
        return [shift_check, Check(name=f"relative:{metric}_p95", kind="relative", status="skipped",
                                   reason=f"{word} p95: {len(base)} baseline and {len(cand)} candidate values, "
                                          f"{cfg.min_tail_samples} needed on each side for a tail estimate",
                                   evidence={"n_baseline": len(base), "n_candidate": len(cand)})], finding
    q = bootstrap_quantile_ratio(base, cand, 95.0, confidence=cfg.confidence, resamples=cfg.resamples, seed=cfg.seed)
    tail_bad = q.low > 1.0 and q.estimate > m
    tail_check = Check(
        name=f"relative:{metric}_p95", kind="relative", status="fail" if tail_bad else "pass",
        reason=(f"{word} p95: candidate {q.y_value * 1000:.1f} ms vs baseline {q.x_value * 1000:.1f} ms, ratio {q.estimate:.2f} "
                f"(CI {q.low:.2f}-{q.high:.2f}){': the tail grew beyond the margin' if tail_bad else ''}"),
        evidence={"p95_baseline_ms": _ms(q.x_value), "p95_candidate_ms": _ms(q.y_value), "ratio": _finite(q.estimate),
                  "ratio_low": _finite(q.low), "ratio_high": _finite(q.high), "resamples": q.resamples, "margin": m,
                  "test": "percentile bootstrap of the p95 ratio"},
    )
    return [shift_check, tail_check], finding


def _failures_check(base: Sequence[Sample], cand: Sequence[Sample], cfg: JudgeConfig) -> Check:
    bf, cf = sum(1 for s in base if not s.ok), sum(1 for s in cand if not s.ok)
    if not base or not cand:
        return Check(name="relative:failures", kind="relative", status="skipped",
                     reason="failures: no requests on one side", evidence={"n_baseline": len(base), "n_candidate": len(cand)})
    t = failure_test(cf, len(cand), bf, len(base))
    bad = t.p_value < cfg.alpha
    return Check(name="relative:failures", kind="relative", status="fail" if bad else "pass",
                 reason=(f"failures: candidate {cf}/{len(cand)}, baseline {bf}/{len(base)} "
                         f"(Fisher one-sided p={t.p_value:.2g}{' < ' + format(cfg.alpha, 'g') if bad else ''})"),
                 evidence={"candidate_failed": cf, "candidate_requests": len(cand), "baseline_failed": bf,
                           "baseline_requests": len(base), "p_value": t.p_value, "odds_ratio": t.odds_ratio,
                           "test": "Fisher exact, one-sided"})


def _outputs_check(pairs: Sequence[PairResult], cfg: JudgeConfig) -> Check:
    n = len(pairs)
    same = sum(1 for p in pairs if p.match)
    ev: dict[str, Any] = {"pairs": n, "exact_match": same, "exact_match_rate": same / n if n else None,
                          "kinds": sorted({p.kind for p in pairs}),
                          "mismatched_keys": [p.key for p in pairs if not p.match][:20]}
    if n < cfg.min_pairs:
        return Check(name="outputs:greedy", kind="outputs", status="skipped",
                     reason=f"greedy outputs: {n} of {cfg.min_pairs} pairs needed", evidence=ev)
    diverged = (n - same) / n
    bad = diverged > cfg.max_divergence
    return Check(name="outputs:greedy", kind="outputs", status="fail" if bad else "pass",
                 reason=f"greedy outputs: {same} of {n} pairs identical ({same / n:.1%}; at most {cfg.max_divergence:.1%} may differ)",
                 evidence=ev)


def judge_window(inp: WindowInput, cfg: JudgeConfig) -> Judgement:
    base = list(inp.baseline)
    cand = list(inp.candidate)
    b_ok = [s for s in base if s.ok]
    c_ok = [s for s in cand if s.ok]
    counts = {"baseline": len(base), "candidate": len(cand), "baseline_ok": len(b_ok), "candidate_ok": len(c_ok),
              "pairs": len(inp.pairs)}
    checks = _guardrails(cand, inp, cfg)
    checks += [Check(**c) for c in field_checks(base, cand, inp.baseline_expected, cfg, inp.replay)]
    speed: str | None = None
    speed_metric: str | None = None
    findings: dict[str, str] = {}
    if inp.baseline_expected:
        for metric in cfg.metrics:
            mc, finding = _relative_metric(metric, _values(b_ok, metric), _values(c_ok, metric), cfg)
            checks += mc
            if finding is not None:
                findings[metric] = finding
        for metric in dict.fromkeys((cfg.speed_metric, "e2e")):  # the speed metric, else E2E
            if metric not in findings and metric not in cfg.metrics:
                _, finding = _relative_metric(metric, _values(b_ok, metric), _values(c_ok, metric), cfg)
                if finding is not None:
                    findings[metric] = finding
            if metric in findings:
                speed, speed_metric = findings[metric], metric
                break
        checks.append(_failures_check(base, cand, cfg))
    checks.append(_outputs_check(inp.pairs, cfg))

    decided = [c for c in checks if c.status != "skipped"]
    passed = sum(1 for c in decided if c.status == "pass")
    score = 100.0 * passed / len(decided) if decided else None
    failed = [c for c in checks if c.status == "fail"]
    critical = any(c.critical for c in failed)
    guard_failed = any(c.kind == "guardrail" for c in failed)
    unbounded = [c for c in checks if c.status == "skipped" and c.evidence.get("unbounded")]
    too_few = len(c_ok) < cfg.min_samples or (inp.baseline_expected and len(b_ok) < cfg.min_samples) or bool(unbounded)
    reasons = [c.reason for c in failed]
    if critical or guard_failed or (score is not None and score < cfg.pass_score):
        outcome = Outcome.FAIL
        if not guard_failed:
            reasons.append(f"score {score:.0f} below {cfg.pass_score:g}")
    elif too_few:
        outcome = Outcome.INCONCLUSIVE
        need = [f"{side} {n} of {cfg.min_samples}" for side, n in (("candidate", len(c_ok)), ("baseline", len(b_ok)))
                if n < cfg.min_samples and (side == "candidate" or inp.baseline_expected)]
        if need:
            reasons.append("too few successful requests to judge (" + ", ".join(need) + ")")
        else:
            reasons.append("too few values for a bounded interval: " + "; ".join(c.reason for c in unbounded[::2]))
    else:
        outcome = Outcome.PASS
        reasons.append(f"score {score:.0f}: no guardrail failed, no regression shown" if score is not None else "no check failed")
    return Judgement(outcome=outcome, critical=critical, score=score, speed=speed, speed_metric=speed_metric,
                     counts=counts, checks=checks, reasons=reasons)
