"""GO / NO-GO / INCONCLUSIVE: turn a comparison into a decision with reasons in plain words.

A decision, not only a test: the speedup is judged against a *practical margin* m
(``VerdictCriteria.min_speedup``, ``--min-speedup``, default 1.05×) — a gain smaller than m is not
worth turning speculation on for, however significant. With the speedup's CI [lo, hi] (candidate
over baseline), per segment and overall:

- **gain beyond the margin**  lo > m: the whole CI clears the margin → GO (unless something blocks).
- **equivalent within the margin**  1/m ≤ lo and hi ≤ m: the CI lies inside the equivalence band
  around 1 → NO-GO, exit 1: there is nothing worth turning on. An A/A comparison (two baseline runs
  of the same server) ends here once its CI is narrow enough — never in "run N more requests".
- **slower**  hi < 1 (and not inside the band) → NO-GO.
- **no gain worth turning on**  hi < m otherwise: even the CI's upper end is below the margin → NO-GO.
- **not settled**  the CI straddles m → INCONCLUSIVE with an estimate of the paired requests that
  would settle it: a CI's half-width h shrinks as 1/√n, so an estimate d away from m is resolved
  at n' ≈ n·(h/d)².
The chosen latency statistic (``--latency-metric``, e.g. E2E p95) can also justify GO, by the same
margin: its CI of candidate − baseline must lie entirely below −(1 − 1/m) × the baseline's value.

Other rules: NO-GO when the candidate misses an SLO (``--slo e2e_p95_ms=…``), its failure rate is
higher by more than ``max_failure_increase`` with a CI excluding 0, more of its structured outputs
(tool calls, JSON) break their request's schema or more of its requests stall (Fisher one-sided
p < ``alpha``), or at temperature 0 more than
``max_divergence`` of the output pairs differ. GO also needs nothing blocking it (fewer than
``min_pairs`` pairs, an unsure failure-rate rise, a sampled-output distribution that differs, an SLO
that cannot be checked); a blocked gain is INCONCLUSIVE. Below ``min_pairs`` no CI is acted upon.
Exit status for CI pipelines: 0 GO, 1 NO-GO (equivalent and no-gain included), 3 INCONCLUSIVE
(2 stays "user error").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from specgauge.config import MIN_SPEEDUP
from specgauge.errors import UserError
from specgauge.i18n import en
from specgauge.records import RequestRecord, SpecCounts
from specgauge.stats.compare import (
    LATENCY_METRICS, LATENCY_STATS, CompareConfig, GroupComparison, SimulationDelta, compare_records, segments_of,
)
from specgauge.stats.diagnosis import Diagnosis
from specgauge.stats.equivalence import EquivalenceResult, Scorer, check_equivalence
from specgauge.stats.memory import MemoryRow
from specgauge.stats.stalls import NO_HOLD, Held
from specgauge.stats.ttft import TtftSplit

_METRIC_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency"}
_SLO_RE = re.compile(r"^(ttft|tpot|e2e|e2el)_(p50|p95)(?:_ms)?$")
EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}
GAIN, EQUIVALENT, SLOWER, NO_GAIN, UNSETTLED = (
    en("verdict.finding.gain"), en("verdict.finding.equivalent"), en("verdict.finding.slower"),
    en("verdict.finding.no_gain"), en("verdict.finding.unsettled"))
FINDINGS = (GAIN, EQUIVALENT, SLOWER, NO_GAIN, UNSETTLED)


class VerdictError(UserError):
    """A bad --slo / --latency-metric value."""


class Verdict(str, Enum):
    GO = "GO"
    NO_GO = "NO-GO"
    INCONCLUSIVE = "INCONCLUSIVE"


class VerdictCriteria(BaseModel):
    slo_ms: dict[str, float] = Field(default_factory=dict)  #: e.g. {"e2e_p95": 500.0}
    latency_metric: str = "e2e_p95"  #: the latency statistic whose CI can also justify GO
    min_speedup: float = Field(default=MIN_SPEEDUP, gt=0, description="practical margin: the speedup worth turning speculation on for")
    max_failure_increase: float = Field(default=0.005, ge=0, le=1, description="failure-rate rise tolerated (absolute)")
    max_divergence: float = Field(default=0.02, ge=0, le=1, description="temperature-0 mismatch share tolerated")
    max_invalid_increase: float = Field(default=0.0, ge=0, le=1, description="rise (absolute) of the share of structured outputs that break their schema tolerated")
    min_pairs: int = Field(default=10, ge=1)
    alpha: float = Field(default=0.01, gt=0, lt=1, description="significance for the sampled-output tests")


class GroupVerdict(BaseModel):
    group: str
    verdict: Verdict
    reasons: list[str]  #: why this verdict, most important first
    notes: list[str] = Field(default_factory=list)  #: what else to know (met SLOs, rare divergence…)
    more_requests: int | None = None  #: INCONCLUSIVE: about how many more paired requests would settle it
    more_requests_reason: str | None = None
    #: what the speedup CI says against the margin (module docstring): one of FINDINGS, None when not judged
    finding: str | None = None


class VerdictResult(BaseModel):
    overall: GroupVerdict
    segments: dict[str, GroupVerdict] = Field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.overall.verdict.value]


class RunInfo(BaseModel):
    label: str
    path: str
    kind: str  #: "bench" (output dir), "results" (a results.jsonl), "simulate"
    requests: int | None = None
    max_concurrency: int | None = None
    speculative: bool | None = None
    duration_s: float | None = None


class ComparisonResult(BaseModel):
    """What ``specgauge compare`` returns (and ``--json`` prints)."""

    kind: Literal["specgauge.compare"] = "specgauge.compare"
    mode: Literal["bench", "simulate"]
    baseline: RunInfo
    candidate: RunInfo
    config: CompareConfig
    criteria: VerdictCriteria
    overall: GroupComparison | None = None
    segments: dict[str, GroupComparison] = Field(default_factory=dict)
    simulation: list[SimulationDelta] = Field(default_factory=list)
    verdict: VerdictResult
    notes: list[str] = Field(default_factory=list)
    #: device / KV / weight memory of both runs where measured (``stats.memory``); never part of the verdict
    memory: list[MemoryRow] = Field(default_factory=list)
    #: which part failed: the target (outputs changed) or the drafter (acceptance below its outputs') — ``stats.diagnosis``
    diagnosis: Diagnosis | None = None
    #: the candidate's TTFT delta split into queueing and prefill, the step law's drafter prefill beside it (``stats.ttft``)
    ttft: TtftSplit | None = None


# ---------------------------------------------------------------------------- parsing


def metric_key(text: str, flag: str) -> str:
    m = _SLO_RE.match(text.strip())
    if not m:
        raise VerdictError(f"{flag} {text!r}: name a statistic like e2e_p95_ms, ttft_p95_ms, tpot_p50_ms "
                           f"(metrics {', '.join(LATENCY_METRICS)}; statistics {', '.join(LATENCY_STATS)})")
    metric = "e2e" if m.group(1) == "e2el" else m.group(1)
    return f"{metric}_{m.group(2)}"


def parse_slo(text: str | None) -> dict[str, float]:
    """``e2e_p95_ms=500,ttft_p95_ms=200`` → {"e2e_p95": 500.0, "ttft_p95": 200.0}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, val = part.partition("=")
        if not sep:
            raise VerdictError(f"--slo {part.strip()!r}: write NAME=MILLISECONDS, e.g. e2e_p95_ms=500")
        key = metric_key(name, "--slo")
        try:
            v = float(val)
        except ValueError:
            raise VerdictError(f"--slo {part.strip()!r}: {val.strip()!r} is not a number of milliseconds") from None
        if not v > 0:
            raise VerdictError(f"--slo {part.strip()!r}: the limit must be > 0 ms")
        out[key] = v
    return out


