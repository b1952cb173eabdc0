"""Probabilistic drafting: a draft model that *samples* its proposals (q not one-hot).

The replay theorem does not apply: whether a sampled draft token is accepted depends on p and q,
not only on what the target emitted. Standard speculative sampling accepts with probability
α = Σ_x min(p(x), q(x)) per position (Leviathan et al., Thm 3.5). With the target's top-N logprobs
from the log (vLLM returns them with ``logprobs`` + ``return_tokens_as_token_ids``) the sum runs over
the known support only, so every figure here is a **lower bound**. Tokens per step use the i.i.d.
formula (1 − α^{k+1}) / (1 − α) with the request's mean α — labelled as such.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field


def alpha_lower_bound(logq: np.ndarray, top_logprobs: list[dict[int, float]]) -> np.ndarray:
    """Per output position, Σ_{x in the logged top-N} min(p(x), q(x)).

    logq: [n, V] the draft's log-probabilities at the request's temperature, teacher-forced.
    top_logprobs: n dicts {token_id: log p} of the target, as logged.
    """
    n = min(len(top_logprobs), logq.shape[0])
    out = np.zeros(n, dtype=np.float64)
    for j in range(n):
        top = top_logprobs[j]
        if not top:
            continue
        ids = np.fromiter(top.keys(), dtype=np.int64, count=len(top))
        ok = (ids >= 0) & (ids < logq.shape[1])
        p = np.exp(np.fromiter(top.values(), dtype=np.float64, count=len(top)))[ok]
        q = np.exp(logq[j, ids[ok]].astype(np.float64))
        out[j] = float(np.minimum(p, q).sum())
    return out


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """i.i.d. expectation of tokens emitted per target step: (1 − α^{k+1}) / (1 − α)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


class ProbabilisticSummary(BaseModel):
    """Lower-bound acceptance of a sampling draft model over one segment."""

    method: str
    k: int
    requests: int
    positions: int
    alpha_lower_bound: float | None = Field(description="mean per-position acceptance probability (lower bound)")
    request_alpha_p50: float | None = None
    expected_tokens_per_step: float | None = Field(description="i.i.d. approximation from alpha")
    expected_mean_acceptance_length: float | None = Field(description="same as tokens per step: 1 + E[accepted]")
    note: str = "lower bound over the logged top-N support; i.i.d. approximation for tokens per step"


class ProbabilisticAccumulator:
    def __init__(self, method: str, k: int) -> None:
        self.method, self.k = method, k
        self.sum = 0.0
        self.positions = 0
        self.request_alphas: list[float] = []

    def add(self, alphas: np.ndarray) -> None:
        if alphas.size == 0:
            return
        self.sum += float(alphas.sum())
        self.positions += int(alphas.size)
        self.request_alphas.append(float(alphas.mean()))

    def summary(self) -> ProbabilisticSummary:
        a = self.sum / self.positions if self.positions else None
        tps = expected_tokens_per_step(a, self.k) if a is not None else None
        return ProbabilisticSummary(
            method=self.method, k=self.k, requests=len(self.request_alphas), positions=self.positions,
            alpha_lower_bound=a,
            request_alpha_p50=float(np.median(self.request_alphas)) if self.request_alphas else None,
            expected_tokens_per_step=tps, expected_mean_acceptance_length=tps,
        )

