"""The audit's statistics: pooled token tables, G-tests of homogeneity, Holm, effect sizes, power.

Pure functions over counts; no I/O, no servers.

Test per (prompt, position j): the distribution of the token at position j (END when the completion
ended before it). Under H0 — speculation is lossless — the candidate's and the reference's
completions are draws from the same distribution over sequences, whatever the model, so in
particular the token at each position has the same marginal distribution on both sides and the
2 x C table (rows: sides, columns: tokens) is a test of homogeneity with independent samples (one
completion gives one count per table). Marginals rather than joint prefixes: the joint prefix
distribution spreads over so many rare prefixes after a few positions that everything pools into
"other" and the test sees nothing; a lossy sampler shifts the marginals at the positions it
produces. Columns are chosen from the *pooled* counts only (ancillary under H0, so choosing them
does not bias the test): the commonest tokens, while every cell's expected count stays >=
``min_expected`` and at most ``max_categories`` columns, the rest pooled into "other".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from scipy.stats.contingency import association

#: a completion that ended (EOS / stop) before this position
END = "<end>"
OTHER = "other"


def token_at(tokens: Sequence[Hashable], position: int) -> Hashable:
    """The token at ``position``, or END when the completion ended before it."""
    return tokens[position] if position < len(tokens) else END


@dataclass(frozen=True)
class PooledTable:
    """2 x C counts. labels[c] names column c (a token, END, or OTHER); row 0 reference, row 1 candidate."""

    labels: list[Hashable]
    counts: np.ndarray  # [2, C] int64

    @property
    def n(self) -> tuple[int, int]:
        return int(self.counts[0].sum()), int(self.counts[1].sum())


def pooled_table(reference: Sequence[Hashable], candidate: Sequence[Hashable], min_expected: float = 5.0,
                 max_categories: int = 8) -> PooledTable:
    """Count each side's keys into columns chosen from the pooled counts (see the module docstring)."""
    if max_categories < 2:
        raise ValueError("max_categories must be >= 2")
    ref, cand = Counter(reference), Counter(candidate)
    n_r, n_c = len(reference), len(candidate)
    total = n_r + n_c
    if n_r == 0 or n_c == 0:
        return PooledTable([], np.zeros((2, 0), dtype=np.int64))
    pooled = ref + cand
    order = sorted(pooled, key=lambda k: (-pooled[k], repr(k)))
    scale = min(n_r, n_c) / total  # a column's smallest expected cell = pooled count * scale

    def ok(count: int) -> bool:
        return count * scale >= min_expected

    kept = [k for k in order if ok(pooled[k])]
    if len(kept) > max_categories or (len(kept) == max_categories and len(kept) < len(order)):
        kept = kept[: max_categories - 1]
    rest = total - sum(pooled[k] for k in kept)
    while rest and not ok(rest) and len(kept) > 1:  # "other" too thin: fold the thinnest kept column into it
        rest += pooled[kept.pop()]
    # one column left and a thin "other": a 2 x 2 table with small expected counts (Fisher's test)
    labels: list[Hashable] = list(kept)
    rows = [[ref[k] for k in kept], [cand[k] for k in kept]]
    if rest:
        labels.append(OTHER)
        rows[0].append(n_r - sum(rows[0]))
        rows[1].append(n_c - sum(rows[1]))
    return PooledTable(labels, np.asarray(rows, dtype=np.int64).reshape(2, len(labels)))


@dataclass(frozen=True)
class Homogeneity:
    statistic: float  # Pearson's X^2 or G; 0 when the table has one column
    p_value: float  # 1.0 when the table has one column (nothing to compare)
    dof: int
    tv: float  # total-variation distance between the two rows' proportions
    cramers_v: float  # 0 when the table has one column


#: ``chi2_contingency``'s ``lambda_`` per test name
TESTS = {"pearson": None, "g": "log-likelihood"}


def homogeneity(table: PooledTable, min_expected: float = 5.0, test: str = "pearson") -> Homogeneity:
    """Chi-square test of homogeneity (``chi2_contingency``, no continuity correction): Pearson's
    X^2 or the G-test (log-likelihood ratio). For a 2 x 2 table with an expected count below
    ``min_expected``, Fisher's exact test gives the p-value.

    Pearson is the default: on tables built as here (300 draws per side from Zipf-like
    distributions over 60 tokens, 8 columns, 20 000 replicates under H0) it rejected 0.29 % at
    alpha = 0.3 % and 4.7 % at 5 %, while G rejected 0.35 % and 5.2 % — G's chi-square
    approximation is anti-conservative with expected counts near 5, which Holm would carry into
    the family-wise error of a false FAIL.
    """
    c = table.counts
    if c.shape[1] < 2:
        return Homogeneity(0.0, 1.0, 0, 0.0, 0.0)
    res = stats.chi2_contingency(c, correction=False, lambda_=TESTS[test])
    p = float(res.pvalue)
    if c.shape[1] == 2 and float(np.min(res.expected_freq)) < min_expected:
        p = float(stats.fisher_exact(c).pvalue)
    n_r, n_c = table.n
    tv = 0.5 * float(np.abs(c[0] / n_r - c[1] / n_c).sum())
    return Homogeneity(float(res.statistic), p, int(res.dof), tv, float(association(c, method="cramer")))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error under any dependence between tests):
    the i-th smallest p times (m - i), made monotone, capped at 1."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = scaled
    return out


# ------------------------------------------------------------------- power and sample size
#
# Pearson's and the G statistic for a 2 x C homogeneity table are asymptotically noncentral
# chi-square with C - 1 degrees of freedom and noncentrality
#     lambda = n_h / 2 * sum_c (p1c - p2c)^2 / pbar_c,   n_h = 2 n1 n2 / (n1 + n2),
# with pbar the pooled proportions (sum 1). For a total-variation distance d = 1/2 sum |p1 - p2|,
# Cauchy-Schwarz gives (2d)^2 = (sum |p1-p2|)^2 <= sum (p1-p2)^2 / pbar * sum pbar, so
# lambda >= n_h / 2 * 4 d^2 = 2 n_h d^2, with equality when |p1c - p2c| is proportional to pbar_c
# (the hardest alternative to detect at that TV).
# So "detects every TV >= d with power 1 - beta" needs 2 n_h d^2 >= lambda*(alpha, dof, power).


def required_noncentrality(alpha: float, dof: int, power: float) -> float:
    """The noncentrality at which the level-``alpha`` chi-square test with ``dof`` rejects with
    probability ``power``."""
    dof = max(dof, 1)
    crit = stats.chi2.isf(alpha, dof)

    def gap(lam: float) -> float:
        return float(stats.ncx2.sf(crit, dof, lam)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
    return float(optimize.brentq(gap, 1e-9, hi, xtol=1e-9))


def samples_needed(tv: float, alpha: float, dof: int, power: float) -> int:
    """Samples per side (equal sides) to detect any TV distance >= ``tv`` with ``power``."""
    return math.ceil(required_noncentrality(alpha, dof, power) / (2 * tv * tv))


def detectable_tv(n_reference: int, n_candidate: int, alpha: float, dof: int, power: float) -> float:
    """The smallest TV distance these sample sizes detect with ``power`` (worst-case alternative)."""
    if n_reference == 0 or n_candidate == 0:
        return math.inf
    n_h = 2 * n_reference * n_candidate / (n_reference + n_candidate)
    return math.sqrt(required_noncentrality(alpha, dof, power) / (2 * n_h))


def first_divergence(a: Sequence[Hashable], b: Sequence[Hashable]) -> int | None:
    """Index of the first differing token (the shorter length when one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
