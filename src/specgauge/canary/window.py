"""One evaluation window: compact samples per side, the greedy output pairs completed in it, the
candidate's counters at its start. Holds no request bodies or full records (those go to disk as
they finish), so a long window at high traffic stays small: a few floats per request. ``Pairing``
keeps the text of greedy outputs only until their other half arrives.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from specgauge.canary.observe import Role, Side
from specgauge.loadgen.metrics_scrape import Snapshot
from specgauge.records import RequestRecord, SpecCounts
from specgauge.stats.latency import tpot
from specgauge.stats.stalls import longest_gap

MAX_PENDING_PAIRS = 10_000


@dataclass(slots=True)
class Sample:
    """What the judge needs of one request."""

    role: Role
    ok: bool
    failure: str | None
    ttft: float | None
    tpot: float | None
    e2e: float | None
    spec: SpecCounts | None = None
    invalid: bool | None = None  #: its structured output broke the request's schema (None: not judged)
    error: str | None = None  #: what broke, when ``invalid``
    longest_gap: float | None = None  #: the longest gap between two output chunks (s), ``stats.stalls``
    gap_text: str | None = None  #: the text of the chunk that ended it

    @classmethod
    def of(cls, rec: RequestRecord, role: Role) -> Sample:
        oc = rec.output_check if rec.ok else None
        invalid = None if oc is None or oc.valid is None else not oc.valid
        return cls(role=role, ok=rec.ok, failure=rec.failure.value if rec.failure is not None else None,
                   ttft=rec.ttft_s if rec.ok and rec.chunks else None, tpot=tpot(rec), e2e=rec.e2e_s if rec.ok else None,
                   spec=rec.spec, invalid=invalid, error=oc.error if invalid else None, longest_gap=longest_gap(rec),
                   gap_text=rec.gap_ends[0].text if rec.gap_ends else None)


@dataclass(slots=True)
class PairResult:
    key: str
    kind: str  #: "shadow" (the same request mirrored) or "repeat" (equal greedy bodies on both sides)
    match: bool


class Pairing:
    """Greedy outputs waiting for their other half, across windows (a mirrored copy often finishes
    after the window its original was judged in). At most ``MAX_PENDING_PAIRS`` keys, oldest dropped."""

    def __init__(self) -> None:
        self._pending: OrderedDict[str, dict[Side, str]] = OrderedDict()

    def add(self, side: Side, key: str, text: str) -> PairResult | None:
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = {}
            if len(self._pending) > MAX_PENDING_PAIRS:
                self._pending.popitem(last=False)
        other = Side.candidate if side is Side.baseline else Side.baseline
        if key.startswith("id:"):  # a mirrored request: one pair, then forget it
            if other in entry:
                del self._pending[key]
                return PairResult(key, "shadow", entry[other] == text)
            entry[side] = text
            return None
        entry.setdefault(side, text)  # equal greedy bodies: each new output is compared with the other side's first
        if other in entry:
            return PairResult(key, "repeat", entry[other] == text)
        return None


@dataclass
class Window:
    start: float = field(default_factory=time.time)  #: wall clock
    start_mono: float = field(default_factory=time.monotonic)
    weight: float = 0.0
    snapshot: Snapshot | None = None  #: the candidate's /metrics at the start
    samples: dict[Side, list[Sample]] = field(default_factory=lambda: {Side.baseline: [], Side.candidate: []})
    retried_on_baseline: int = 0
    client_gone: int = 0
    client_errors: int = 0
    pairs: list[PairResult] = field(default_factory=list)
    #: the candidate's successful records with token ids, outputs' text and chunks dropped (the replay guardrail)
    replay: list[RequestRecord] = field(default_factory=list)

    def add(self, side: Side, role: Role, rec: RequestRecord, *, counted: bool, client_gone: bool = False,
            client_error: bool = False) -> None:
        """Take one finished request. ``counted``: it enters the judge (a client that went away or
        a request both sides refused does not)."""
        if client_gone:
            self.client_gone += 1
        if client_error:
            self.client_errors += 1
        if role is Role.live and side is Side.candidate and rec.extra.get("canary", {}).get("retried_on_baseline"):
            self.retried_on_baseline += 1
        if counted:
            self.samples[side].append(Sample.of(rec, role))

    def age(self) -> float:
        return time.monotonic() - self.start_mono
