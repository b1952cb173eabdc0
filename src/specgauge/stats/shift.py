"""Two independent samples (no pairing): a shift estimate with its confidence interval, a tail ratio,
and a failure-count test. Used by the canary judge, where the two sides serve different requests
drawn from the same traffic; knows nothing about requests or printing.

- ``hodges_lehmann``: the Hodges–Lehmann shift (median of all pairwise differences y_j − x_i) with
  the distribution-free interval that inverts the Mann–Whitney test (Hollander & Wolfe, ch. 4):
      C = round( nm/2 − z_{1−α/2} · √(nm(n+m+1)/12) ),   CI = [D_(C), D_(nm+1−C)]  (1-based)
  over the sorted differences D (normal approximation of U's null distribution; ties ignored), and
  scipy's Mann–Whitney U p-value beside it. On logarithms it estimates a *ratio*: exp(HL(log y −
  log x)) is the typical candidate/baseline factor, which is how latency regressions are stated.
- ``bootstrap_quantile_ratio``: the ratio of a high quantile (p95) of y over x with a percentile
  bootstrap CI, each side resampled on its own. A rank test barely moves when only the tail
  grows; this catches it.
- ``failure_test``: Fisher's exact test on the 2×2 failure table, one-sided (y fails more often).
- ``rate_above``: one-sided exact binomial test that a failure rate is above a fixed limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel
from scipy import stats as _st

MAX_PAIRWISE = 4_000_000  #: n·m above this: both samples are thinned (seeded, without replacement)
_BLOCK_ELEMS = 2_000_000


class ShiftEstimate(BaseModel):
    """y relative to x: ``estimate`` with its CI; ``log_scale`` estimates are ratios y/x."""

    estimate: float
    low: float
    high: float
    p_value: float  #: two-sided Mann–Whitney U
    n_x: int
    n_y: int
    confidence: float
    log_scale: bool = False
    thinned: bool = False  #: samples were thinned to keep n·m ≤ MAX_PAIRWISE


class RatioEstimate(BaseModel):
    """quantile(y) / quantile(x) with a percentile-bootstrap CI."""

    q: float
    x_value: float
    y_value: float
    estimate: float
    low: float
    high: float
    n_x: int
    n_y: int
    resamples: int
    confidence: float
    thinned: bool = False  #: the bootstrap drew from a seeded subsample of ``max_n`` a side (a slightly wider CI)


class CountTest(BaseModel):
    """A failure-count test: its p-value and the counts behind it."""

    p_value: float
    failures_y: int
    n_y: int
    failures_x: int | None = None
    n_x: int | None = None
    limit: float | None = None
    odds_ratio: float | None = None


def _thin(a: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    return a if a.size <= k else rng.choice(a, size=k, replace=False)


def hodges_lehmann(x: Sequence[float], y: Sequence[float], confidence: float = 0.95, log: bool = False,
                   seed: int = 0) -> ShiftEstimate:
    """Shift of ``y`` over ``x`` (``log``: ratio y/x of positive values). Needs both samples non-empty."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size == 0 or ya.size == 0:
        raise ValueError("hodges_lehmann needs two non-empty samples")
    if log:
        if (xa <= 0).any() or (ya <= 0).any():
            raise ValueError("a log-scale shift needs positive values")
        xa, ya = np.log(xa), np.log(ya)
    p = float(_st.mannwhitneyu(ya, xa, alternative="two-sided").pvalue)
    thinned = False
    if xa.size * ya.size > MAX_PAIRWISE:
        rng = np.random.default_rng(seed)
        k = int(math.sqrt(MAX_PAIRWISE))
        xa, ya, thinned = _thin(xa, k, rng), _thin(ya, k, rng), True
    n, m = xa.size, ya.size
    d = np.sort((ya[None, :] - xa[:, None]).ravel())  # all n·m differences y_j − x_i
    nm = n * m
    est = float(np.median(d))
    z = float(_st.norm.ppf(0.5 + confidence / 2))
    c = round(nm / 2 - z * math.sqrt(nm * (n + m + 1) / 12.0))
    if c < 1:  # too few observations for this confidence: the interval is unbounded
        lo, hi = -math.inf, math.inf
    else:
        lo, hi = float(d[c - 1]), float(d[nm - c])  # 1-based D_(C) and D_(nm+1−C)
    if log:
        est, lo, hi = math.exp(est), math.exp(lo) if lo > -math.inf else 0.0, math.exp(hi) if hi < math.inf else math.inf
    return ShiftEstimate(estimate=est, low=lo, high=hi, p_value=p, n_x=int(n), n_y=int(m), confidence=confidence,
                         log_scale=log, thinned=thinned)


def bootstrap_quantile_ratio(x: Sequence[float], y: Sequence[float], q: float = 95.0, confidence: float = 0.95,
                             resamples: int = 2000, seed: int = 0, max_n: int = 5000) -> RatioEstimate:
    """quantile_q(y) / quantile_q(x), each side resampled independently ``resamples`` times (in
    blocks, so memory stays bounded; a side above ``max_n`` values is bootstrapped from a seeded
    subsample of ``max_n``, so time stays bounded too). The estimate uses all values."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.size == 0 or ya.size == 0:
        raise ValueError("bootstrap_quantile_ratio needs two non-empty samples")
    rng = np.random.default_rng(seed)
    qx, qy = float(np.percentile(xa, q)), float(np.percentile(ya, q))
    thinned = xa.size > max_n or ya.size > max_n
    bxa, bya = _thin(xa, max_n, rng), _thin(ya, max_n, rng)

    def boot(a: np.ndarray) -> np.ndarray:
        out = np.empty(resamples)
        rows = max(1, _BLOCK_ELEMS // a.size)
        for s in range(0, resamples, rows):
            e = min(resamples, s + rows)
            idx = rng.integers(0, a.size, size=(e - s, a.size))
            out[s:e] = np.percentile(a[idx], q, axis=1)
        return out

    bx, by = boot(bxa), boot(bya)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = by / bx
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - confidence) / 2 * 100
    lo, hi = (np.percentile(ratios, [tail, 100 - tail]) if ratios.size else (math.nan, math.nan))
    est = qy / qx if qx > 0 else math.inf
    return RatioEstimate(q=q, x_value=qx, y_value=qy, estimate=est, low=float(lo), high=float(hi), n_x=int(xa.size),
                         n_y=int(ya.size), resamples=resamples, confidence=confidence, thinned=thinned)


def failure_test(failures_y: int, n_y: int, failures_x: int, n_x: int) -> CountTest:
    """Fisher's exact test, one-sided: does y fail more often than x?"""
    table = [[failures_y, n_y - failures_y], [failures_x, n_x - failures_x]]
    res = _st.fisher_exact(table, alternative="greater")
    odds = float(res.statistic)
    return CountTest(p_value=float(res.pvalue), failures_y=failures_y, n_y=n_y, failures_x=failures_x, n_x=n_x,
                     odds_ratio=odds if math.isfinite(odds) else None)


def rate_above(failures: int, n: int, limit: float) -> CountTest:
    """Exact binomial test, one-sided: is the failure rate above ``limit``? (limit 0: any failure is.)"""
    if n == 0:
        return CountTest(p_value=1.0, failures_y=0, n_y=0, limit=limit)
    if limit <= 0:
        return CountTest(p_value=0.0 if failures else 1.0, failures_y=failures, n_y=n, limit=limit)
    p = float(_st.binomtest(failures, n, limit, alternative="greater").pvalue)
    return CountTest(p_value=p, failures_y=failures, n_y=n, limit=limit)
