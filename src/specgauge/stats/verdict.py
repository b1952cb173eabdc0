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
higher by more than ``max_failure_increase`` with a CI excluding 0, or at temperature 0 more than
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
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from specgauge.errors import UserError
from specgauge.records import RequestRecord, SpecCounts
from specgauge.stats.compare import (
    LATENCY_METRICS, LATENCY_STATS, CompareConfig, GroupComparison, SimulationDelta, compare_records, segments_of,
)
from specgauge.stats.equivalence import EquivalenceResult, Scorer, check_equivalence

_METRIC_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency"}
_SLO_RE = re.compile(r"^(ttft|tpot|e2e|e2el)_(p50|p95)(?:_ms)?$")
EXIT_CODES = {"GO": 0, "NO-GO": 1, "INCONCLUSIVE": 3}
GAIN, EQUIVALENT, SLOWER, NO_GAIN, UNSETTLED = (
    "gain beyond the margin", "equivalent within the margin", "slower", "no gain worth turning on", "not settled")
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
    min_speedup: float = Field(default=1.05, gt=0, description="practical margin: the speedup worth turning speculation on for")
    max_failure_increase: float = Field(default=0.005, ge=0, description="failure-rate rise tolerated (absolute)")
    max_divergence: float = Field(default=0.02, ge=0, le=1, description="temperature-0 mismatch share tolerated")
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


def judge(g: GroupComparison, crit: VerdictCriteria) -> GroupVerdict:
    nogo: list[str] = []  # hard reasons: NO-GO whatever else holds
    soft: list[str] = []  # no gain worth having: NO-GO unless the latency clears the margin
    block: list[str] = []
    good: list[str] = []
    notes: list[str] = []
    n = g.speedup.n
    conf = "95 % CI"
    s = g.speedup
    m = crit.min_speedup
    b_lo, b_hi = band(m)
    finding: str | None = None
    if n < crit.min_pairs:
        block.append(f"only {n} {'paired ' if g.paired else ''}requests; at least {crit.min_pairs} are needed to judge")
    if s.estimate is None:
        block.append(f"no speedup estimate: {s.reason}")
    elif s.low is not None and s.high is not None:
        ci = f"{_x(s.estimate)} ({conf} {_x(s.low)}–{_x(s.high)})"
        if n < crit.min_pairs:  # a bootstrap over a handful of pairs is no interval to act on
            notes.append(f"speedup {ci}: too few pairs to act on")
        else:
            finding = _speedup_finding(s.low, s.high, m)
            if finding == GAIN:
                good.append(f"the candidate is faster beyond the {m:g}× margin: output-token rate {ci}, the whole interval above {m:g}×")
            elif finding == EQUIVALENT:
                soft.append(f"equivalent within the margin: output-token rate {ci} lies inside the equivalence band "
                            f"{b_lo:.3f}×–{b_hi:.3f}× — nothing worth turning on")
            elif finding == SLOWER:
                nogo.append(f"the candidate is slower: output-token rate {ci}, the whole interval below 1×")
            elif finding == NO_GAIN:
                soft.append(f"no gain worth turning on: output-token rate {ci}, the whole interval below the {m:g}× margin")
            else:
                notes.append(f"speedup {ci} includes the {m:g}× margin: not settled")
    lm = g.metric(crit.latency_metric)
    if lm is not None and lm.delta_ms.estimate is not None and lm.delta_ms.low is not None and lm.delta_ms.high is not None:
        d = lm.delta_ms
        txt = f"{_words(lm.key)} {lm.baseline_ms:.1f} → {lm.candidate_ms:.1f} ms (Δ {d.estimate:+.1f} ms, {conf} {d.low:+.1f} to {d.high:+.1f})"
        limit = _latency_threshold(lm.baseline_ms or 0.0, m)
        if n < crit.min_pairs:
            notes.append(f"{txt}: too few pairs to act on")
        elif d.high < limit:
            good.append(f"lower {txt}: the whole interval favours the candidate by more than the {m:g}× margin")
        elif d.high < 0:
            notes.append(f"lower {txt}: favours the candidate, but not by the {m:g}× margin ({limit:+.1f} ms)")
        elif d.low > 0:
            notes.append(f"higher {txt}: the whole interval favours the baseline")
        else:
            notes.append(f"{txt}: not settled")
    for key, limit_ms in sorted(crit.slo_ms.items()):
        sm = g.metric(key)
        if sm is None or sm.candidate_ms is None:
            block.append(f"the SLO {_words(key)} ≤ {limit_ms:g} ms cannot be checked: {sm.delta_ms.reason if sm else 'no such statistic'}")
        elif sm.candidate_ms > limit_ms:
            base = f" (the baseline measured {sm.baseline_ms:.1f} ms)" if sm.baseline_ms is not None else ""
            nogo.append(f"the candidate misses the SLO {_words(key)} ≤ {limit_ms:g} ms: it measured {sm.candidate_ms:.1f} ms{base}")
        else:
            notes.append(f"meets the SLO {_words(key)} ≤ {limit_ms:g} ms ({sm.candidate_ms:.1f} ms)")
    f = g.failure_rate_diff
    if f.estimate is not None and f.estimate > crit.max_failure_increase:
        rates = f"{100 * (g.failure_rate_baseline or 0):.2f} % → {100 * (g.failure_rate_candidate or 0):.2f} %"
        if f.low is not None and f.low > 0:
            nogo.append(f"more requests fail: {rates} (+{100 * f.estimate:.2f} points, {conf} +{100 * f.low:.2f} to +{100 * (f.high or 0):.2f})")
        else:
            block.append(f"more requests fail ({rates}) though the interval still includes no change")
    elif g.candidate_failed:
        notes.append(f"{g.candidate_failed} candidate request(s) failed ({g.baseline_failed} in the baseline), within tolerance")
    _equivalence(g.equivalence, crit, nogo, block, notes)
    if nogo:
        verdict, reasons = Verdict.NO_GO, nogo + soft
    elif good and not block:
        verdict, reasons = Verdict.GO, good
    elif soft and not good:
        verdict, reasons = Verdict.NO_GO, soft
    else:
        verdict = Verdict.INCONCLUSIVE
        reasons = block + ([] if good else [f"neither the speedup CI nor the latency CI lies on one side of the {m:g}× margin"])
    gv = GroupVerdict(group=g.group, verdict=verdict, reasons=reasons, notes=notes, finding=finding)
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
            where = f"request {first.id} at {'token ' + str(first.token_position) if first.token_position is not None else 'character ' + str(first.char_position)}"
            msg = f"{k} of {gr.pairs} temperature-0 outputs differ from the baseline ({100 * k / gr.pairs:.1f} %; first: {where})"
            if k / gr.pairs > crit.max_divergence:
                nogo.append(f"outputs changed: {msg}, above the {100 * crit.max_divergence:g} % tolerance")
            else:
                notes.append(f"rare divergence: {msg}, within the {100 * crit.max_divergence:g} % tolerance")
        else:
            notes.append(f"all {gr.pairs} temperature-0 outputs match the baseline exactly ({gr.compared_by})")
    sp = eq.sampled
    for name, t in (("output-length distribution (KS)", sp.length_ks), (f"{sp.unigram_unit} frequencies (TVD)", sp.unigram_tvd)):
        if t.p_value is not None and t.p_value < crit.alpha:
            block.append(f"sampled outputs differ: {name} statistic {t.statistic:.3f}, p = {t.p_value:.2g} < {crit.alpha:g}")
    if eq.scorer is not None and eq.scorer.p_value is not None and eq.scorer.p_value < crit.alpha and (eq.scorer.statistic or 0) < 0:
        block.append(f"the scorer {eq.scorer_name} rates the candidate lower: mean {eq.scorer.statistic:+.3g}, p = {eq.scorer.p_value:.2g}")


