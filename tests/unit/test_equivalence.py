"""Output equivalence: exact match at temperature 0, distribution tests above it, user scorers."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from specgauge.records import RequestRecord
from specgauge.stats.equivalence import (
    ScorerError, check_equivalence, first_divergence, greedy_equivalence, ks_2samp, load_scorer, unigram_tvd,
)


def rec(i: int, text: str, tokens: int | None = None, ids: list[int] | None = None) -> RequestRecord:
    return RequestRecord(id=f"r{i}", index=i, scheduled_s=0.0, sent_s=0.0, started_at=0.0, ok=True, ttft_s=0.01, e2e_s=0.1,
                         output_tokens=tokens if tokens is not None else max(1, len(text.split())), text=text,
                         extra={"output_token_ids": ids} if ids is not None else {})


TEXTS = [f"The answer to question {i} is forty-two, as usual." for i in range(20)]


def test_identical_texts_match_fully() -> None:
    pairs = [(rec(i, t), rec(i, t)) for i, t in enumerate(TEXTS)]
    g = greedy_equivalence(pairs)
    assert g.match_rate == 1.0 and g.matches == 20 and not g.mismatches and g.compared_by == "text"


def test_divergence_at_char_17_is_reported_with_both_continuations() -> None:
    a = "0123456789abcdefgHIJKLMNOP and the rest"
    b = a[:17] + "xyz<script>alert(1)</script>"
    g = greedy_equivalence([(rec(0, a), rec(0, b)), (rec(1, "same"), rec(1, "same"))])
    assert g.match_rate == 0.5
    (m,) = g.mismatches
    assert m.char_position == 17 and m.token_position is None
    assert m.context == a[:17]
    assert m.baseline_continuation.startswith("HIJKLMNOP")
    assert m.candidate_continuation == "xyz<script>alert(1)</script>"  # raw here; escaped where shown


def test_token_ids_decide_when_both_runs_logged_them() -> None:
    g = greedy_equivalence([(rec(0, "ab", ids=[1, 2, 3, 4]), rec(0, "ab", ids=[1, 2, 9, 4]))])
    assert g.compared_by == "token ids" and g.matches == 0
    assert g.mismatches[0].token_position == 2 and g.mismatches[0].char_position is None
    assert first_divergence([1, 2], [1, 2, 3]) == 2 and first_divergence([1], [1]) is None


def test_one_rare_divergence_is_reported_not_hidden() -> None:
    pairs = [(rec(i, t), rec(i, t)) for i, t in enumerate(TEXTS * 5)]
    b, _ = pairs[37]
    pairs[37] = (b, rec(b.index, b.text[:30] + "!" + b.text[31:]))
    g = greedy_equivalence(pairs)
    assert g.matches == 99 and len(g.mismatches) == 1 and g.mismatches[0].char_position == 30


def test_ks_same_distribution_vs_shifted() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(100, 20, 300), rng.normal(100, 20, 300)
    same = ks_2samp(x, y)
    shifted = ks_2samp(x, y + 15)
    assert same.p_value is not None and same.p_value > 0.05
    assert shifted.p_value is not None and shifted.p_value < 1e-6 and shifted.statistic > same.statistic  # type: ignore[operator]
    assert ks_2samp([1, 2, 3], [1, 2, 3]).statistic == 0.0
    assert ks_2samp([], [1.0]).reason


def test_ks_p_value_is_calibrated_under_the_null() -> None:
    rng = np.random.default_rng(3)
    ps = [ks_2samp(rng.exponential(size=80), rng.exponential(size=80)).p_value for _ in range(300)]
    rejected = np.mean([p < 0.05 for p in ps])  # type: ignore[operator]
    assert 0.01 <= rejected <= 0.10


def test_unigram_tvd_same_source_vs_different_source() -> None:
    rng = np.random.default_rng(1)
    alphabet = list("abcdefghij")
    p = np.linspace(1, 2, 10)
    p /= p.sum()
    q = p[::-1]
    same = [(list(rng.choice(alphabet, 60, p=p)), list(rng.choice(alphabet, 60, p=p))) for _ in range(40)]
    diff = [(list(rng.choice(alphabet, 60, p=p)), list(rng.choice(alphabet, 60, p=q))) for _ in range(40)]
    s, d = unigram_tvd(same), unigram_tvd(diff)
    assert s.p_value > 0.05  # type: ignore[operator]
    assert d.p_value < 0.01 and d.statistic > s.statistic  # type: ignore[operator]


def test_check_equivalence_splits_by_temperature_and_runs_scorer() -> None:
    mod = types.ModuleType("sg_test_scorers")
    mod.longer = lambda b, c: float(len(c) - len(b))  # type: ignore[attr-defined]
    mod.boom = lambda b, c: 1 / 0  # type: ignore[attr-defined]
    sys.modules["sg_test_scorers"] = mod
    pairs = [(rec(i, t), rec(i, t + " extra words")) for i, t in enumerate(TEXTS)]
    temps = {f"r{i}": (0.0 if i < 10 else 0.8) for i in range(20)}
    eq = check_equivalence(pairs, temps, scorer=("sg_test_scorers:longer", load_scorer("sg_test_scorers:longer")))
    assert eq.greedy.pairs == 10 and eq.greedy.matches == 0
    assert eq.sampled.pairs == 10 and eq.unknown_temperature == 0
    assert eq.scorer is not None and eq.scorer.statistic == pytest.approx(12.0) and eq.scorer.p_value < 0.01  # type: ignore[operator]
    forced = check_equivalence(pairs, temps, temperature=0.0)
    assert forced.greedy.pairs == 20 and forced.temperature_source == "--temperature flag"
    unknown = check_equivalence(pairs)
    assert unknown.sampled.pairs == 20 and unknown.unknown_temperature == 20
    with pytest.raises(ScorerError, match="failed on request r0: ZeroDivisionError"):
        check_equivalence(pairs, scorer=("sg_test_scorers:boom", load_scorer("sg_test_scorers:boom")))
    with pytest.raises(ScorerError, match="module:function"):
        load_scorer("nocolon")
    with pytest.raises(ScorerError, match="cannot import"):
        load_scorer("no_such_module_xyz:f")
    with pytest.raises(ScorerError, match="has no function"):
        load_scorer("sg_test_scorers:missing")


def test_ks_p_value_is_scipys_asymptotic_mode() -> None:
    """The mode the test claims: asymptotic (the Kolmogorov distribution at n_e = n·m/(n+m)), not
    scipy's default exact mode, which differs at this size (0.52 vs 0.66 here)."""
    from scipy import stats

    x, y = np.arange(8.0), np.arange(8.0) + 3  # D = 3/8, n_e = 4
    r = ks_2samp(x, y)
    assert r.statistic == 0.375 and r.n == 8
    assert r.p_value == pytest.approx(stats.kstwo.sf(0.375, 4))
    assert abs(r.p_value - stats.ks_2samp(x, y, method="exact").pvalue) > 0.05  # type: ignore[operator]


def test_ks_with_one_value_each_says_why_and_warns_nothing() -> None:
    """scipy's asymptotic KS reads the Kolmogorov distribution at n_e = round(n·m/(n+m)): 0 for one value
    on each side, where it returns NaN and prints a RuntimeWarning (which reached the demo's console)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = ks_2samp([1.0], [2.0])
        assert r.p_value is None and r.reason and "n·m/(n+m)" in r.reason and r.statistic == 1.0
        assert ks_2samp([1.0], [1.0]).statistic == 0.0
        assert ks_2samp([1.0, 2.0], [2.0]).p_value is not None  # n_e = round(2/3) = 1: scipy reads it
