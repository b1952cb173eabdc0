"""Paired A/B comparison of two benchmark runs with bootstrap confidence intervals.

Knows nothing about files or printing: record lists in, pydantic data out.

Pairing: requests are matched by id; only pairs where *both* sides succeeded enter the latency and
speedup figures (the unpaired and failed counts are reported beside them). When the runs share no
id (different workloads) the two samples are resampled independently instead, and the result says so.

Figures, candidate against baseline, per segment and overall:
- ``speedup``: output tokens per second of request time, candidate over baseline, as a ratio of sums
      speedup = (Σ tok_c / Σ e2e_c) / (Σ tok_b / Σ e2e_b)
  over the pairs. It is resampleable (a run-level throughput needs the run's duration, which a
  resample has not); the measured run-level output-throughput ratio is reported beside it when
  both durations are known.
- TTFT / TPOT / E2E at p50 and p95: candidate − baseline in ms (negative = candidate faster).
- failure rate: candidate − baseline, over the requests each run sent (paired by id where possible).
- structured outputs: requests whose tool calls / JSON broke their request's schema, both sides,
  with Fisher's exact test (``stats.outputs``); stalled requests likewise, against one threshold from
  the baseline's TPOT (``stats.stalls``).
- the candidate's acceptance (rate, MAL, per position) from its per-request speculative counts, or,
  when the server gave none, from the run's /metrics counter diff (overall only; ``origin`` says which).
CIs: percentile bootstrap, ``resamples`` ≥ 2000 index sets drawn with numpy's seeded generator,
the same index set applied to both sides of a pair (paired bootstrap), vectorised in blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from specgauge.i18n import en
from specgauge.records import RequestRecord, SpecCounts
from specgauge.stats.equivalence import EquivalenceResult
from specgauge.stats.latency import tpot
from specgauge.stats.outputs import compare_outputs
from specgauge.stats.rates import RateComparison
from specgauge.stats.stalls import NO_HOLD, Held, StallComparison, StallCriteria, compare_stalls, reference_tpot

LATENCY_METRICS = ("ttft", "tpot", "e2e")
LATENCY_STATS = {"p50": 50.0, "p95": 95.0}
_BLOCK_ELEMS = 2_000_000  # resample-matrix elements per block (bounds memory for big runs)


class CompareConfig(BaseModel):
    resamples: int = Field(default=2000, ge=2000, description="bootstrap resamples (>= 2000)")
    seed: int = 0
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    stalls: StallCriteria = Field(default_factory=StallCriteria)  #: what counts as a stall (``stats.stalls``)


class CI(BaseModel):
    """A point estimate with its bootstrap confidence interval; None with a reason when undefined."""

    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    n: int = 0
    reason: str | None = None

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high - self.low


class MetricDelta(BaseModel):
    """One latency statistic (e.g. E2E p95) in both runs and the candidate − baseline difference."""

    metric: Literal["ttft", "tpot", "e2e"]
    stat: Literal["p50", "p95"]
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    delta_ms: CI
    ratio: float | None = None  #: candidate / baseline

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"


class AcceptanceStats(BaseModel):
    """The candidate's draft acceptance (vLLM's definitions): the sum of its successful requests'
    per-request counts when the server gave them, else the run's ``/metrics`` counter diff (vLLM
    without ``--per-request-spec-decode-metrics``, the common case). ``origin`` says which."""

    available: bool
    reason: str | None = None
    source: str | None = None  #: the server's source label, e.g. "vllm:per-request", "vllm:/metrics"
    origin: Literal["per-request", "counters"] | None = None
    requests_with_counts: int = 0
    drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position: list[float] = Field(default_factory=list)

    @classmethod
    def of(cls, records: Sequence[RequestRecord], counters: SpecCounts | None = None,
           counters_reason: str | None = None) -> AcceptanceStats:
        """Per-request counts first; else ``counters`` (the run's /metrics diff, when it drafted)."""
        ok = [r for r in records if r.ok]
        specs = [r.spec for r in ok if r.spec is not None]
        if specs:
            return cls.from_counts(SpecCounts.total(specs), len(specs))  # type: ignore[arg-type]
        if counters is not None and counters.draft_tokens:
            return cls.from_counts(counters, 0, origin="counters")
        if not ok:
            return cls(available=False, reason=en("stats.r.no_success"))
        if counters is not None:
            why = en("acc.r.none_zero")
        elif counters_reason:
            why = en("acc.r.none_because", why=counters_reason)
        else:
            why = en("acc.r.none")
        return cls(available=False, reason=why)

    @classmethod
    def from_counts(cls, s: SpecCounts, n: int, origin: Literal["per-request", "counters"] = "per-request") -> AcceptanceStats:
        def fin(v: float) -> float | None:
            return None if math.isnan(v) else v

        return cls(
            available=True, source=s.source or None, origin=origin, requests_with_counts=n, drafts=s.drafts,
            draft_tokens=s.draft_tokens, accepted_tokens=s.accepted_tokens, acceptance_rate=fin(s.acceptance_rate),
            mean_acceptance_length=fin(s.mean_acceptance_length), per_position=s.per_position_rate,
        )

    def basis(self) -> str:
        """Where the figure came from, in words (English; shown with ``translate``)."""
        if not self.available:
            return "n/a"
        if self.origin == "counters":
            return en("acc.basis.counters_src", src=self.source) if self.source else en("acc.basis.counters")
        n = self.requests_with_counts
        return en("acc.basis.requests_src", n=n, src=self.source) if self.source else en("acc.basis.requests", n=n)


class GroupComparison(BaseModel):
    """The comparison for one group of requests: one segment, or all of them ("overall")."""

    group: str
    paired: bool  #: True: paired bootstrap over request pairs; False: independent resampling
    pairs: int  #: ids present and successful in both runs
    baseline_requests: int
    candidate_requests: int
    baseline_failed: int
    candidate_failed: int
    baseline_only: int  #: ids only the baseline has
    candidate_only: int  #: ids only the candidate has
    failed_in_a_pair: int  #: ids both runs have where at least one side failed
    speedup: CI
    measured_throughput_ratio: float | None = None  #: run-level output throughput, candidate / baseline
    latency: list[MetricDelta]
    failure_rate_baseline: float | None = None
    failure_rate_candidate: float | None = None
    failure_rate_diff: CI
    acceptance: AcceptanceStats
    equivalence: EquivalenceResult | None = None  #: filled in by ``verdict.decide``
    #: requests whose tool calls / JSON broke their request's schema, both sides (``stats.outputs``)
    outputs: RateComparison | None = None
    #: requests with a gap far above the baseline's TPOT, both sides (``stats.stalls``)
    stalls: StallComparison | None = None
    notes: list[str] = Field(default_factory=list)

    def metric(self, key: str) -> MetricDelta | None:
        return next((m for m in self.latency if m.key == key), None)


# ---------------------------------------------------------------------------- bootstrap


def bootstrap(
    stat: Callable[..., np.ndarray], sizes: Sequence[int], cfg: CompareConfig,
) -> tuple[float, float, float]:
    """Point estimate and percentile CI of ``stat``.

    ``stat(*idx)`` takes one int index matrix per sample, shape (b, n_i), and returns shape (b,).
    One size: a paired bootstrap (one index set for both sides of each pair). Several sizes: each
    sample resampled on its own. NaN resample values (e.g. a zero denominator) are dropped.
    """
    rng = np.random.default_rng(cfg.seed)
    point = float(stat(*[np.arange(n)[None, :] for n in sizes])[0])
    block = max(1, _BLOCK_ELEMS // max(1, sum(sizes)))
    vals: list[np.ndarray] = []
    left = cfg.resamples
    while left > 0:
        b = min(block, left)
        vals.append(stat(*[rng.integers(0, n, size=(b, n)) for n in sizes]))
        left -= b
    v = np.concatenate(vals)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return point, math.nan, math.nan
    a = (1.0 - cfg.confidence) / 2.0
    lo, hi = np.percentile(v, [100 * a, 100 * (1 - a)])
    return point, float(lo), float(hi)


def _ci(point: float, lo: float, hi: float, n: int) -> CI:
    if not math.isfinite(point):
        return CI(n=n, reason=en("stats.r.zero_denominator"))
    return CI(estimate=point, low=lo if math.isfinite(lo) else None, high=hi if math.isfinite(hi) else None, n=n)


def _ratio_of_sums(num_c: np.ndarray, den_c: np.ndarray, num_b: np.ndarray, den_b: np.ndarray) -> Callable[..., np.ndarray]:
    def stat(*idx: np.ndarray) -> np.ndarray:
        ib, ic = (idx[0], idx[0]) if len(idx) == 1 else idx
        with np.errstate(divide="ignore", invalid="ignore"):
            rc = num_c[ic].sum(1) / den_c[ic].sum(1)
            rb = num_b[ib].sum(1) / den_b[ib].sum(1)
            return rc / rb

    return stat


def _pct_delta(b: np.ndarray, c: np.ndarray, q: float) -> Callable[..., np.ndarray]:
    def stat(*idx: np.ndarray) -> np.ndarray:
        ib, ic = (idx[0], idx[0]) if len(idx) == 1 else idx
        return np.percentile(c[ic], q, axis=1) - np.percentile(b[ib], q, axis=1)

    return stat


def _mean_delta(b: np.ndarray, c: np.ndarray) -> Callable[..., np.ndarray]:
    def stat(*idx: np.ndarray) -> np.ndarray:
        ib, ic = (idx[0], idx[0]) if len(idx) == 1 else idx
        return c[ic].mean(1) - b[ib].mean(1)

    return stat


# ---------------------------------------------------------------------------- per-request values


def _value(r: RequestRecord, metric: str) -> float | None:
    if metric == "ttft":
        return r.ttft_s
    if metric == "e2e":
        return r.e2e_s
    return tpot(r)


def _pair_arrays(pairs: Sequence[tuple[RequestRecord, RequestRecord]], metric: str) -> tuple[np.ndarray, np.ndarray]:
    b, c = [], []
    for rb, rc in pairs:
        vb, vc = _value(rb, metric), _value(rc, metric)
        if vb is not None and vc is not None:
            b.append(vb * 1000.0)
            c.append(vc * 1000.0)
    return np.asarray(b, dtype=float), np.asarray(c, dtype=float)


def _side_array(recs: Sequence[RequestRecord], metric: str) -> np.ndarray:
    return np.asarray([v * 1000.0 for r in recs if r.ok and (v := _value(r, metric)) is not None], dtype=float)


def _throughput_arrays(recs: Sequence[RequestRecord]) -> tuple[np.ndarray, np.ndarray]:
    tok = [float(r.output_tokens) for r in recs if r.ok and r.output_tokens and r.e2e_s]
    e2e = [float(r.e2e_s) for r in recs if r.ok and r.output_tokens and r.e2e_s]  # type: ignore[misc]
    return np.asarray(tok), np.asarray(e2e)


# ---------------------------------------------------------------------------- the comparison


Pairs = list[tuple[RequestRecord, RequestRecord]]


def _speedup(pairs: Pairs | None, baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord],
             cfg: CompareConfig) -> CI:
    """The throughput ratio's CI: over pairs where there are any, else each side resampled alone."""
    if pairs is not None:
        ok = [(b, c) for b, c in pairs if b.output_tokens and c.output_tokens and b.e2e_s and c.e2e_s]
        tb = np.asarray([float(b.output_tokens) for b, _ in ok])  # type: ignore[arg-type]
        eb = np.asarray([float(b.e2e_s) for b, _ in ok])  # type: ignore[arg-type]
        tc = np.asarray([float(c.output_tokens) for _, c in ok])  # type: ignore[arg-type]
        ec = np.asarray([float(c.e2e_s) for _, c in ok])  # type: ignore[arg-type]
        sizes: list[int] = [len(ok)]
    else:
        tb, eb = _throughput_arrays(baseline)
        tc, ec = _throughput_arrays(candidate)
        sizes = [len(tb), len(tc)]
    if min(sizes, default=0) == 0:
        return CI(reason=en("stats.r.no_pair_tokens"))
    return _ci(*bootstrap(_ratio_of_sums(tc, ec, tb, eb), sizes, cfg), n=min(sizes))


def _latency_deltas(pairs: Pairs | None, baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord],
                    cfg: CompareConfig) -> list[MetricDelta]:
    deltas: list[MetricDelta] = []
    for metric in LATENCY_METRICS:
        if pairs is not None:
            b, c = _pair_arrays(pairs, metric)
            msizes = [b.size]
        else:
            b, c = _side_array(baseline, metric), _side_array(candidate, metric)
            msizes = [b.size, c.size]
        for stat, q in LATENCY_STATS.items():
            if min(msizes) == 0:
                why = "no request had two output tokens" if metric == "tpot" else "no successful request on one side"
                deltas.append(MetricDelta(metric=metric, stat=stat, delta_ms=CI(reason=why)))  # type: ignore[arg-type]
                continue
            pb, pc = float(np.percentile(b, q)), float(np.percentile(c, q))
            d = _ci(*bootstrap(_pct_delta(b, c, q), msizes, cfg), n=min(msizes))
            deltas.append(MetricDelta(metric=metric, stat=stat, baseline_ms=pb, candidate_ms=pc, delta_ms=d,  # type: ignore[arg-type]
                                      ratio=pc / pb if pb > 0 else None))
    return deltas