def _more(gv: GroupVerdict, g: GroupComparison, crit: VerdictCriteria) -> None:
    n = g.speedup.n
    if n < crit.min_pairs:
        gv.more_requests = crit.min_pairs - n
        gv.more_requests_reason = f"at least {crit.min_pairs} paired requests are needed before judging"
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
        gv.more_requests_reason = (f"the speedup estimate sits on the {crit.min_speedup:g}× margin: more requests of the "
                                   "same kind will not settle it; decide whether a gain that size is worth it")
        return
    gv.more_requests = min(found)
    half = None if s.low is None or s.high is None else (s.high - s.low) / 2
    gv.more_requests_reason = (
        f"about {gv.more_requests} more paired requests (total ≈ {n + gv.more_requests}), assuming the CI half-width "
        f"shrinks as 1/√n" + (f"; at n = {n} it resolves speedups beyond ±{100 * half:.1f} %" if half is not None else "")
    )


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
) -> ComparisonResult:
    """Compare two bench runs, check output equivalence, and judge: overall and per segment.
    ``candidate_counters``: the candidate run's /metrics diff, its acceptance when the records have none."""
    cfg = cfg or CompareConfig()
    crit = criteria or VerdictCriteria()
    metric_key(crit.latency_metric, "--latency-metric")
    overall, per = compare_records(baseline, candidate, cfg, (baseline_info.duration_s, candidate_info.duration_s),
                                   candidate_counters)

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
        ov.notes.insert(0, f"segment(s) {', '.join(bad)} are NO-GO on their own: consider enabling speculation per segment")
    notes = list(overall.notes)
    if (overall.equivalence.unknown_temperature and temperature is None):
        notes.append(f"{overall.equivalence.unknown_temperature} pair(s) had no known temperature and were checked as sampled "
                     "(servers default to 1); pass --temperature 0 if the run was greedy")
    return ComparisonResult(
        mode="bench", baseline=baseline_info, candidate=candidate_info, config=cfg, criteria=crit,
        overall=overall, segments=per, verdict=VerdictResult(overall=ov, segments=seg_v), notes=notes,
    )


def decide_simulations(rows: list[SimulationDelta], baseline_info: RunInfo, candidate_info: RunInfo,
                       cfg: CompareConfig | None = None, criteria: VerdictCriteria | None = None) -> ComparisonResult:
    """Simulate results predict acceptance; they measure no latency: always INCONCLUSIVE."""
    why = ("simulation results compare acceptance offline; they measure no latency, failures or outputs — "
           "bench both configurations to decide")
    v = GroupVerdict(group="overall", verdict=Verdict.INCONCLUSIVE, reasons=[why],
                     more_requests_reason="measured runs are needed, not more simulated requests")
    return ComparisonResult(
        mode="simulate", baseline=baseline_info, candidate=candidate_info, config=cfg or CompareConfig(),
        criteria=criteria or VerdictCriteria(), simulation=rows, verdict=VerdictResult(overall=v),
        notes=[] if rows else ["the two simulate results share no (method, k)"],
    )
