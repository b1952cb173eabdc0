"""A deterministic discrete-event simulation of ``specgauge bench`` against a continuous-batching server.

The client keeps ``concurrency`` requests in flight and sends them in workload order (as bench's
runner does: the next one goes out when one finishes). A request reaches the server ``ell / 2``
after it is sent, and each step's outputs reach the client ``ell / 2`` after the step ends
(``ell``: the measured HTTP round trip). The server (vLLM v1 and the embedded engine alike) runs
steps back to back while it has work: a step prefills the requests that arrived before it started
(up to ``max_batch`` running) and advances every other running request by one decode step of its
replay trace — ``accepted + 1`` tokens, the drafted count telling the verification forward's size.
An idle server starts a step as soon as a request arrives.

``simulate_schedule`` runs it once with one law to fix who ran in which step (the schedule hardly
depends on the law's exact values); ``timeline`` then turns any number of step-duration vectors (a
bootstrap of the law) into per-request TTFT and E2E on that schedule, vectorised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from specgauge.predict.law import StepTable


@dataclass
class PlannedRequest:
    """One request of the run: its prompt size and the decode steps replay says it takes."""

    id: str
    prompt_tokens: int
    output_tokens: int  #: L; output token 0 comes from the prefill step
    drafted: np.ndarray  #: (decode steps,) tokens proposed at each decode step
    accepted: np.ndarray  #: (decode steps,) of which the target kept
    greedy: bool = True  #: temperature 0 (the live output equals the logged one)


@dataclass
class Schedule:
    steps: StepTable
    #: request whose arrival woke an idle server for this step (-1: the server was busy)
    wake: np.ndarray  # (S,)
    send_after: np.ndarray  # (N,) step after whose output the client sent it (-1: at t = 0)
    first_step: np.ndarray  # (N,) the step that prefilled it (its first token)
    last_step: np.ndarray  # (N,) the step that emitted its last token
    output_tokens: np.ndarray  # (N,)
    ids: list[str]


def simulate_schedule(
    reqs: Sequence[PlannedRequest], concurrency: int, step_seconds: Callable[..., float],
    ell: float, method: str | None = None, k: int = 0, max_batch: int | None = None,
) -> Schedule:
    """Run the closed loop once. ``step_seconds(B, drafted_sum, drafted_max, context, prefill_tokens,
    prefill_reqs, emitted, sampled, sampled_verify, sampled_drafted)`` is the law for this server config."""
    n = len(reqs)
    cap = max_batch or n or 1
    send_after = [-1] * n
    first = [-1] * n
    last = [-1] * n
    arrival = [float("inf")] * n
    cols: dict[str, list[int]] = {c: [] for c in ("batch", "dsum", "dmax", "ctx", "ptok", "preq", "emit", "smp", "sver", "sdr")}
    wake: list[int] = []
    drafted = [r.drafted.tolist() for r in reqs]  # plain lists: this loop runs once per step and request
    accepted = [r.accepted.tolist() for r in reqs]
    prompt = [int(r.prompt_tokens) for r in reqs]
    sampled = [not r.greedy for r in reqs]
    out_len = [int(r.output_tokens) for r in reqs]
    pos = [0] * n  # next decode step of each request
    emitted = [0] * n
    nxt = min(concurrency, n)
    for i in range(nxt):
        arrival[i] = ell / 2
    waiting: deque[int] = deque(range(nxt))  # arrived or in flight, in send order
    running: list[int] = []
    t = 0.0
    s = 0
    done = 0
    while done < n:
        woke = -1
        if not running:
            if not waiting:
                raise AssertionError("nothing to run and nothing in flight")  # pragma: no cover
            head = waiting[0]
            if arrival[head] > t:
                t = arrival[head]
                woke = head
        admitted: list[int] = []
        while waiting and len(running) + len(admitted) < cap and arrival[waiting[0]] <= t + 1e-12:
            admitted.append(waiting.popleft())
        decode = running
        b = len(decode)
        dsum = dmax = ctx = emit = smp = sver = sdr = 0
        for i in decode:
            d = drafted[i][pos[i]]
            dsum += d
            dmax = max(dmax, d)
            if sampled[i]:
                smp += 1
                sver += d > 0
                sdr += d
            ctx += prompt[i] + emitted[i]
            emit += min(accepted[i][pos[i]] + 1, out_len[i] - emitted[i])
        ptok = sum(prompt[i] for i in admitted)
        row = (b, dsum, dmax, ctx, ptok, len(admitted), emit, smp, sver, sdr)
        dur = step_seconds(*row)
        for c, v in zip(cols.values(), row, strict=True):
            c.append(v)
        wake.append(woke)
        t += dur
        finished: list[int] = []
        still: list[int] = []
        for i in decode:
            e = emitted[i] + min(accepted[i][pos[i]] + 1, out_len[i] - emitted[i])
            emitted[i] = e
            pos[i] += 1
            (finished if e >= out_len[i] else still).append(i)
        for i in admitted:
            first[i] = s
            emitted[i] = 1
            (finished if out_len[i] <= 1 else still).append(i)
        running = still
        for i in finished:
            last[i] = s
            done += 1
            if nxt < n:  # the client sends the next request when this one's last output arrives
                send_after[nxt] = s
                arrival[nxt] = t + ell
                waiting.append(nxt)
                nxt += 1
        s += 1
    arr = [np.asarray(v, dtype=np.int64) for v in cols.values()]
    table = StepTable(*arr[:6], method=method, k=k, emitted=arr[6], sampled=arr[7], sampled_verify=arr[8],
                      sampled_drafted=arr[9])
    i64 = np.int64
    return Schedule(table, np.asarray(wake, dtype=i64), np.asarray(send_after, dtype=i64), np.asarray(first, dtype=i64),
                    np.asarray(last, dtype=i64), np.asarray(out_len, dtype=i64), [r.id for r in reqs])


def step_ends(sched: Schedule, durations: np.ndarray, ell: float | np.ndarray) -> np.ndarray:
    """When each step ends (s after the run's start) for durations ``(S,)`` or ``(S, M)``: busy stretches
    are cumulative sums; a step that woke an idle server starts when its request arrives."""
    dur = np.asarray(durations, dtype=float)
    squeeze = dur.ndim == 1
    if squeeze:
        dur = dur[:, None]
    m = dur.shape[1]
    ell_v = np.broadcast_to(np.asarray(ell, dtype=float), (m,))
    ends = np.empty_like(dur)
    bounds = sorted({0, *np.flatnonzero(sched.wake >= 0).tolist()}) + [len(sched.wake)]
    prev_end = np.zeros(m)
    for lo, hi in pairwise(bounds):
        start = prev_end
        w = int(sched.wake[lo])
        if w >= 0:
            sa = int(sched.send_after[w])
            arr = (ends[sa] + ell_v) if sa >= 0 else ell_v / 2
            start = np.maximum(prev_end, arr)
        ends[lo:hi] = start + np.cumsum(dur[lo:hi], axis=0)
        prev_end = ends[hi - 1]
    return ends[:, 0] if squeeze else ends


def timeline(sched: Schedule, durations: np.ndarray, ell: float | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-request (send, TTFT, E2E) in seconds for step durations ``(S,)`` or ``(S, M)`` (M laws
    at once) on a fixed schedule; ``ell`` a scalar or ``(M,)``."""
    dur = np.asarray(durations, dtype=float)
    squeeze = dur.ndim == 1
    ends = step_ends(sched, dur[:, None] if squeeze else dur, ell)
    ell_v = np.broadcast_to(np.asarray(ell, dtype=float), (ends.shape[1],))
    send = np.where(sched.send_after[:, None] >= 0, ends[np.maximum(sched.send_after, 0)] + ell_v / 2, 0.0)
    first_out = ends[sched.first_step] + ell_v / 2
    last_out = ends[sched.last_step] + ell_v / 2
    ttft, e2e = first_out - send, last_out - send
    if squeeze:
        return send[:, 0], ttft[:, 0], e2e[:, 0]
    return send, ttft, e2e
