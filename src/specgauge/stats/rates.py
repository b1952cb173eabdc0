"""One per-request yes/no rate in two runs — requests whose structured output broke, requests that
stalled — and whether the candidate's is higher: Fisher's exact test on the 2×2 table, one-sided
(``stats.shift.failure_test``, the test the canary already runs on failures).

The test treats the two runs as independent samples, also where their requests pair by id: a pair's
two outcomes are not compared with each other, so the test stays valid when the runs sent different
requests (a canary window, two workloads) and is conservative for paired runs.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from specgauge.stats.shift import failure_test


class RateComparison(BaseModel):
    """``k`` of ``n`` requests on each side; ``p_value``: the candidate's rate is higher (None: a side has no requests)."""

    baseline_k: int = 0
    baseline_n: int = 0
    candidate_k: int = 0
    candidate_n: int = 0
    p_value: float | None = None
    examples: list[str] = Field(default_factory=list)  #: the candidate's first cases, "id: what"

    @property
    def baseline_rate(self) -> float | None:
        return self.baseline_k / self.baseline_n if self.baseline_n else None

    @property
    def candidate_rate(self) -> float | None:
        return self.candidate_k / self.candidate_n if self.candidate_n else None

    def worse(self, alpha: float, tolerance: float = 0.0) -> bool:
        """The candidate's rate is higher, significantly (p < ``alpha``) and by more than ``tolerance``."""
        b, c = self.baseline_rate, self.candidate_rate
        return (self.p_value is not None and b is not None and c is not None and self.p_value < alpha
                and c - b > tolerance)


def compare_rates(baseline_k: int, baseline_n: int, candidate_k: int, candidate_n: int,
                  examples: list[str] | None = None) -> RateComparison:
    p = None
    if baseline_n and candidate_n:
        p = failure_test(candidate_k, candidate_n, baseline_k, baseline_n).p_value
    return RateComparison(baseline_k=baseline_k, baseline_n=baseline_n, candidate_k=candidate_k, candidate_n=candidate_n,
                          p_value=p, examples=examples or [])
