"""One request's step timeline from its chunk arrivals, and the drafted tokens of each of its steps.

Every running request gets exactly one streamed chunk per engine step (vLLM and the embedded server
both stream each step's tokens as one chunk), so a request's chunk arrival times are the ends of the
steps it ran in, as seen by the client: for request i with chunks at τ_0 (its prefill step) … τ_S, its
decode time τ_S − τ_0 is the sum of the durations of its S decode steps (the server never idles while
i is running; the constant network delay cancels). ``rows`` turns these timelines into the law's rows.

Drafted tokens per step come from the server's ``per_step_drafted`` when it covers every step, else
from the replayed trace when that trace reproduces the request's live counts and chunks, else from the
drafter replayed on the request's own live tokens (a stateless drafter proposes from the context alone,
and with one-hot drafts a rejected draft token never comes out, so the proposals along the live output
are the live ones — sampled requests included), else the request's mean (labelled). Which requests
were sampled (T > 0) comes from the workload; their per-step counts feed the law's ``g`` terms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgauge.offline.traces import PlannedRequest, counts_agree
from specgauge.predict.runs import RunData
from specgauge.records import RequestRecord

#: chunks of one stream closer than this did not come from separate engine steps (no engine steps in
#: 0.1 ms): a request whose median gap is below it was delivered in a burst
BURST_GAP_S = 1e-4


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


def _spec_dict(rec: RequestRecord) -> dict[str, Any]:
    m = rec.extra.get("metrics") if isinstance(rec.extra, dict) else None
    sd = m.get("speculative_decoding") if isinstance(m, dict) else None
    return sd if isinstance(sd, dict) else {}


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
        return RequestObs(rec=rec, times=times, grid=grid, grid_tokens=gtok, prompt=rec.prompt_tokens or 0, drafted=drafted,
                          drafted_exact=exact, merged=merged, first_merged=first_merged)

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


def tally(counts: dict[str, int], why: str) -> None:
    counts[why] = counts.get(why, 0) + 1
