"""Stalls: silences inside a streamed response far longer than the run's time per output token, and
what ended them (a closing brace, the end of a tool call — vllm #49002 stalled 5–12 s at ``}``).

Terms:
- *gap*: the time between two consecutive output chunks of one response (``chunks[i].t -
  chunks[i-1].t``); the wait for the first chunk (TTFT) is no gap.
- *reference TPOT*: the median TPOT of the reference run's successful requests (bench: the run
  itself; compare: the baseline, for both sides; the canary: the window's baseline).
- *stall threshold* = max(``factor`` × reference TPOT, ``min_gap_ms``). A speculative step that hands
  out k + 1 tokens at once makes gaps of a few TPOTs; a stall is far beyond that. The floor keeps
  gaps no reader notices out on very fast servers.
- only responses whose chunks were each observed count (records with ``gap_ends``: specgauge's load
  generator and canary proxy write them; another tool's result keeps the first and last token's times
  only, and the silence between them is no stall).
- a gap counts less any time the load generator itself was held up meanwhile (bench records its own
  event loop's stalls: ``SessionRecord.client_loop["held"]``): a CPU-starved client reads every
  stream late at once, which is no stall of the server.
- a *stalled request*: its longest gap is above the threshold. Its stalls are its recorded gap ends
  (``RequestRecord.gap_ends``: the few longest gaps, with the text that ended each) above the threshold.

Boundary: records in, pydantic data out; no printing. Baseline against candidate, the share of
stalled requests is compared with Fisher's exact test (``stats.rates``).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from specgauge.records import RequestRecord
from specgauge.stats.latency import tpot
from specgauge.stats.rates import RateComparison, compare_rates

MAX_ROWS = 10  #: stalls kept in a table (the longest)


class StallCriteria(BaseModel):
    factor: float = Field(default=10.0, ge=1, description="a gap above factor × the reference TPOT is a stall")
    min_gap_ms: float = Field(default=250.0, ge=0, description="and above this many milliseconds")

    def threshold_s(self, tpot_ref_s: float | None) -> float:
        base = self.factor * tpot_ref_s if tpot_ref_s is not None and math.isfinite(tpot_ref_s) else 0.0
        return max(base, self.min_gap_ms / 1000.0)


class Stall(BaseModel):
    """One gap above the threshold: which request, how long, and the text of the chunk that ended it."""

    id: str
    segment: str
    chunk: int  #: index of the chunk that ended it
    gap_ms: float
    times_tpot: float | None = None  #: gap / reference TPOT
    ended_by: str | None = None  #: None: the record kept no text for this gap


class StallSummary(BaseModel):
    """``summary.json``'s ``specgauge.stalls`` (and per segment): one run against its own TPOT."""

    requests: int  #: successful requests with two chunks or more
    stalled: int
    threshold_ms: float
    tpot_ref_ms: float | None = None
    longest_gap_p50_ms: float | None = None
    longest_gap_p95_ms: float | None = None
    longest_gap_max_ms: float | None = None
    stalls: list[Stall] = Field(default_factory=list)  #: the longest, up to MAX_ROWS


class StallComparison(BaseModel):
    """Stalled requests, baseline against candidate, both against the baseline's TPOT."""

    threshold_ms: float
    tpot_ref_ms: float | None = None
    rate: RateComparison
    baseline_longest_p95_ms: float | None = None
    candidate_longest_p95_ms: float | None = None
    stalls: list[Stall] = Field(default_factory=list)  #: the candidate's longest


class Held:
    """When the load generator itself was held up: sorted ``(epoch start, seconds)`` intervals."""

    def __init__(self, intervals: Sequence[Sequence[float]] = ()) -> None:
        self.iv = sorted((float(a), float(a) + float(d)) for a, d in intervals if d > 0)
        self.starts = [a for a, _ in self.iv]

    @classmethod
    def of_sessions(cls, sessions: Sequence[Any]) -> Held:
        """From bench sessions (``SessionRecord``): their ``client_loop["held"]``."""
        return cls([x for s in sessions for x in ((getattr(s, "client_loop", None) or {}).get("held") or [])])

    def overlap(self, a: float, b: float) -> float:
        """Seconds of [a, b] the client was held up."""
        out = 0.0
        i = max(0, bisect_right(self.starts, a) - 1)
        while i < len(self.iv) and self.iv[i][0] < b:
            lo, hi = max(a, self.iv[i][0]), min(b, self.iv[i][1])
            out += max(0.0, hi - lo)
            i += 1
        return out

    def __bool__(self) -> bool:
        return bool(self.iv)


NO_HOLD = Held()


def _gaps(rec: RequestRecord, held: Held) -> list[float]:
    """Per chunk i ≥ 1: the gap that ended at it, less the time the client was held up meanwhile."""
    c, t0 = rec.chunks, rec.started_at
    if not held:
        return [b.t - a.t for a, b in zip(c, c[1:])]
    return [b.t - a.t - held.overlap(t0 + a.t, t0 + b.t) for a, b in zip(c, c[1:])]


