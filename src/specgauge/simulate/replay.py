"""Acceptance figures from replay traces, per request and aggregated per segment.

Definitions (as vLLM's spec-decode metrics): a *draft* is a step whose proposal had ≥ 1 token;
acceptance rate = accepted / drafted tokens; mean acceptance length (MAL) = 1 + accepted / drafts;
per-position acceptance[i] = drafts whose token i was accepted / drafts. Aggregates are given both
token-weighted (sums over requests) and request-weighted (mean of per-request figures), with the
spread across requests, so long completions do not hide the short ones. A hidden-state head's rows
also carry the teacher-forced figure training tools print (``TeacherForcedCounts``), summed the same
way into the ``teacher_forced_*`` fields: shown beside the replayed figure, labelled optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from specgauge.distributions import describe
from specgauge.drafters.base import BoundsKind, ReplayTrace
from specgauge.i18n import en


class TeacherForcedCounts(BaseModel):
    """A hidden-state head's teacher-forced figure over one output (``ReplayTrace.teacher_forced``):
    every draft position fed the *target's* hidden state, as EAGLE / SpecForge training prints it.
    OPTIMISTIC — no server drafts that way; the replayed figures beside it are what a server accepts."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    #: per_position[i]: drafts whose token i was accepted
    per_position: list[int]


def _counts(trace: ReplayTrace, k: int) -> tuple[int, int, int, int, list[int], list[int]]:
    """(steps, drafts, draft tokens, accepted tokens, per-position accepted, acceptance histogram) of a trace."""
    d, a = trace.drafted, trace.accepted
    mask = d > 0
    acc_d = a[mask]
    width = max(k, int(d.max()) if d.size else 0)
    per_pos = [int((acc_d > i).sum()) for i in range(width)]
    hist = np.bincount(acc_d, minlength=width + 1) if acc_d.size else np.zeros(width + 1, dtype=np.int64)
    return int(d.size), int(mask.sum()), int(d.sum()), int(a.sum()), per_pos, [int(x) for x in hist]


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
    #: the figures are the server's: logged token ids, and no bounds, or guaranteed bounds that coincide
    exact: bool = True
    #: suffix: tokens a live server would also learn past this output's end (draft tokens accepted
    #: past the cut / after the EOS, and the token after them) that the log does not hold (a bound)
    tail_unknown: int = 0
    #: suffix: such tokens of earlier requests missing from the replay's cache when this request was
    #: replayed; its figures are exact only when this is 0
    cache_unknown: int = 0
    #: [low, high] of drafts / draft_tokens / accepted_tokens where the replay cannot give the server's
    #: counts (``drafters.base.CountBounds``): a final step whose draft still matched at the output's end
    #: (the server counted what it accepted past it), suffix's tokens learned past the cuts. The figures
    #: above are the low end. None: the figures are the server's (with logged token ids)
    bounds: dict[str, list[int]] | None = None
    #: "guaranteed": the server's counts lie inside; "extremes": the replay's two extremes of what a
    #: suffix server learned past cuts its counters do not pin, no guarantee (None: no bounds)
    bounds_kind: BoundsKind | None = None
    #: hidden-state heads: the optimistic teacher-forced figure over the same output (None: other methods)
    teacher_forced: TeacherForcedCounts | None = None
    #: a greedy request whose logged output the teacher-forced target does not reproduce: the first output
    #: position it differs at (its figures are not exact: the log was not made by this target as loaded)
    target_mismatch: int | None = None

    @classmethod
    def from_trace(
        cls, trace: ReplayTrace, request_id: str, segment: str, method: str, k: int, output_tokens: int,
        exact: bool = True, greedy: bool = False,
    ) -> RequestAcceptance:
        steps, drafts, dtok, acc, per_pos, hist = _counts(trace, k)
        b = trace.bounds
        tf, tft = None, getattr(trace, "teacher_forced", None)
        if tft is not None:
            _, tf_drafts, tf_dtok, tf_acc, tf_pos, _ = _counts(tft, k)
            tf = TeacherForcedCounts(drafts=tf_drafts, draft_tokens=tf_dtok, accepted_tokens=tf_acc, per_position=tf_pos)
        mismatch = trace.target_mismatch if greedy else None  # only a greedy output must be the target's argmax
        return cls(
            request_id=request_id, segment=segment, method=method, k=k,
            output_tokens=output_tokens,
            steps=steps, drafts=drafts, draft_tokens=dtok, accepted_tokens=acc,
            per_position=per_pos, acceptance_histogram=hist,
            exact=exact and (b is None or b.exact) and mismatch is None, target_mismatch=mismatch,
            tail_unknown=int(getattr(trace, "tail_unknown", 0)), cache_unknown=int(getattr(trace, "cache_unknown", 0)),
            bounds=b.as_lists() if b is not None else None, bounds_kind=b.kind if b is not None else None,
            teacher_forced=tf,
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
        d = describe((x for x in values if not math.isnan(x)), (10.0, 50.0, 90.0), empty_reason)
        if d.n == 0:
            return cls(n=0, note=empty_reason)
        return cls(n=d.n, p10=d.pct(10.0), p50=d.pct(50.0), p90=d.pct(90.0), mean=d.mean)


class AcceptanceSummary(BaseModel):
    """Acceptance of one method at one k over a set of requests (a segment, or all)."""

    method: str
    k: int
    requests: int
    output_tokens: int
    decode_tokens: int = Field(description="output tokens after the first (which the prefill emits)")
    steps: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None = Field(description="token-weighted: accepted / drafted tokens")
    mean_acceptance_length: float | None = Field(description="1 + accepted / drafts")
    per_position_rate: list[float | None]
    tokens_per_step: float | None = Field(description="decode tokens (output after the prefill's first) / decode steps")
    draft_share: float | None = Field(description="share of steps that carried a draft")
    request_acceptance_rate: Spread = Field(description="per-request acceptance rate across requests")
    request_mean_acceptance_length: Spread
    acceptance_histogram: list[int]
    #: draft tokens per target step (feeds the cost model)
    mean_drafted_per_step: float | None = None
    exact: bool = True
    #: suffix: requests whose output ends where a live server would learn tokens no log holds, and
    #: how many such tokens at most; requests replayed while some were missing from the cache
    open_tail_requests: int = 0
    tail_unknown_tokens: int = 0
    requests_after_unknown: int = 0
    #: with bounds: the acceptance rate's [low, high] over the requests' bounds (low: least accepted
    #: over most drafted), the requests whose bounds differ, and their mean width in accepted tokens
    acceptance_rate_bounds: list[float] | None = None
    inexact_requests: int = 0
    #: greedy requests whose logged output the teacher-forced target does not reproduce (their rows are
    #: not exact; hidden-state methods only)
    target_mismatch_requests: int = 0
    mean_bound_width: float | None = None
    #: "guaranteed" when every request's bounds are, "extremes" when any are the replay's extremes (the
    #: interval then guarantees nothing); None without bounds
    bounds_kind: BoundsKind | None = None
    #: hidden-state heads: the teacher-forced figure (every draft position fed the target's hidden state,
    #: what training tools print) beside the replayed one above; OPTIMISTIC, not what a server accepts
    teacher_forced_acceptance_rate: float | None = Field(
        default=None, description="OPTIMISTIC teacher-forced accepted / drafted tokens (training tools' figure; not served)")
    teacher_forced_mean_acceptance_length: float | None = None
    teacher_forced_per_position_rate: list[float | None] | None = None
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, method: str, k: int, rows: Sequence[RequestAcceptance]) -> AcceptanceSummary:
        acc = AcceptanceAccumulator(method, k)
        for r in rows:
            acc.add(r)
        return acc.summary()


