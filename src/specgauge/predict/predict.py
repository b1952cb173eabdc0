"""Predict what ``specgauge compare`` will measure for each grid cell, from a fitted profile and replay.

For each cell: the workload's logged outputs are replayed through the cell's drafter (exact per-step
drafted / accepted tokens), the closed-loop bench is simulated at the cell's concurrency with the
profile's law (``schedule``), and so is the baseline (no speculation) at the same concurrency. The
speedup is compare's statistic over the same requests, (Σ tok_c / Σ e2e_c) / (Σ tok_b / Σ e2e_b).
The band: the same two schedules timed with every bootstrap refit of the law (paired), 2.5–97.5 %.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.config import SCHEDULE_KEY, resolve_spec, schedule_k
from specgauge.i18n import en
from specgauge.predict.law import (
    KNEE,
    KNEE_PARAM,
    SHAPES,
    drafter_params,
    is_model_method,
    method_kind,
    param_vector,
    step_durations,
)
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.replay import ADAPTIVE_KEY, WorkloadReplay, prior_requests
from specgauge.offline.traces import PlannedRequest
from specgauge.predict.schedule import (
    Schedule,
    simulate_schedule,
    timeline,
)
from specgauge.predict.types import CellPrediction, CellSpec

StepFn = Callable[..., float]


def per_step_k(spec: dict[str, Any] | None) -> bool:
    """Whether a config's drafts per step are not one k's trace: a per-batch-size schedule, or verification
    lengths the server picks per request (``replay.ADAPTIVE_KEY``): simulated from every position's proposal."""
    return bool(spec and (spec.get(SCHEDULE_KEY) or spec.get(ADAPTIVE_KEY)))


def step_function(params: dict[str, float], shape: str, method: str | None, k: int) -> StepFn:
    """The law as a scalar function of one step (same formula as ``StepTable.features`` · params)."""
    g = params.get
    a, r, b, c, p, q, e, v, gs, gv, gd = (g(n, 0.0) for n in ("a", "r", "b", "c", "p", "q", "e", "v", "g", "gv", "gd"))
    m = method_kind(method)
    model = is_model_method(method)
    host = g(f"host[{m}]", 0.0) if m and not model else 0.0
    host_step = g(f"host_step[{m}]", 0.0) if m and not model else 0.0
    ds, dr, dp, df = ((g(f"draft_step[{m}]", 0.0), g(f"draft_req[{m}]", 0.0), g(f"draft_prefill[{m}]", 0.0),
                       g(f"draft_fixed[{m}]", 0.0)) if model else (0.0, 0.0, 0.0, 0.0))
    flat = shape == "flattened"
    b2, knee = g(KNEE_PARAM, 0.0), params.get(KNEE)
    hp, hp0 = ((g(f"host_par[{m}]", 0.0), g(f"host_par0[{m}]", 0.0)) if m and not model else (0.0, 0.0))

    def step(bs: int, dsum: int, dmax: int, ctx: int, ptok: int, preq: int, emit: int,
             sampled: int = 0, sampled_verify: int = 0, sampled_drafted: int = 0) -> float:
        nf = bs + dsum if flat else bs * (1 + dmax)
        t = a + r * bs + b * nf + c * ctx + p * ptok + q * preq + e * emit + host * bs + dp * ptok + (v if dsum > 0 else 0.0)
        t += gs * sampled + gv * sampled_verify + gd * sampled_drafted
        if knee is not None and b2:
            t += b2 * max(0.0, nf + ptok - knee)
        if bs and model and k:
            t += k * (ds + dr * bs) + df
        if bs:
            t += host_step
            t = max(t, hp * bs + hp0)  # a host proposer overlapping the device step (law.step_durations)
        return t

    return step


