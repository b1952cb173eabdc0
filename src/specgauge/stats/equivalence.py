"""Output equivalence: does the candidate (speculation on) produce the outputs the baseline does?

Speculative decoding with rejection sampling is lossless: at temperature 0 the outputs must match
exactly (numerics — batch shapes, kernels — can still make rare divergence; it is reported, never
hidden), and at temperature > 0 the output *distribution* must be the same. So, over request pairs
(same id, both successful):

- greedy pairs (T = 0): exact match rate of the token ids when both runs recorded them, else of the
  text; for each mismatch the first divergent position and both continuations around it.
- sampled pairs (T > 0, or unset: servers default to 1): two-sample Kolmogorov–Smirnov test on output
  lengths; total-variation distance between the unigram (token id, else character) frequency
  distributions, with a paired sign-flip permutation p-value (swapping a pair's two outputs is
  allowed under H0, and keeps the within-text dependence the chi-square test would ignore);
  and, over all pairs, optionally a user scorer ``(baseline_text, candidate_text) -> float`` (> 0: candidate better,
  < 0: worse) tested for mean 0 with a paired sign-flip permutation test.
Statistics come back as data; nothing here prints.
"""

from __future__ import annotations

import importlib
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.stats
from pydantic import BaseModel, Field

from specgauge.errors import UserError
from specgauge.i18n import en
from specgauge.records import RequestRecord

WINDOW_BEFORE = 40
WINDOW_AFTER = 80
TOP_CATEGORIES = 200  #: unigram categories kept for the TVD test (the rest pooled as "other")
MAX_MISMATCHES_KEPT = 200

Scorer = Callable[[str, str], float]


class ScorerError(UserError):
    """--scorer cannot be imported, or raised on a request."""


class Mismatch(BaseModel):
    """One greedy pair whose outputs differ. Texts are raw; escape them where they are shown."""

    id: str
    segment: str
    token_position: int | None = None  #: first differing token index (when both runs logged ids)
    char_position: int | None = None  #: first differing character (None when the texts are equal)
    context: str = ""  #: the common text just before the divergence
    baseline_continuation: str = ""
    candidate_continuation: str = ""
    baseline_chars: int = 0
    candidate_chars: int = 0


class GreedyEquivalence(BaseModel):
    pairs: int
    compared_by: str  #: "token ids", "text" or "token ids and text"
    matches: int
    match_rate: float | None = None
    mismatches: list[Mismatch] = Field(default_factory=list)  #: the first MAX_MISMATCHES_KEPT
    reason: str | None = None


class TestResult(BaseModel):
    statistic: float | None = None
    p_value: float | None = None
    n: int = 0
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class SampledEquivalence(BaseModel):
    pairs: int
    length_ks: TestResult  #: two-sample KS on output lengths (tokens from usage, else characters)
    unigram_tvd: TestResult  #: total-variation distance of unigram frequencies, permutation p-value
    unigram_unit: str = ""  #: "token id" or "character"


class EquivalenceResult(BaseModel):
    greedy: GreedyEquivalence
    sampled: SampledEquivalence
    temperature_source: str  #: where temperatures came from
    unknown_temperature: int = 0  #: pairs treated as sampled because no temperature was known
    scorer: TestResult | None = None  #: the user's scorer over all pairs (greedy and sampled)
    scorer_name: str | None = None


# ---------------------------------------------------------------------------- greedy


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first differing element; the shorter length when one is a prefix; None if equal."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def _first_divergence_str(a: str, b: str) -> int | None:
    if a == b:
        return None
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on prefix equality (fast for long texts)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def token_ids(r: RequestRecord) -> list[int] | None:
    ids = r.extra.get("output_token_ids") if r.extra else None
    return [int(t) for t in ids] if isinstance(ids, list) else None


def mismatch_of(b: RequestRecord, c: RequestRecord) -> Mismatch | None:
    """None when the pair matches (token ids when both have them, else text)."""
    ib, ic = token_ids(b), token_ids(c)
    tpos = first_divergence(ib, ic) if ib is not None and ic is not None else None
    cpos = _first_divergence_str(b.text, c.text)
    if (ib is not None and ic is not None and tpos is None) or (not (ib is not None and ic is not None) and cpos is None):
        return None
    m = Mismatch(id=b.id, segment=b.segment, token_position=tpos, char_position=cpos,
                 baseline_chars=len(b.text), candidate_chars=len(c.text))
    if cpos is not None:
        m.context = b.text[max(0, cpos - WINDOW_BEFORE):cpos]
        m.baseline_continuation = b.text[cpos:cpos + WINDOW_AFTER]
        m.candidate_continuation = c.text[cpos:cpos + WINDOW_AFTER]
    return m


