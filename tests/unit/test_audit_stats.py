"""The audit's statistics on hand-made tables and simulated draws with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.audit.stats import (
    END,
    OTHER,
    detectable_tv,
    first_divergence,
    holm,
    homogeneity,
    pooled_table,
    required_noncentrality,
    samples_needed,
    token_at,
)


def test_token_at_marks_ended_completions() -> None:
    assert [token_at([5, 6], j) for j in range(4)] == [5, 6, END, END]


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert first_divergence([], [4]) == 0


def test_pooled_table_keeps_common_tokens_and_pools_the_rest() -> None:
    ref = [1] * 50 + [2] * 30 + [3] * 15 + [4, 5, 6, 7, 8]
    cand = [1] * 45 + [2] * 35 + [3] * 14 + [4, 9, 9, 10, 11, 12]
    t = pooled_table(ref, cand, min_expected=5, max_categories=8)
    assert t.labels == [1, 2, 3, OTHER]
    assert t.counts.tolist() == [[50, 30, 15, 5], [45, 35, 14, 6]]
    assert t.n == (100, 100)


def test_pooled_table_caps_columns_and_folds_a_thin_other() -> None:
    ref = [k for k in range(12) for _ in range(20)]
    t = pooled_table(ref, ref, min_expected=5, max_categories=4)
    assert len(t.labels) == 4 and t.labels[-1] == OTHER
    assert t.counts.sum(axis=1).tolist() == [240, 240]
    # "other" would hold 8 pooled draws (expected 4 < 5): the thinnest kept column joins it
    ref2 = [1] * 40 + [2] * 40 + [3] * 12 + [4] * 4
    t2 = pooled_table(ref2, ref2, min_expected=5, max_categories=8)
    assert t2.labels == [1, 2, OTHER] and t2.counts[0].tolist() == [40, 40, 16]


def test_one_token_with_a_thin_rest_uses_fisher() -> None:
    t = pooled_table([5] * 300 + [6] * 3, [5] * 300, min_expected=5)
    assert t.labels == [5, OTHER]
    h = homogeneity(t)
    assert h.p_value == pytest.approx(stats.fisher_exact(t.counts).pvalue)
    assert h.dof == 1


def test_single_column_is_no_test() -> None:
    h = homogeneity(pooled_table([7] * 40, [7] * 60))
    assert (h.p_value, h.dof, h.tv, h.cramers_v) == (1.0, 0, 0.0, 0.0)


def test_homogeneity_values_on_a_hand_made_table() -> None:
    ref = [0] * 60 + [1] * 40
    cand = [0] * 40 + [1] * 60
    h = homogeneity(pooled_table(ref, cand))
    # Pearson X^2 of [[60, 40], [40, 60]]: expected 50 everywhere, 4 * 10^2 / 50 = 8
    assert h.statistic == pytest.approx(8.0)
    assert h.p_value == pytest.approx(stats.chi2.sf(8.0, 1))
    assert h.tv == pytest.approx(0.2)
    assert h.cramers_v == pytest.approx(np.sqrt(8.0 / 200))
    g = homogeneity(pooled_table(ref, cand), test="g")
    want = 2 * sum(o * np.log(o / 50) for o in (60, 40, 40, 60))
    assert g.statistic == pytest.approx(want)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(1*0.04, 0.06)
    assert holm([0.04, 0.01, 0.03]).tolist() == pytest.approx([0.06, 0.03, 0.06])
    assert holm([0.5, 0.9]).tolist() == pytest.approx([1.0, 1.0])
    assert holm([]).size == 0


def test_required_noncentrality_gives_the_power() -> None:
    for dof in (1, 4, 7):
        lam = required_noncentrality(0.01, dof, 0.8)
        assert stats.ncx2.sf(stats.chi2.isf(0.01, dof), dof, lam) == pytest.approx(0.8, abs=1e-6)


def test_sample_size_and_detectable_tv_are_inverse() -> None:
    n = samples_needed(0.2, 0.01, 3, 0.8)
    assert detectable_tv(n, n, 0.01, 3, 0.8) <= 0.2 < detectable_tv(n - 1, n - 1, 0.01, 3, 0.8)
    assert samples_needed(0.1, 0.01, 3, 0.8) > 3.9 * samples_needed(0.2, 0.01, 3, 0.8)  # ~ 1 / TV^2
    assert detectable_tv(0, 10, 0.01, 3, 0.8) == np.inf


def test_power_formula_holds_for_the_hardest_alternative() -> None:
    """Simulated: at the computed sample size, the worst-case alternative at TV 0.2 (two columns,
    p = 0.5 +- 0.1) is detected about 80 % of the time at level 0.01."""
    rng = np.random.default_rng(7)
    n = samples_needed(0.2, 0.01, 1, 0.8)
    reps = 1500
    a = rng.binomial(n, 0.6, reps)
    b = rng.binomial(n, 0.4, reps)
    hits = sum(homogeneity(pooled_table([0] * x + [1] * (n - x), [0] * y + [1] * (n - y))).p_value < 0.01
               for x, y in zip(a, b))
    assert 0.76 <= hits / reps <= 0.88


def test_false_rejections_stay_at_the_level() -> None:
    """Same distribution on both sides (Zipf over 60 tokens, 300 draws, pooled to 8 columns): the
    test rejects at about its level, not more."""
    rng = np.random.default_rng(3)
    p = 1 / np.arange(1, 61) ** 1.1
    p /= p.sum()
    reps = 1500
    rej = sum(homogeneity(pooled_table(list(rng.choice(60, 300, p=p)), list(rng.choice(60, 300, p=p)))).p_value < 0.05
              for _ in range(reps))
    assert rej / reps <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / reps)