# ---------------------------------------------------------------------------- judging


def _words(key: str) -> str:
    metric, stat = key.split("_")
    return f"{_METRIC_WORDS[metric]} {stat}"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}×"


def _needed(n: int, estimate: float | None, low: float | None, high: float | None, threshold: float) -> int | None:
    if estimate is None or low is None or high is None or n <= 0:
        return None
    d, h = abs(estimate - threshold), (high - low) / 2.0
    if d <= 0 or h <= 0:
        return None
    return max(0, math.ceil(n * (h / d) ** 2) - n)


def band(margin: float) -> tuple[float, float]:
    """The equivalence band around 1 for a practical margin m: [1/m, m] (ordered when m < 1)."""
    return min(margin, 1 / margin), max(margin, 1 / margin)


def _speedup_finding(lo: float, hi: float, m: float) -> str:
    b_lo, b_hi = band(m)
    if lo > m:
        return GAIN
    if b_lo <= lo and hi <= b_hi:
        return EQUIVALENT
    if hi < 1.0:
        return SLOWER
    if hi < m:
        return NO_GAIN
    return UNSETTLED


def _latency_threshold(baseline_ms: float, m: float) -> float:
    """The candidate − baseline delta (ms) a latency CI must lie below to count as a gain worth having."""
    return -(1.0 - 1.0 / m) * baseline_ms if m > 1 else 0.0