def greedy_equivalence(pairs: Sequence[tuple[RequestRecord, RequestRecord]]) -> GreedyEquivalence:
    if not pairs:
        return GreedyEquivalence(pairs=0, compared_by="text", matches=0, reason=en("stats.r.no_greedy_pair"))
    with_ids = sum(token_ids(b) is not None and token_ids(c) is not None for b, c in pairs)
    by = "token ids" if with_ids == len(pairs) else ("text" if with_ids == 0 else "token ids and text")
    mism = [m for b, c in pairs if (m := mismatch_of(b, c)) is not None]
    return GreedyEquivalence(
        pairs=len(pairs), compared_by=by, matches=len(pairs) - len(mism),
        match_rate=(len(pairs) - len(mism)) / len(pairs), mismatches=mism[:MAX_MISMATCHES_KEPT],
    )


# ---------------------------------------------------------------------------- sampled


def ks_2samp(x: Sequence[float], y: Sequence[float]) -> TestResult:
    """Two-sample Kolmogorov–Smirnov (``scipy.stats.ks_2samp``, two-sided): D = sup |F_x − F_y|; p from
    scipy's asymptotic mode, the mode this test has always claimed (scipy's default is exact below
    10,000 samples): the Kolmogorov distribution of D at n_e = round(n·m/(n+m)) (``scipy.stats.kstwo``).
    Output lengths are integers with ties, for which neither mode is exact."""
    a, b = np.asarray(x, float), np.asarray(y, float)
    if a.size == 0 or b.size == 0:
        return TestResult(n=int(min(a.size, b.size)), reason=en("stats.r.sample_empty"))
    if round(a.size * b.size / (a.size + b.size)) < 1:  # 1 and 1: scipy's kstwo at n_e = 0 is NaN (and warns)
        return TestResult(statistic=float(a[0] != b[0]), n=1, reason=en("stats.r.ks_one_each"),
                          detail={"n_baseline": 1, "n_candidate": 1})
    r = scipy.stats.ks_2samp(a, b, alternative="two-sided", method="asymp")
    return TestResult(statistic=float(r.statistic), p_value=float(r.pvalue), n=int(min(a.size, b.size)),
                      detail={"n_baseline": int(a.size), "n_candidate": int(b.size)})


