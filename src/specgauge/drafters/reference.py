"""Deliberately simple reference implementations, used by tests and ``benchmarks/`` only.

``ngram_propose_kmp`` restates vLLM v0.32's ``_find_longest_matched_ngram_and_propose_tokens``
step for step (KMP over the reversed context, longest prefix-function value capped at max_n, ties
to the rightmost position in the reversed context = the earliest occurrence), in plain Python.
The production drafter (``ngram.py``) uses a different formulation (window comparison and, for
replay, earliest-occurrence tables); tests check all three agree, and the vLLM-equivalence test
checks them against vLLM's own code.

The step-by-step replay reference is ``base.replay_by_stepping``.
"""

from __future__ import annotations

from collections.abc import Sequence


def ngram_propose_kmp(tokens: Sequence[int], min_n: int, max_n: int, max_model_len: int | None, k: int) -> list[int]:
    """vLLM's n-gram proposal for context ``tokens`` (no scheduler trim)."""
    total = len(tokens)
    if total < min_n:
        return []
    if max_model_len is not None:
        if total >= max_model_len:  # NgramProposer.propose skips the request
            return []
        k = min(k, max_model_len - total)
        if k <= 0:
            return []
    rev = list(tokens)[::-1]
    lps = [0] * max_n  # prefix function of rev[:max_n]
    longest, position, prev = 0, 0, 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:  # '>=': later i in rev = earlier occurrence in tokens
                longest, position = prev, i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return []
    start = total - 1 - position + longest
    return list(tokens[start : start + min(k, total - start)])