class AcceptanceAccumulator:
    """Running sums for one (segment, method, k): constant memory per request but two floats (for
    the spread across requests), so a multi-GB log replays in flat memory."""

    def __init__(self, method: str, k: int) -> None:
        self.method, self.k = method, k
        self.requests = self.output_tokens = self.decode_tokens = self.steps = self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = np.zeros(k, dtype=np.int64)
        self.hist = np.zeros(k + 1, dtype=np.int64)
        self.rates: list[float] = []
        self.mals: list[float] = []
        self.exact = True
        self.open_tails = self.tail_unknown = self.after_unknown = 0
        self.bounded = self.inexact = self.width = self.acc_lo = self.acc_hi = self.dt_lo = self.dt_hi = 0
        self.extremes = 0  # requests whose bounds are the replay's extremes, not guaranteed
        self.tf_rows = self.tf_drafts = self.tf_dtok = self.tf_acc = 0
        self.tf_pos = np.zeros(k, dtype=np.int64)
        self.target_mismatch = 0  # greedy requests the teacher-forced target does not reproduce
        self.first_mismatch: list[int] = []

    def add(self, r: RequestAcceptance) -> None:
        self.requests += 1
        self.output_tokens += r.output_tokens
        self.decode_tokens += max(0, r.output_tokens - 1)
        self.steps += r.steps
        self.drafts += r.drafts
        self.draft_tokens += r.draft_tokens
        self.accepted += r.accepted_tokens
        if len(r.per_position) > len(self.per_pos):
            self.per_pos = np.pad(self.per_pos, (0, len(r.per_position) - len(self.per_pos)))
        self.per_pos[: len(r.per_position)] += r.per_position
        if len(r.acceptance_histogram) > len(self.hist):
            self.hist = np.pad(self.hist, (0, len(r.acceptance_histogram) - len(self.hist)))
        self.hist[: len(r.acceptance_histogram)] += r.acceptance_histogram
        self.rates.append(r.acceptance_rate)
        self.mals.append(r.mean_acceptance_length)
        self.exact &= r.exact
        self.open_tails += r.tail_unknown > 0
        self.tail_unknown += r.tail_unknown
        self.after_unknown += r.cache_unknown > 0
        if r.target_mismatch is not None:
            self.target_mismatch += 1
            self.first_mismatch.append(r.target_mismatch)
        if r.bounds is None:  # the server's counts: both ends of the interval
            self.acc_lo, self.acc_hi = self.acc_lo + r.accepted_tokens, self.acc_hi + r.accepted_tokens
            self.dt_lo, self.dt_hi = self.dt_lo + r.draft_tokens, self.dt_hi + r.draft_tokens
        else:
            b = r.bounds
            self.bounded += 1
            self.extremes += r.bounds_kind == "extremes"
            self.inexact += b["drafts"][0] != b["drafts"][1] or b["draft_tokens"][0] != b["draft_tokens"][1] \
                or b["accepted_tokens"][0] != b["accepted_tokens"][1]
            self.width += b["accepted_tokens"][1] - b["accepted_tokens"][0]
            self.acc_lo, self.acc_hi = self.acc_lo + b["accepted_tokens"][0], self.acc_hi + b["accepted_tokens"][1]
            self.dt_lo, self.dt_hi = self.dt_lo + b["draft_tokens"][0], self.dt_hi + b["draft_tokens"][1]
        if r.teacher_forced is not None:
            tf = r.teacher_forced
            self.tf_rows += 1
            self.tf_drafts, self.tf_dtok, self.tf_acc = self.tf_drafts + tf.drafts, self.tf_dtok + tf.draft_tokens, \
                self.tf_acc + tf.accepted_tokens
            if len(tf.per_position) > len(self.tf_pos):
                self.tf_pos = np.pad(self.tf_pos, (0, len(tf.per_position) - len(self.tf_pos)))
            self.tf_pos[: len(tf.per_position)] += tf.per_position

    def _teacher_forced(self) -> dict[str, object]:
        """The summary's teacher-forced fields (all None when no row carried the figure)."""
        if not self.tf_rows:
            return {}
        d, dt = self.tf_drafts, self.tf_dtok
        return {"teacher_forced_acceptance_rate": self.tf_acc / dt if dt else None,
                "teacher_forced_mean_acceptance_length": 1 + self.tf_acc / d if d else None,
                "teacher_forced_per_position_rate": [int(p) / d if d else None for p in self.tf_pos]}

    def summary(self) -> AcceptanceSummary:
        drafts, dtok, acc, steps = self.drafts, self.draft_tokens, self.accepted, self.steps
        notes = [] if drafts else [en("simulate.n.no_drafts")]
        bounds = [self.acc_lo / self.dt_hi if self.dt_hi else 0.0, min(1.0, self.acc_hi / self.dt_lo)] \
            if self.bounded and self.dt_lo else None
        kind: BoundsKind | None = None if not self.bounded else "extremes" if self.extremes else "guaranteed"
        if bounds is not None:
            interval = {"lo": f"{100 * bounds[0]:.1f} %", "hi": f"{100 * bounds[1]:.1f} %", "total": self.requests}
        if self.open_tails and bounds is not None:  # what the unknown tokens can move, as an interval
            notes.append(en(f"simulate.n.open_tails_{kind}", n=self.open_tails, tail=self.tail_unknown, inexact=self.inexact,
                            width=f"{self.width / self.bounded:.2f}", extremes=self.extremes, **interval))
        elif bounds is not None and self.inexact:  # a stateless drafter's final steps past the output's end
            notes.append(en("simulate.n.final_bounds", n=self.inexact, **interval))
        elif self.open_tails:
            notes.append(en("simulate.n.open_tails", n=self.open_tails, total=self.requests, tail=self.tail_unknown,
                            after=self.after_unknown))
        if self.target_mismatch:
            notes.append(en("simulate.n.target_mismatch", n=self.target_mismatch, total=self.requests,
                            first=int(np.median(self.first_mismatch))))
        return AcceptanceSummary(
            method=self.method, k=self.k, requests=self.requests, output_tokens=self.output_tokens,
            decode_tokens=self.decode_tokens, steps=steps,
            drafts=drafts, draft_tokens=dtok, accepted_tokens=acc,
            acceptance_rate=acc / dtok if dtok else None,
            mean_acceptance_length=1 + acc / drafts if drafts else None,
            per_position_rate=[int(p) / drafts if drafts else None for p in self.per_pos],
            tokens_per_step=self.decode_tokens / steps if steps else None,
            draft_share=drafts / steps if steps else None,
            request_acceptance_rate=Spread.of(self.rates, "no request had a draft"),
            request_mean_acceptance_length=Spread.of(self.mals, "no request had a draft"),
            acceptance_histogram=[int(x) for x in self.hist],
            mean_drafted_per_step=dtok / steps if steps else None,
            exact=self.exact and self.requests > 0, open_tail_requests=self.open_tails, tail_unknown_tokens=self.tail_unknown,
            requests_after_unknown=self.after_unknown, notes=notes,
            acceptance_rate_bounds=bounds,
            inexact_requests=self.inexact, mean_bound_width=self.width / self.bounded if self.bounded else None,
            bounds_kind=kind, target_mismatch_requests=self.target_mismatch,
            **self._teacher_forced(),  # type: ignore[arg-type]
        )