def _failure_diff(common: list[str], bmap: dict[str, RequestRecord], cmap: dict[str, RequestRecord],
                  baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord], cfg: CompareConfig) -> CI:
    """The failure rate's difference over requests sent, paired by id where possible."""
    if common:
        fb = np.asarray([0.0 if bmap[i].ok else 1.0 for i in common])
        fc = np.asarray([0.0 if cmap[i].ok else 1.0 for i in common])
        fsizes = [len(common)]
    else:
        fb = np.asarray([0.0 if r.ok else 1.0 for r in baseline])
        fc = np.asarray([0.0 if r.ok else 1.0 for r in candidate])
        fsizes = [len(fb), len(fc)]
    if min(fsizes, default=0) == 0:
        return CI(reason=en("stats.r.empty_run"))
    return _ci(*bootstrap(_mean_delta(fb, fc), fsizes, cfg), n=min(fsizes))




def compare_group(
    group: str,
    baseline: Sequence[RequestRecord],
    candidate: Sequence[RequestRecord],
    cfg: CompareConfig,
    durations: tuple[float | None, float | None] = (None, None),
    candidate_counters: SpecCounts | None = None,
    stall_ref: tuple[float, float | None] | None = None,
    held: tuple[Held, Held] = (NO_HOLD, NO_HOLD),
) -> GroupComparison:
    """Compare one group. ``durations`` (baseline, candidate) give the run-level throughput ratio;
    ``candidate_counters`` (the candidate run's /metrics diff) give its acceptance when its records
    carry no per-request counts; ``stall_ref``: (stall threshold, reference TPOT) in seconds, the
    baseline run's (default: this group's baseline); ``held``: when each run's load generator was held up."""
    bmap = {r.id: r for r in baseline}
    cmap = {r.id: r for r in candidate}
    common = [i for i in bmap if i in cmap]
    pairs = [(bmap[i], cmap[i]) for i in common if bmap[i].ok and cmap[i].ok]
    paired = bool(pairs)
    notes: list[str] = []
    if not common and baseline and candidate:
        notes.append(en("stats.n.no_shared_ids"))
    elif common and not pairs:
        notes.append(en("stats.n.no_both_ok"))

    speedup = _speedup(pairs if paired else None, baseline, candidate, cfg)
    deltas = _latency_deltas(pairs if paired else None, baseline, candidate, cfg)
    fdiff = _failure_diff(common, bmap, cmap, baseline, candidate, cfg)

    rb = _measured_ratio(baseline, candidate, durations)
    nb_fail = sum(not r.ok for r in baseline)
    nc_fail = sum(not r.ok for r in candidate)
    return GroupComparison(
        group=group, paired=paired, pairs=len(pairs),
        baseline_requests=len(baseline), candidate_requests=len(candidate),
        baseline_failed=nb_fail, candidate_failed=nc_fail,
        baseline_only=sum(i not in cmap for i in bmap), candidate_only=sum(i not in bmap for i in cmap),
        failed_in_a_pair=len(common) - len(pairs),
        speedup=speedup, measured_throughput_ratio=rb, latency=deltas,
        failure_rate_baseline=nb_fail / len(baseline) if baseline else None,
        failure_rate_candidate=nc_fail / len(candidate) if candidate else None,
        failure_rate_diff=fdiff, acceptance=AcceptanceStats.of(candidate, candidate_counters), notes=notes,
        outputs=compare_outputs(baseline, candidate),
        stalls=compare_stalls(baseline, candidate, *(stall_ref or _stall_ref(baseline, cfg)), held),
    )