class _Side:
    """One simulated run: its schedule and per-request times for the point law and every sample."""

    def __init__(self, prof: StepCostProfile, reqs: Sequence[PlannedRequest], spec: dict[str, Any] | None,
                 concurrency: int, max_batch: int | None, shape: str | None = None,
                 params: dict[str, float] | None = None) -> None:
        method, k, _ = resolve_spec(spec)
        self.method, self.k, self.max_batch = method, k, max_batch
        self.shape = shape or prof.shape
        params = params or prof.params
        ell = float(params.get("ell", 0.0))
        sched = (spec or {}).get(SCHEDULE_KEY)
        # adaptive verification: the positions carry each step's verified length; k stays the cap
        k_of = (lambda b: schedule_k(sched, b)) if sched else (lambda b: k) if per_step_k(spec) else None
        laws: dict[int, StepFn] = {}

        def at_k(kk: int) -> StepFn:
            if kk not in laws:
                laws[kk] = step_function(params, self.shape, method, kk)
            return laws[kk]

        self.sched: Schedule = simulate_schedule(reqs, concurrency, at_k(k), ell, method, k, max_batch, k_of,
                                                 at_k if k_of is not None else None)
        names = list(prof.param_names or params)
        knee = params.get(KNEE)
        tab = self.sched.steps
        phi = tab.features(self.shape, names, knee)
        point = param_vector(params, names)
        self.durations = step_durations(tab, self.shape, names, point, knee, phi)
        self.send, self.ttft, self.e2e = timeline(self.sched, self.durations, ell)
        self.samples_e2e: np.ndarray | None = None
        if prof.bootstrap and params is prof.params:
            smp = prof.samples(names)
            ell_s = smp[names.index("ell")] if "ell" in names else np.zeros(smp.shape[1])
            _, _, self.samples_e2e = timeline(self.sched, step_durations(tab, self.shape, names, smp, knee, phi), ell_s)
        self.tokens = self.sched.output_tokens.astype(float)


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) * 1e3 if x.size else None


def predict_cells(
    profile: StepCostProfile,
    workload: Sequence[Path],
    cells: Sequence[CellSpec],
    *,
    tokenizer: Any = None,
    num_prompts: int | None = None,
    max_batch: int | None = None,
    replay: WorkloadReplay | None = None,
    warmup: int = 0,
    reused_server: bool = False,
    earlier_runs: Mapping[tuple[str, int], int] | None = None,
) -> list[CellPrediction]:
    """Predicted figures per cell (same order). ``num_prompts`` as bench's (None: every request once);
    ``max_batch``: the server's limit on running requests (None: no limit below the concurrency);
    ``replay``: a ``WorkloadReplay`` to share across calls (it caches traces per config).
    ``warmup``: requests bench sends first (its ``--num-warmups``); a stateful drafter learns them.
    ``reused_server``: the cells of one label run on one server, concurrencies ascending, as
    ``specgauge.sweep.run_grid`` does — suffix decoding's cache then remembers the earlier cells'
    requests (False: a fresh server per cell). ``earlier_runs[(label, concurrency)]`` overrides how
    many runs over the same requests that cell's server served before it."""
    replay = replay or WorkloadReplay(workload, tokenizer, num_prompts)
    refused = profile.provenance.get("refused_requests") or {}
    if replay.drop(frozenset(refused.get("ids") or ())):
        # compare pairs only requests that succeeded on both sides; these never do
        replay.notes.append(en("predict.n.refused", n=len(refused["ids"]), why=refused.get("why", "failed")))
    mb = max_batch
    base_reqs = replay.planned(None)
    baselines: dict[int, _Side] = {}
    order: dict[str, list[int]] = {}
    for cell in cells:
        order.setdefault(cell.label, []).append(cell.concurrency)
    out: list[CellPrediction] = []
    for cell in cells:
        c = cell.concurrency
        if c not in baselines:
            baselines[c] = _Side(profile, base_reqs, None, c, mb)
        base = baselines[c]
        earlier = sorted(set(order[cell.label])).index(c) if reused_server else 0
        earlier = (earlier_runs or {}).get((cell.label, c), earlier)
        prior = prior_requests(len(replay.requests), warmup, earlier)
        reqs = replay.planned(cell.speculative_config, prior, bool(profile.provenance.get("sampled_outputs_repeat")))
        if per_step_k(cell.speculative_config):  # k per step: every position's proposal
            reqs = [replace(r, positions=pt) for r, pt in zip(reqs, replay.positions(cell.speculative_config, prior), strict=True)]
        side = base if not cell.speculative_config else _Side(profile, reqs, cell.speculative_config, c, mb)
        out.append(_prediction(profile, cell, side, base, reqs, base_reqs, replay.notes))
    return out


