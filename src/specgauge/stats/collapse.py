"""Acceptance collapse: the server's live acceptance per draft position and per prompt-length band
against the replay of the same requests' own outputs (``stats.replay_check`` builds the rows).

By the replay theorem a correct server accepts what its outputs replay to; a numerically different
kernel moves that by a few percent (vLLM's own acceptance test allows 5 %). A server far below it —
EAGLE-3 at 0.05 on GSM8K with one ROCm attention backend (vllm #31625), acceptance lost past a long
context — has a broken drafter, verifier, kernel or config: the workload is not what pays nothing.

Terms (vLLM's): per-position acceptance[i] = drafts whose token i was accepted / drafts; a band's
acceptance = accepted / drafted tokens of the requests whose prompt length falls in it. Only requests
with the server's own per-request counts enter (``SpecCounts``; vLLM ``--per-request-spec-decode-metrics``).

*Collapse*: live acceptance below ``ratio`` × the replay's (default 0.5), overall, in a band or at a
position, where the replay drafted at least ``min_draft_tokens`` there (``min_drafts`` drafts for a
position). The first such finding names where: overall, past a prompt length, from a position.

Pure: rows in, an ``AcceptanceProfile`` out; English text from the catalogue (``en``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from specgauge.i18n import en
from specgauge.records import SpecCounts

#: prompt-length band edges (tokens): 0–255, 256–511, …, 64K–128K, 128K+
BAND_EDGES = (0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


class CollapseCriteria(BaseModel):
    ratio: float = Field(default=0.5, gt=0, le=1, description="live below ratio x replay is a collapse")
    min_draft_tokens: int = Field(default=100, ge=1, description="replayed draft tokens a band (or the run) needs to be judged")
    min_drafts: int = Field(default=30, ge=1, description="replayed drafts a position needs to be judged")


class BandRow(BaseModel):
    lo: int  #: prompt tokens, inclusive
    hi: int | None  #: exclusive; None: no upper end
    requests: int = 0
    server_draft_tokens: int = 0
    server_accepted: int = 0
    replay_draft_tokens: int = 0
    replay_accepted: int = 0

    @property
    def server_rate(self) -> float | None:
        return self.server_accepted / self.server_draft_tokens if self.server_draft_tokens else None

    @property
    def replay_rate(self) -> float | None:
        return self.replay_accepted / self.replay_draft_tokens if self.replay_draft_tokens else None

    @property
    def label(self) -> str:
        """``[lo, hi)`` in prompt tokens: ``0–256``, ``1K–2K``, ``128K+``."""
        return f"{_k(self.lo)}+" if self.hi is None else f"{_k(self.lo)}–{_k(self.hi)}"


class PositionRow(BaseModel):
    position: int
    server: float | None = None  #: drafts whose token i the server accepted / its drafts
    replay: float | None = None


class Collapse(BaseModel):
    where: str  #: "overall", "band", "position"
    server_rate: float
    replay_rate: float
    band: str | None = None  #: the first band that collapsed (prompt tokens)
    position: int | None = None
    summary: str  #: one sentence naming the problem with its figures (English, stored)


class AcceptanceProfile(BaseModel):
    """Live against replayed acceptance of the requests that have the server's own counts."""

    requests: int = 0
    basis: str = "prompt tokens"  #: what the bands group by
    server_rate: float | None = None
    replay_rate: float | None = None
    positions: list[PositionRow] = Field(default_factory=list)
    bands: list[BandRow] = Field(default_factory=list)  #: non-empty bands, shortest prompts first
    collapse: Collapse | None = None


@dataclass(frozen=True)
class Row:
    """One request: its prompt length, the server's counts, the replay's steps."""

    prompt_tokens: int
    server: SpecCounts
    drafted: np.ndarray  # (steps,) the replay's draft tokens per decode step
    accepted: np.ndarray  # (steps,)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _band(n: int) -> int:
    i = 0
    while i + 1 < len(BAND_EDGES) and n >= BAND_EDGES[i + 1]:
        i += 1
    return i


