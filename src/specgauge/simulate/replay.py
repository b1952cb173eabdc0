"""Acceptance figures from replay traces, per request and aggregated per segment.

Definitions (as vLLM's spec-decode metrics): a *draft* is a step whose proposal had ≥ 1 token;
acceptance rate = accepted / drafted tokens; mean acceptance length (MAL) = 1 + accepted / drafts;
per-position acceptance[i] = drafts whose token i was accepted / drafts. Aggregates are given both
token-weighted (sums over requests) and request-weighted (mean of per-request figures), with the
spread across requests, so long completions do not hide the short ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from specgauge.drafters.base import ReplayTrace


class RequestAcceptance(BaseModel):
    request_id: str
    segment: str
    method: str
    k: int
    output_tokens: int
    steps: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    #: per_position[i]: drafts whose token i was accepted
    per_position: list[int]
    #: acceptance_histogram[a]: drafts with exactly a tokens accepted (a = 0..k)
    acceptance_histogram: list[int]
    exact: bool = True

    @classmethod
    def from_trace(
        cls, trace: ReplayTrace, request_id: str, segment: str, method: str, k: int, output_tokens: int,
        exact: bool = True,
    ) -> RequestAcceptance:
        d, a = trace.drafted, trace.accepted
        mask = d > 0
        acc_d = a[mask]
        width = max(k, int(d.max()) if d.size else 0)
        per_pos = [int((acc_d > i).sum()) for i in range(width)]
        hist = np.bincount(acc_d, minlength=width + 1) if acc_d.size else np.zeros(width + 1, dtype=np.int64)
        return cls(
            request_id=request_id, segment=segment, method=method, k=k,
            output_tokens=output_tokens,
            steps=int(d.size), drafts=int(mask.sum()), draft_tokens=int(d.sum()), accepted_tokens=int(a.sum()),
            per_position=per_pos, acceptance_histogram=[int(x) for x in hist], exact=exact,
        )

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else math.nan

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.accepted_tokens / self.drafts if self.drafts else math.nan


class Spread(BaseModel):
    n: int
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    mean: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, values: Sequence[float], empty_reason: str) -> Spread:
        v = [x for x in values if not math.isnan(x)]
        if not v:
            return cls(n=0, note=empty_reason)
        a = np.asarray(v, dtype=float)
        p10, p50, p90 = np.percentile(a, [10, 50, 90])
        return cls(n=len(a), p10=float(p10), p50=float(p50), p90=float(p90), mean=float(a.mean()))


class AcceptanceSummary(BaseModel):
    """Acceptance of one method at one k over a set of requests (a segment, or all)."""

    method: str
    k: int
    requests: int
    output_tokens: int
    steps: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None = Field(description="token-weighted: accepted / drafted tokens")
    mean_acceptance_length: float | None = Field(description="1 + accepted / drafts")
    per_position_rate: list[float | None]
    tokens_per_step: float | None = Field(description="output tokens / target steps")
    draft_share: float | None = Field(description="share of steps that carried a draft")
    request_acceptance_rate: Spread = Field(description="per-request acceptance rate across requests")
    request_mean_acceptance_length: Spread
    acceptance_histogram: list[int]
    #: draft tokens per target step (feeds the cost model)
    mean_drafted_per_step: float | None = None
    exact: bool = True
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, method: str, k: int, rows: Sequence[RequestAcceptance]) -> AcceptanceSummary:
        drafts = sum(r.drafts for r in rows)
        dtok = sum(r.draft_tokens for r in rows)
        acc = sum(r.accepted_tokens for r in rows)
        steps = sum(r.steps for r in rows)
        out = sum(r.output_tokens for r in rows)
        width = max([k, *[len(r.per_position) for r in rows]])
        per_pos = [sum(r.per_position[i] for r in rows if i < len(r.per_position)) for i in range(width)]
        hist = [sum(r.acceptance_histogram[i] for r in rows if i < len(r.acceptance_histogram)) for i in range(width + 1)]
        notes = []
        if not drafts:
            notes.append("no drafts were proposed: acceptance is undefined (not 0)")
        return cls(
            method=method, k=k, requests=len(rows), output_tokens=out, steps=steps, drafts=drafts,
            draft_tokens=dtok, accepted_tokens=acc,
            acceptance_rate=acc / dtok if dtok else None,
            mean_acceptance_length=1 + acc / drafts if drafts else None,
            per_position_rate=[p / drafts if drafts else None for p in per_pos],
            tokens_per_step=out / steps if steps else None,
            draft_share=drafts / steps if steps else None,
            request_acceptance_rate=Spread.of([r.acceptance_rate for r in rows], "no request had a draft"),
            request_mean_acceptance_length=Spread.of([r.mean_acceptance_length for r in rows], "no request had a draft"),
            acceptance_histogram=hist,
            mean_drafted_per_step=dtok / steps if steps else None,
            exact=all(r.exact for r in rows),
            notes=notes,
        )