def _sign_flip_p(d: np.ndarray, stat: Callable[[np.ndarray], np.ndarray], observed: float, resamples: int, seed: int) -> float:
    """Permutation p-value: share of sign-flip resamples with a statistic ≥ the observed one,
    counting the observed arrangement itself ((1 + hits) / (1 + resamples))."""
    rng = np.random.default_rng(seed)
    hits, left = 0, resamples
    block = max(1, 2_000_000 // max(1, d.size))
    while left > 0:
        b = min(block, left)
        s = rng.choice(np.array([-1.0, 1.0]), size=(b, d.shape[0]))
        hits += int(np.sum(stat(s) >= observed - 1e-12))
        left -= b
    return (1 + hits) / (1 + resamples)


def unigram_tvd(pairs: Sequence[tuple[Sequence[Any], Sequence[Any]]], resamples: int = 2000, seed: int = 0) -> TestResult:
    """TVD = ½ Σ |p_b − p_c| over unigram categories (the TOP_CATEGORIES most frequent, the rest
    pooled). H0 (same output distribution) lets each pair's two outputs swap: p-value from random
    swaps (sign flips of the per-pair count differences)."""
    if not pairs:
        return TestResult(reason=en("stats.r.no_sampled_pair"))
    total: Counter[Any] = Counter()
    for b, c in pairs:
        total.update(b)
        total.update(c)
    if not total:
        return TestResult(n=len(pairs), reason=en("stats.r.all_empty"))
    cats = {t: i for i, (t, _) in enumerate(total.most_common(TOP_CATEGORIES))}
    width = len(cats) + 1
    B = np.zeros((len(pairs), width))
    C = np.zeros((len(pairs), width))
    for row, (b, c) in enumerate(pairs):
        for tok, n in Counter(b).items():
            B[row, cats.get(tok, width - 1)] += n
        for tok, n in Counter(c).items():
            C[row, cats.get(tok, width - 1)] += n
    nb, nc = B.sum(), C.sum()
    if nb == 0 or nc == 0:
        return TestResult(n=len(pairs), reason=en("stats.r.one_empty"))
    Bs, D = B.sum(0), (C - B) / 2.0  # a swap of pair i moves D_i·2 between the sides
    M = (B + C) / 2.0

    def tvd_of(signs: np.ndarray) -> np.ndarray:
        # side b after flips: Σ (M_i − s_i·D_i); side c: Σ (M_i + s_i·D_i)
        shift = signs @ D  # (r, width)
        mb, mc = M.sum(0) - shift, M.sum(0) + shift
        return 0.5 * np.abs(mb / mb.sum(1, keepdims=True) - mc / mc.sum(1, keepdims=True)).sum(1)

    obs = float(0.5 * np.abs(Bs / nb - C.sum(0) / nc).sum())
    p = _sign_flip_p(D, tvd_of, obs, resamples, seed)
    return TestResult(statistic=obs, p_value=p, n=len(pairs),
                      detail={"categories": len(cats), "pooled_other": len(total) > len(cats)})


def load_scorer(spec: str) -> Scorer:
    """``package.module:function`` → the function; a clear error naming the flag otherwise."""
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise ScorerError(f"--scorer {spec!r}: write it as module:function, e.g. mypkg.scores:similarity")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 — any import failure is the user's module
        raise ScorerError(f"--scorer {spec!r}: cannot import {mod_name}: {type(e).__name__}: {e}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ScorerError(f"--scorer {spec!r}: {mod_name} has no function {fn_name}")
    return fn  # type: ignore[no-any-return]


def scorer_test(pairs: Sequence[tuple[RequestRecord, RequestRecord]], scorer: Scorer, name: str,
                resamples: int = 2000, seed: int = 0) -> TestResult:
    """Mean of scorer(baseline, candidate) and a two-sided sign-flip p-value for mean = 0."""
    if not pairs:
        return TestResult(reason=en("stats.r.no_score_pair"))
    vals = []
    for b, c in pairs:
        try:
            v = float(scorer(b.text, c.text))
        except Exception as e:  # noqa: BLE001 — the user's function
            raise ScorerError(f"--scorer {name}: failed on request {b.id}: {type(e).__name__}: {e}") from None
        if not math.isfinite(v):
            raise ScorerError(f"--scorer {name}: returned {v} on request {b.id}; scores must be finite numbers")
        vals.append(v)
    d = np.asarray(vals)
    obs = abs(float(d.mean()))
    p = _sign_flip_p(d, lambda s: np.abs((s * d).mean(1)), obs, resamples, seed)
    return TestResult(statistic=float(d.mean()), p_value=p, n=len(d),
                      detail={"positive": int((d > 0).sum()), "negative": int((d < 0).sum()), "zero": int((d == 0).sum())})


# ---------------------------------------------------------------------------- both


def _length(r: RequestRecord) -> float:
    return float(r.output_tokens) if r.output_tokens is not None else float(len(r.text))


def check_equivalence(
    pairs: Sequence[tuple[RequestRecord, RequestRecord]],
    temperatures: Mapping[str, float | None] | None = None,
    temperature: float | None = None,
    temperature_source: str = "",
    scorer: tuple[str, Scorer] | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> EquivalenceResult:
    """Equivalence over successful pairs. ``temperature`` (a flag) overrides the per-id
    ``temperatures``; a pair with no known temperature counts as sampled (servers default to 1)."""
    temps = temperatures or {}
    greedy, sampled, unknown = [], [], 0
    for b, c in pairs:
        t = temperature if temperature is not None else temps.get(b.id)
        if t is None:
            unknown += 1
        (greedy if t == 0 else sampled).append((b, c))
    src = en("eq.src.flag") if temperature is not None else (temperature_source or en("eq.src.unknown"))
    with_ids = all(token_ids(b) is not None and token_ids(c) is not None for b, c in sampled)
    units = [((token_ids(b) or []), (token_ids(c) or [])) if with_ids else (b.text, c.text) for b, c in sampled]
    s = SampledEquivalence(
        pairs=len(sampled),
        length_ks=ks_2samp([_length(b) for b, _ in sampled], [_length(c) for _, c in sampled]) if sampled
        else TestResult(reason=en("stats.r.no_sampled_pair")),
        unigram_tvd=unigram_tvd(units, resamples, seed),
        unigram_unit="token id" if with_ids and sampled else "character",
    )
    return EquivalenceResult(
        greedy=greedy_equivalence(greedy), sampled=s, temperature_source=src, unknown_temperature=unknown,
        scorer=scorer_test(pairs, scorer[1], scorer[0], resamples, seed) if scorer is not None else None,
        scorer_name=scorer[0] if scorer is not None else None,
    )