def _prediction(prof: StepCostProfile, cell: CellSpec, side: _Side, base: _Side, reqs: Sequence[PlannedRequest],
                base_reqs: Sequence[PlannedRequest], replay_notes: list[str]) -> CellPrediction:
    notes = list(replay_notes)
    method, k = side.method, side.k
    for pname in drafter_params(method)[:1]:  # its main term (a profile from before host_step lacks only that)
        if pname not in prof.params:
            notes.append(en("predict.n.uncal_drafter", method=method, pname=pname))
            break
    tok = side.tokens
    speedup = float((tok.sum() / side.e2e.sum()) / (base.tokens.sum() / base.e2e.sum()))
    low = high = None
    if side.samples_e2e is not None and base.samples_e2e is not None:
        s = (tok.sum() / side.samples_e2e.sum(axis=0)) / (base.tokens.sum() / base.samples_e2e.sum(axis=0))
        low, high = (float(x) for x in np.percentile(s, [2.5, 97.5]))
    steps = side.sched.steps
    dec = steps.batch > 0
    nf = steps.n_forward(side.shape)[dec].astype(float)
    beyond, pess, what = _beyond(prof, side)
    extrapolated = beyond > BEYOND_SHARE
    unidentified: list[str] = []
    base_rate = base.tokens.sum() / base.e2e.sum()
    if beyond > 0:
        notes.append(en("predict.n.extrapolated" if extrapolated else "predict.n.slightly", pct=f"{100 * beyond:.0f}", what=what))
    if extrapolated and pess is not None:
        _, _, e_p = timeline(side.sched, pess, float(prof.params.get("ell", 0.0)))
        sp = float((tok.sum() / e_p.sum()) / base_rate)
        low = min(low if low is not None else speedup, sp)
        high = high if high is not None else speedup
        if sp < speedup * (1 - UNIDENTIFIED_SHIFT):
            unidentified.append(KNEE)
    hidden = _unseen_host(prof, side, base_rate)
    if hidden is not None:
        m, h, sp = hidden
        if sp < speedup * (1 - UNIDENTIFIED_SHIFT):
            unidentified.append(f"host_par[{m}]")
            low = min(low if low is not None else speedup, sp)
            high = high if high is not None else speedup
            notes.append(en("predict.n.host_unseen", method=m, us=f"{h * 1e6:.3g}", b=int(side.sched.steps.batch.max()),
                            lo=f"{sp:.3f}", c=cell.concurrency))
    if KNEE in unidentified:
        notes.append(en("predict.n.knee_unseen", lo=f"{low:.3f}", c=cell.concurrency))
    if extrapolated:
        notes.append(en("predict.n.band_other"))
        for other, alt in prof.alternatives.items():
            if other in SHAPES and alt.get("params"):
                o_side = _Side(prof, reqs, cell.speculative_config, cell.concurrency, side.max_batch, shape=other,
                               params=alt["params"])
                o_base = _Side(prof, base_reqs, None, cell.concurrency, side.max_batch, shape=other, params=alt["params"])
                o = float((o_side.tokens.sum() / o_side.e2e.sum()) / (o_base.tokens.sum() / o_base.e2e.sum()))
                low = min(low if low is not None else speedup, o, speedup)
                high = max(high if high is not None else speedup, o, speedup)
    multi = side.tokens > 1
    tpot = (side.e2e[multi] - side.ttft[multi]) / (side.tokens[multi] - 1)
    span = float((side.send + side.e2e).max(initial=0.0))  # first send (t = 0) to the last response's end
    if steps.k_steps is not None:  # k changed per step: the simulated steps, not one k's trace (no per-draft count)
        dr, ac, drafts = int(steps.drafted_sum.sum()), int((steps.emitted - steps.batch).clip(min=0).sum()), 0  # type: ignore[operator]
    else:
        dr = sum(int(r.drafted.sum()) for r in reqs) if method else 0
        ac = sum(int(r.accepted.sum()) for r in reqs) if method else 0
        drafts = sum(int((r.drafted > 0).sum()) for r in reqs) if method else 0
    return CellPrediction(
        label=cell.label, method=method, k=k, concurrency=cell.concurrency,
        speedup=speedup, speedup_low=low, speedup_high=high,
        tpot_ms=float(tpot.mean()) * 1e3 if tpot.size else None,
        e2e_p50_ms=_pct(side.e2e, 50), e2e_p95_ms=_pct(side.e2e, 95), ttft_p95_ms=_pct(side.ttft, 95),
        throughput_tok_s=float(side.tokens.sum() / span) if span > 0 else None,
        acceptance_rate=ac / dr if dr else None, mean_acceptance_length=1 + ac / drafts if drafts else None,
        tokens_per_forward=float(nf.mean()) if nf.size else None, extrapolated=extrapolated, beyond_range=beyond,
        unidentified=unidentified, notes=notes,
    )