def longest_gap(rec: RequestRecord, held: Held = NO_HOLD) -> float | None:
    """The longest gap between two output chunks (s; less the client's own hold-ups); None with fewer
    than two chunks, on failure, and for a record whose chunks the load generator did not observe one
    by one (no ``gap_ends``: another tool's result, which keeps only the first and last token's times,
    or a record from before them)."""
    if not rec.ok or len(rec.chunks) < 2 or rec.gap_ends is None:
        return None
    return max(_gaps(rec, held))


def reference_tpot(records: Sequence[RequestRecord]) -> float | None:
    vals = [v for r in records if (v := tpot(r)) is not None and v > 0]
    return float(np.median(vals)) if vals else None


def stalls_of(rec: RequestRecord, threshold_s: float, tpot_ref_s: float | None, held: Held = NO_HOLD) -> list[Stall]:
    """The request's gaps above the threshold that its record kept, longest first (one without its
    ending text when the record kept none)."""
    gap = longest_gap(rec, held)
    if gap is None or gap <= threshold_s:
        return []
    gaps = _gaps(rec, held)  # gaps[i - 1] ended at chunk i

    def stall(i: int, g: float, text: str | None) -> Stall:
        return Stall(id=rec.id, segment=rec.segment, chunk=i, gap_ms=round(g * 1000, 3), ended_by=text,
                     times_tpot=round(g / tpot_ref_s, 1) if tpot_ref_s else None)

    out = [stall(e.i, g, e.text) for e in rec.gap_ends or [] if 0 < e.i <= len(gaps) and (g := gaps[e.i - 1]) > threshold_s]
    if not out:  # the longest once the client's hold-ups are taken out is not among the recorded ones
        i = max(range(1, len(gaps) + 1), key=lambda j: gaps[j - 1])
        out = [stall(i, gap, None)]
    return sorted(out, key=lambda s: -s.gap_ms)


def _p(vals: list[float], q: float) -> float | None:
    return round(float(np.percentile(vals, q)) * 1000, 3) if vals else None


def summarize_stalls(records: Sequence[RequestRecord], crit: StallCriteria | None = None,
                     tpot_ref_s: float | None = None, held: Held = NO_HOLD) -> StallSummary | None:
    """One run's stalls against ``tpot_ref_s`` (default: its own median TPOT); None when no request
    streamed two chunks. ``held``: when the run's load generator was held up."""
    crit = crit or StallCriteria()
    ref = reference_tpot(records) if tpot_ref_s is None else tpot_ref_s
    thr = crit.threshold_s(ref)
    gaps = [(r, g) for r in records if (g := longest_gap(r, held)) is not None]
    if not gaps:
        return None
    rows = [s for r, g in gaps if g > thr for s in stalls_of(r, thr, ref, held)]
    longest = [g for _, g in gaps]
    return StallSummary(requests=len(gaps), stalled=sum(g > thr for _, g in gaps), threshold_ms=round(thr * 1000, 3),
                        tpot_ref_ms=None if ref is None else round(ref * 1000, 3), longest_gap_p50_ms=_p(longest, 50),
                        longest_gap_p95_ms=_p(longest, 95), longest_gap_max_ms=_p(longest, 100),
                        stalls=sorted(rows, key=lambda s: -s.gap_ms)[:MAX_ROWS])


def compare_stalls(baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord], threshold_s: float,
                   tpot_ref_s: float | None, held: tuple[Held, Held] = (NO_HOLD, NO_HOLD)) -> StallComparison | None:
    """Stalled requests on both sides against one threshold; None when neither streamed two chunks.
    ``held``: when each run's load generator was held up (baseline, candidate)."""
    gb = [g for r in baseline if (g := longest_gap(r, held[0])) is not None]
    cc = [(r, g) for r in candidate if (g := longest_gap(r, held[1])) is not None]
    if not gb and not cc:
        return None
    rows = sorted((s for r, g in cc if g > threshold_s for s in stalls_of(r, threshold_s, tpot_ref_s, held[1])),
                  key=lambda s: -s.gap_ms)
    ex = [f"{s.id}: {s.gap_ms:.0f} ms" + (f" → {s.ended_by!r}" if s.ended_by is not None else "") for s in rows[:3]]
    rate = compare_rates(sum(g > threshold_s for g in gb), len(gb), sum(g > threshold_s for _, g in cc), len(cc), ex)
    return StallComparison(threshold_ms=round(threshold_s * 1000, 3), tpot_ref_ms=None if tpot_ref_s is None else round(tpot_ref_s * 1000, 3),
                           rate=rate, baseline_longest_p95_ms=_p(gb, 95), candidate_longest_p95_ms=_p([g for _, g in cc], 95),
                           stalls=rows[:MAX_ROWS])