@dataclass
class _Findings:
    """What each check found, sorted by weight: ``nogo`` hard reasons (NO-GO whatever else holds),
    ``soft`` no gain worth having (NO-GO unless the latency clears the margin), ``block`` what keeps
    the verdict open, ``good`` gains, ``notes`` context."""

    nogo: list[str] = field(default_factory=list)
    soft: list[str] = field(default_factory=list)
    block: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _judge_speedup(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> str | None:
    n, s, m = g.speedup.n, g.speedup, crit.min_speedup
    b_lo, b_hi = band(m)
    if n < crit.min_pairs:
        fx.block.append(en("verdict.min_pairs_paired" if g.paired else "verdict.min_pairs", n=n, need=crit.min_pairs))
    if s.estimate is None:
        fx.block.append(en("verdict.no_estimate", reason=s.reason))
        return None
    if s.low is None or s.high is None:
        return None
    ci = en("verdict.ci", est=_x(s.estimate), lo=_x(s.low), hi=_x(s.high))
    if n < crit.min_pairs:  # a bootstrap over a handful of pairs is no interval to act on
        fx.notes.append(en("verdict.speedup_few", ci=ci))
        return None
    finding = _speedup_finding(s.low, s.high, m)
    if finding == GAIN:
        fx.good.append(en("verdict.gain", m=f"{m:g}", ci=ci))
    elif finding == EQUIVALENT:
        fx.soft.append(en("verdict.equivalent", ci=ci, lo=f"{b_lo:.3f}", hi=f"{b_hi:.3f}"))
    elif finding == SLOWER:
        fx.nogo.append(en("verdict.slower", ci=ci))
    elif finding == NO_GAIN:
        fx.soft.append(en("verdict.no_gain", ci=ci, m=f"{m:g}"))
    else:
        fx.notes.append(en("verdict.unsettled", ci=ci, m=f"{m:g}"))
    return finding


def _judge_latency(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> None:
    lm, m = g.metric(crit.latency_metric), crit.min_speedup
    if lm is None or lm.delta_ms.estimate is None or lm.delta_ms.low is None or lm.delta_ms.high is None:
        return
    d = lm.delta_ms
    txt = en("verdict.latency", metric=_words(lm.key), base=f"{lm.baseline_ms:.1f}", cand=f"{lm.candidate_ms:.1f}",
             d=f"{d.estimate:+.1f}", lo=f"{d.low:+.1f}", hi=f"{d.high:+.1f}")
    limit = _latency_threshold(lm.baseline_ms or 0.0, m)
    if g.speedup.n < crit.min_pairs:
        fx.notes.append(en("verdict.lat_few", txt=txt))
    elif d.high < limit:
        fx.good.append(en("verdict.lat_gain", txt=txt, m=f"{m:g}"))
    elif d.high < 0:
        fx.notes.append(en("verdict.lat_small", txt=txt, m=f"{m:g}", limit=f"{limit:+.1f}"))
    elif d.low > 0:
        fx.notes.append(en("verdict.lat_worse", txt=txt))
    else:
        fx.notes.append(en("verdict.lat_unsettled", txt=txt))


def _judge_slos(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> None:
    for key, limit_ms in sorted(crit.slo_ms.items()):
        sm = g.metric(key)
        if sm is None or sm.candidate_ms is None:
            fx.block.append(en("verdict.slo_unchecked", metric=_words(key), limit=f"{limit_ms:g}",
                               why=sm.delta_ms.reason if sm else "no such statistic"))
        elif sm.candidate_ms > limit_ms:
            miss = {"metric": _words(key), "limit": f"{limit_ms:g}", "cand": f"{sm.candidate_ms:.1f}"}
            fx.nogo.append(en("verdict.slo_miss_base", **miss, base=f"{sm.baseline_ms:.1f}") if sm.baseline_ms is not None
                           else en("verdict.slo_miss", **miss))
        else:
            fx.notes.append(en("verdict.slo_meet", metric=_words(key), limit=f"{limit_ms:g}", cand=f"{sm.candidate_ms:.1f}"))


def _judge_failures(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> None:
    f = g.failure_rate_diff
    if f.estimate is not None and f.estimate > crit.max_failure_increase:
        rates = f"{100 * (g.failure_rate_baseline or 0):.2f} % → {100 * (g.failure_rate_candidate or 0):.2f} %"
        if f.low is not None and f.low > 0:
            fx.nogo.append(en("verdict.fail_more", rates=rates, est=f"{100 * f.estimate:.2f}", lo=f"{100 * f.low:.2f}",
                              hi=f"{100 * (f.high or 0):.2f}"))
        else:
            fx.block.append(en("verdict.fail_more_unsure", rates=rates))
    elif g.candidate_failed:
        fx.notes.append(en("verdict.fail_tolerated", n=g.candidate_failed, b=g.baseline_failed))


def _judge_outputs(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> None:
    """NO-GO when the candidate breaks more structured outputs (Fisher one-sided p < alpha)."""
    o = g.outputs
    if o is None or not o.candidate_n:
        return
    rates = {"kb": o.baseline_k, "nb": o.baseline_n, "kc": o.candidate_k, "nc": o.candidate_n,
             "p": "n/a" if o.p_value is None else f"{o.p_value:.2g}"}
    if o.worse(crit.alpha, crit.max_invalid_increase):
        first = o.examples[0] if o.examples else ""
        fx.nogo.append(en("verdict.outputs_worse", **rates, alpha=f"{crit.alpha:g}", first=first))
    elif o.candidate_k > o.baseline_k and (o.baseline_n and o.candidate_k / o.candidate_n > o.baseline_k / o.baseline_n):
        fx.notes.append(en("verdict.outputs_more", **rates))
    else:
        fx.notes.append(en("verdict.outputs_same", **rates))


def _judge_stalls(g: GroupComparison, crit: VerdictCriteria, fx: _Findings) -> None:
    """NO-GO when more of the candidate's requests stall (Fisher one-sided p < alpha)."""
    st = g.stalls
    if st is None or not st.rate.candidate_n:
        return
    o = st.rate
    rates = {"kb": o.baseline_k, "nb": o.baseline_n, "kc": o.candidate_k, "nc": o.candidate_n,
             "p": "n/a" if o.p_value is None else f"{o.p_value:.2g}", "thr": f"{st.threshold_ms:.0f}"}
    if o.worse(crit.alpha):
        fx.nogo.append(en("verdict.stalls_worse", **rates, alpha=f"{crit.alpha:g}", first=o.examples[0] if o.examples else ""))
    elif o.candidate_k or o.baseline_k:
        fx.notes.append(en("verdict.stalls_note", **rates))


def judge(g: GroupComparison, crit: VerdictCriteria) -> GroupVerdict:
    fx = _Findings()
    finding = _judge_speedup(g, crit, fx)
    _judge_latency(g, crit, fx)
    _judge_slos(g, crit, fx)
    _judge_failures(g, crit, fx)
    _judge_outputs(g, crit, fx)
    _judge_stalls(g, crit, fx)
    _equivalence(g.equivalence, crit, fx.nogo, fx.block, fx.notes)
    if fx.nogo:
        verdict, reasons = Verdict.NO_GO, fx.nogo + fx.soft
    elif fx.good and not fx.block:
        verdict, reasons = Verdict.GO, fx.good
    elif fx.soft and not fx.good:
        verdict, reasons = Verdict.NO_GO, fx.soft
    else:
        verdict = Verdict.INCONCLUSIVE
        reasons = fx.block + ([] if fx.good else [en("verdict.neither", m=f"{crit.min_speedup:g}")])
    gv = GroupVerdict(group=g.group, verdict=verdict, reasons=reasons, notes=fx.notes, finding=finding)
    if verdict is Verdict.INCONCLUSIVE:
        _more(gv, g, crit)
    return gv


def _equivalence(eq: EquivalenceResult | None, crit: VerdictCriteria, nogo: list[str], block: list[str], notes: list[str]) -> None:
    if eq is None:
        return
    gr = eq.greedy
    if gr.pairs and gr.match_rate is not None:
        k = gr.pairs - gr.matches
        if k:
            first = gr.mismatches[0]
            where = (en("verdict.where_token", id=first.id, pos=first.token_position) if first.token_position is not None
                     else en("verdict.where_char", id=first.id, pos=first.char_position))
            msg = en("verdict.diverge", k=k, n=gr.pairs, pct=f"{100 * k / gr.pairs:.1f}", where=where)
            if k / gr.pairs > crit.max_divergence:
                nogo.append(en("verdict.changed", msg=msg, tol=f"{100 * crit.max_divergence:g}"))
            else:
                notes.append(en("verdict.rare", msg=msg, tol=f"{100 * crit.max_divergence:g}"))
        else:
            notes.append(en("verdict.all_match", n=gr.pairs, by=gr.compared_by))
    sp = eq.sampled
    for name, t in (("output-length distribution (KS)", sp.length_ks), (f"{sp.unigram_unit} frequencies (TVD)", sp.unigram_tvd)):
        if t.p_value is not None and t.p_value < crit.alpha:
            block.append(en("verdict.sampled_differ", name=name, stat=f"{t.statistic:.3f}", p=f"{t.p_value:.2g}", alpha=f"{crit.alpha:g}"))
    if eq.scorer is not None and eq.scorer.p_value is not None and eq.scorer.p_value < crit.alpha and (eq.scorer.statistic or 0) < 0:
        block.append(en("verdict.scorer_lower", name=eq.scorer_name, stat=f"{eq.scorer.statistic:+.3g}", p=f"{eq.scorer.p_value:.2g}"))


def _more(gv: GroupVerdict, g: GroupComparison, crit: VerdictCriteria) -> None:
    n = g.speedup.n
    if n < crit.min_pairs:
        gv.more_requests = crit.min_pairs - n
        gv.more_requests_reason = en("verdict.more_min", n=crit.min_pairs)
        return
    s = g.speedup
    # the speedup settles either way (above the margin: GO; below: NO-GO); the latency statistic only
    # counts when its estimate lies on the gain side of its threshold (more requests could make it a GO)
    cands = [_needed(n, s.estimate, s.low, s.high, crit.min_speedup)]
    m = g.metric(crit.latency_metric)
    d = m.delta_ms if m is not None else None
    if m is not None and d is not None and m.baseline_ms is not None and d.estimate is not None:
        limit = _latency_threshold(m.baseline_ms, crit.min_speedup)
        if d.estimate < limit:
            cands.append(_needed(d.n, d.estimate, d.low, d.high, limit))
    found = [c for c in cands if c]
    if not found:
        gv.more_requests_reason = en("verdict.more_on_margin", m=f"{crit.min_speedup:g}")
        return
    gv.more_requests = min(found)
    half = None if s.low is None or s.high is None else (s.high - s.low) / 2
    more = {"more": gv.more_requests, "total": n + gv.more_requests}
    gv.more_requests_reason = (en("verdict.more_n_res", **more, n=n, pct=f"{100 * half:.1f}") if half is not None
                               else en("verdict.more_n", **more))


# ---------------------------------------------------------------------------- the whole decision


def decide(
    baseline: Sequence[RequestRecord],
    candidate: Sequence[RequestRecord],
    baseline_info: RunInfo,
    candidate_info: RunInfo,
    cfg: CompareConfig | None = None,
    criteria: VerdictCriteria | None = None,
    temperatures: Mapping[str, float | None] | None = None,
    temperature: float | None = None,
    temperature_source: str = "",
    scorer: tuple[str, Scorer] | None = None,
    candidate_counters: SpecCounts | None = None,
    held: tuple[Held, Held] = (NO_HOLD, NO_HOLD),
) -> ComparisonResult:
    """Compare two bench runs, check output equivalence, and judge: overall and per segment.
    ``candidate_counters``: the candidate run's /metrics diff, its acceptance when the records have none;
    ``held``: when each run's load generator was held up (its gaps then are not the server's stalls)."""
    cfg = cfg or CompareConfig()
    crit = criteria or VerdictCriteria()
    metric_key(crit.latency_metric, "--latency-metric")
    overall, per = compare_records(baseline, candidate, cfg, (baseline_info.duration_s, candidate_info.duration_s),
                                   candidate_counters, held)

    def eq(b: Sequence[RequestRecord], c: Sequence[RequestRecord]) -> EquivalenceResult:
        cm = {r.id: r for r in c}
        pairs = [(r, cm[r.id]) for r in b if r.ok and r.id in cm and cm[r.id].ok]
        return check_equivalence(pairs, temperatures, temperature, temperature_source, scorer, cfg.resamples, cfg.seed)

    overall.equivalence = eq(baseline, candidate)
    segs = segments_of(baseline, candidate)
    for name, g in per.items():
        g.equivalence = eq(*segs[name])
    ov = judge(overall, crit)
    seg_v = {name: judge(g, crit) for name, g in per.items()}
    bad = [name for name, v in seg_v.items() if v.verdict is Verdict.NO_GO]
    if bad and ov.verdict is not Verdict.NO_GO:
        ov.notes.insert(0, en("verdict.segments_nogo", names=", ".join(bad)))
    notes = list(overall.notes)
    if (overall.equivalence.unknown_temperature and temperature is None):
        notes.append(en("verdict.unknown_temp", n=overall.equivalence.unknown_temperature))
    return ComparisonResult(
        mode="bench", baseline=baseline_info, candidate=candidate_info, config=cfg, criteria=crit,
        overall=overall, segments=per, verdict=VerdictResult(overall=ov, segments=seg_v), notes=notes,
    )


def decide_simulations(rows: list[SimulationDelta], baseline_info: RunInfo, candidate_info: RunInfo,
                       cfg: CompareConfig | None = None, criteria: VerdictCriteria | None = None) -> ComparisonResult:
    """Simulate results predict acceptance; they measure no latency: always INCONCLUSIVE."""
    why = en("verdict.sim_why")
    v = GroupVerdict(group="overall", verdict=Verdict.INCONCLUSIVE, reasons=[why],
                     more_requests_reason=en("verdict.sim_more"))
    return ComparisonResult(
        mode="simulate", baseline=baseline_info, candidate=candidate_info, config=cfg or CompareConfig(),
        criteria=criteria or VerdictCriteria(), simulation=rows, verdict=VerdictResult(overall=v),
        notes=[] if rows else [en("verdict.sim_none")],
    )