#: an unidentified term counts for a cell when its worst case moves the speedup by more than this share
UNIDENTIFIED_SHIFT = 0.02


def _unseen_host(prof: StepCostProfile, side: _Side, base_rate: float) -> tuple[str, float, float] | None:
    """A model-free method whose host proposer the calibration never saw set a step: (method, the
    largest cost per request it could have kept hidden there, the speedup if it costs that much — every
    step past the calibrated batch at least ``h · B``). None when the fit found the proposer, the method
    has none, or no predicted step lies past the batch it was calibrated at."""
    m = method_kind(side.method)
    hb = prof.measured.hidden_host_bound.get(m or "")
    if hb is None or m is None or f"host_par[{m}]" in prof.params:
        return None
    b = side.sched.steps.batch.astype(float)
    host = np.where(b > hb.max_batch, hb.per_request * b, 0.0)  # up to its calibrated batch, the data saw it hidden
    if not (host > side.durations).any():
        return None
    _, _, e = timeline(side.sched, np.maximum(side.durations, host), float(prof.params.get("ell", 0.0)))
    return m, hb.per_request, float((side.tokens.sum() / e.sum()) / base_rate)


#: a cell whose predicted time lies past the measured range by more than this share is "extrapolated"
BEYOND_SHARE = 0.05


def _beyond(prof: StepCostProfile, side: _Side) -> tuple[float, np.ndarray | None, str]:
    """Share of the side's predicted step time in steps outside the calibration's range (tokens through
    the forward, batch), the steps' pessimistic durations, and what was exceeded by how much."""
    m = prof.measured
    tab = side.sched.steps
    dur = np.asarray(side.durations, dtype=float)
    if not len(tab) or dur.sum() <= 0:
        return 0.0, None, ""
    if m.max_forward_tokens > 0:
        n, n_max, unit = tab.n_forward(side.shape) + tab.prefill_tokens, m.max_forward_tokens, "predict.w.tokens"
    else:
        n, n_max, unit = tab.n_forward(side.shape).astype(float), m.max_tokens_per_forward, "predict.w.decode_tokens"
    n = np.where(tab.batch > 0, n, 0).astype(float)  # idle prefill-only steps: the TTFT rows measured them
    past_n = (n > n_max + 1e-9) if n_max > 0 else np.zeros(len(tab), dtype=bool)
    past_b = (tab.batch > m.max_batch + 1e-9) if m.max_batch > 0 else np.zeros(len(tab), dtype=bool)
    out = past_n | past_b
    share = float(dur[out].sum() / dur.sum())
    parts = []
    if past_n.any():
        parts.append(en(unit, n=f"{n.max():.0f}", m=f"{n_max:.0f}", x=f"{n.max() / n_max:.1f}×"))
    if past_b.any():
        parts.append(en("predict.w.batch", b=int(tab.batch.max()), mb=f"{m.max_batch:.0f}"))
    pess = dur * np.where(past_n, n / max(n_max, 1.0), 1.0) if past_n.any() else None
    return share, pess, "; ".join(parts)