def _rate(a: int, d: int) -> float | None:
    return a / d if d else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def profile(rows: Sequence[Row], crit: CollapseCriteria | None = None, k: int | None = None) -> AcceptanceProfile:
    crit = crit or CollapseCriteria()
    out = AcceptanceProfile(requests=len(rows))
    if not rows:
        return out
    bands: dict[int, BandRow] = {}
    s_dt = s_acc = r_dt = r_acc = 0
    kk = max([k or 0] + [len(r.server.accepted_per_pos or []) for r in rows] + [int(r.drafted.max(initial=0)) for r in rows])
    s_pos, r_pos = np.zeros(kk), np.zeros(kk)
    s_drafts = r_drafts = 0
    pos_known = all(r.server.accepted_per_pos is not None for r in rows)
    for r in rows:
        i = _band(r.prompt_tokens)
        b = bands.setdefault(i, BandRow(lo=BAND_EDGES[i], hi=BAND_EDGES[i + 1] if i + 1 < len(BAND_EDGES) else None))
        sd, sa = int(r.server.draft_tokens or 0), int(r.server.accepted_tokens or 0)
        steps = r.drafted > 0
        rd, ra = int(r.drafted.sum()), int(r.accepted.sum())
        b.requests += 1
        b.server_draft_tokens += sd
        b.server_accepted += sa
        b.replay_draft_tokens += rd
        b.replay_accepted += ra
        s_dt, s_acc, r_dt, r_acc = s_dt + sd, s_acc + sa, r_dt + rd, r_acc + ra
        s_drafts += int(r.server.drafts or 0)
        r_drafts += int(steps.sum())
        for j, v in enumerate(r.server.accepted_per_pos or []):
            s_pos[j] += v
        acc = r.accepted[steps]
        for j in range(kk):
            r_pos[j] += int((acc > j).sum())
    out.server_rate, out.replay_rate = _rate(s_acc, s_dt), _rate(r_acc, r_dt)
    out.bands = [bands[i] for i in sorted(bands)]
    out.positions = [PositionRow(position=j, server=s_pos[j] / s_drafts if pos_known and s_drafts else None,
                                 replay=r_pos[j] / r_drafts if r_drafts else None) for j in range(kk)]
    out.collapse = _collapse(out, r_dt, r_drafts, r_pos, crit)
    return out


def _low(server: float | None, replay: float | None, crit: CollapseCriteria) -> bool:
    return server is not None and replay is not None and replay > 0 and server < crit.ratio * replay


def _collapse(p: AcceptanceProfile, r_dt: int, r_drafts: int, r_pos: np.ndarray, crit: CollapseCriteria) -> Collapse | None:
    """The collapse found, named where it is: from a prompt length on when shorter prompts are fine (the
    first collapsed band), from a draft position on when earlier positions are fine, else overall."""
    judged = [b for b in p.bands if b.replay_draft_tokens >= crit.min_draft_tokens]
    low = [b for b in judged if _low(b.server_rate, b.replay_rate, crit)]
    if low and len(low) < len(judged):
        b = low[0]
        assert b.server_rate is not None and b.replay_rate is not None
        return Collapse(where="band", server_rate=b.server_rate, replay_rate=b.replay_rate, band=b.label,
                        summary=en("collapse.band", band=b.label, srv=_pct(b.server_rate), rep=_pct(b.replay_rate), n=b.requests))
    rows = [r for r in p.positions if r_drafts >= crit.min_drafts and r_pos[r.position] > 0]
    low_pos = [r for r in rows if _low(r.server, r.replay, crit)]
    if low_pos and len(low_pos) < len(rows):
        row = low_pos[0]
        assert row.server is not None and row.replay is not None
        return Collapse(where="position", server_rate=row.server, replay_rate=row.replay, position=row.position,
                        summary=en("collapse.position", pos=row.position, srv=_pct(row.server), rep=_pct(row.replay)))
    if r_dt >= crit.min_draft_tokens and _low(p.server_rate, p.replay_rate, crit):
        assert p.server_rate is not None and p.replay_rate is not None
        return Collapse(where="overall", server_rate=p.server_rate, replay_rate=p.replay_rate,
                        summary=en("collapse.overall", srv=_pct(p.server_rate), rep=_pct(p.replay_rate), n=p.requests))
    return None