def _stall_ref(baseline: Sequence[RequestRecord], cfg: CompareConfig) -> tuple[float, float | None]:
    ref = reference_tpot(baseline)
    return cfg.stalls.threshold_s(ref), ref


def _measured_ratio(
    baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord], durations: tuple[float | None, float | None]
) -> float | None:
    db, dc = durations
    if not db or not dc:
        return None
    tb = sum(r.output_tokens or 0 for r in baseline if r.ok) / db
    tc = sum(r.output_tokens or 0 for r in candidate if r.ok) / dc
    return tc / tb if tb > 0 else None


def segments_of(baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord]) -> dict[str, tuple[list[RequestRecord], list[RequestRecord]]]:
    """Records grouped by segment (the baseline's segment label wins for a paired id)."""
    seg_of = {r.id: r.segment for r in candidate}
    seg_of.update({r.id: r.segment for r in baseline})
    out: dict[str, tuple[list[RequestRecord], list[RequestRecord]]] = {}
    for r in baseline:
        out.setdefault(seg_of[r.id], ([], []))[0].append(r)
    for r in candidate:
        out.setdefault(seg_of[r.id], ([], []))[1].append(r)
    return dict(sorted(out.items()))


def compare_records(
    baseline: Sequence[RequestRecord],
    candidate: Sequence[RequestRecord],
    cfg: CompareConfig | None = None,
    durations: tuple[float | None, float | None] = (None, None),
    candidate_counters: SpecCounts | None = None,
    held: tuple[Held, Held] = (NO_HOLD, NO_HOLD),
) -> tuple[GroupComparison, dict[str, GroupComparison]]:
    """Overall and per-segment comparisons (segments only when there is more than one). The
    candidate's /metrics diff covers the whole run: it fills the overall acceptance only."""
    cfg = cfg or CompareConfig()
    ref = _stall_ref(baseline, cfg)  # one stall threshold for every group: the baseline run's TPOT
    overall = compare_group("overall", baseline, candidate, cfg, durations, candidate_counters, ref, held)
    segs = segments_of(baseline, candidate)
    per = {} if len(segs) <= 1 else {s: compare_group(s, b, c, cfg, stall_ref=ref, held=held) for s, (b, c) in segs.items()}
    if overall.acceptance.origin == "counters":
        for g in per.values():
            if not g.acceptance.available:
                g.acceptance.reason = en("stats.r.run_level_only")
    return overall, per


# ---------------------------------------------------------------------------- simulation results


class SimulationDelta(BaseModel):
    """One (segment, method, k) replayed in both simulate results: acceptance side by side
    (``specgauge.simulate.compare.compare_simulations`` makes them).

    Simulate JSON carries aggregates only (no per-request rows), so there is no CI here."""

    segment: str
    method: str
    k: int
    baseline_acceptance_rate: float | None = None
    candidate_acceptance_rate: float | None = None
    baseline_mal: float | None = None
    candidate_mal: float | None = None
    batch: int | None = None
    baseline_predicted_speedup: float | None = None
    candidate_predicted_speedup: float | None = None
