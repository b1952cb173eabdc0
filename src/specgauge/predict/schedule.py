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

from specgauge.offline.traces import PlannedRequest
from specgauge.predict.law import StepTable


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


COLUMNS = ("batch", "dsum", "dmax", "ctx", "ptok", "preq", "emit", "smp", "sver", "sdr")


class _ClosedLoop:
    """The state of one simulated run: per-request progress (plain lists: the loop runs once per step
    and request), who waits and who runs, and the step table built so far."""

    def __init__(self, reqs: Sequence[PlannedRequest], concurrency: int, ell: float, max_batch: int | None) -> None:
        n = self.n = len(reqs)
        self.cap = max_batch or n or 1
        self.ell = ell
        self.send_after, self.first, self.last = [-1] * n, [-1] * n, [-1] * n
        self.arrival = [float("inf")] * n
        self.cols: dict[str, list[int]] = {c: [] for c in COLUMNS}
        self.wake: list[int] = []
        self.drafted = [r.drafted.tolist() for r in reqs]
        self.accepted = [r.accepted.tolist() for r in reqs]
        self.positions = [r.positions for r in reqs]
        self.k_step: int | None = None  #: this step's proposal length when it changes per step (positions)
        self.prompt = [int(r.prompt_tokens) for r in reqs]
        self.sampled = [not r.greedy for r in reqs]
        self.out_len = [int(r.output_tokens) for r in reqs]
        self.pos = [0] * n  # next decode step of each request
        self.emitted = [0] * n
        self.nxt = min(concurrency, n)
        for i in range(self.nxt):
            self.arrival[i] = ell / 2
        self.waiting: deque[int] = deque(range(self.nxt))  # arrived or in flight, in send order
        self.running: list[int] = []
        self.t = 0.0
        self.done = 0

    def admit(self) -> tuple[list[int], int]:
        """The requests this step prefills, and the request whose arrival woke an idle server (-1: none)."""
        woke = -1
        if not self.running:
            if not self.waiting:
                raise AssertionError("nothing to run and nothing in flight")  # pragma: no cover
            head = self.waiting[0]
            if self.arrival[head] > self.t:
                self.t = self.arrival[head]
                woke = head
        admitted: list[int] = []
        while self.waiting and len(self.running) + len(admitted) < self.cap and self.arrival[self.waiting[0]] <= self.t + 1e-12:
            admitted.append(self.waiting.popleft())
        return admitted, woke

    def draft(self, i: int) -> tuple[int, int]:
        """(drafted, accepted) of request i's step now: its next replayed step, or — when k changes per
        step — its proposal at the position it has reached, at this step's k."""
        if self.k_step is None:
            return self.drafted[i][self.pos[i]], self.accepted[i][self.pos[i]]
        pt = self.positions[i]
        assert pt is not None, "a per-step k needs every request's PositionTrace"
        return pt.at(self.emitted[i], self.k_step)

    def row(self, admitted: Sequence[int]) -> tuple[int, ...]:
        """This step's row of the law's inputs (``COLUMNS``)."""
        dsum = dmax = ctx = emit = smp = sver = sdr = 0
        for i in self.running:
            d, a = self.draft(i)
            dsum += d
            dmax = max(dmax, d)
            if self.sampled[i]:
                smp += 1
                sver += d > 0
                sdr += d
            ctx += self.prompt[i] + self.emitted[i]
            emit += min(a + 1, self.out_len[i] - self.emitted[i])
        ptok = sum(self.prompt[i] for i in admitted)
        return len(self.running), dsum, dmax, ctx, ptok, len(admitted), emit, smp, sver, sdr

    def advance(self, s: int, admitted: Sequence[int]) -> None:
        """Step ``s`` ended (at ``self.t``): decode progress, prefills, finished requests and the client's next sends."""
        finished: list[int] = []
        still: list[int] = []
        for i in self.running:
            e = self.emitted[i] + min(self.draft(i)[1] + 1, self.out_len[i] - self.emitted[i])
            self.emitted[i] = e
            self.pos[i] += 1
            (finished if e >= self.out_len[i] else still).append(i)
        for i in admitted:
            self.first[i] = s
            self.emitted[i] = 1
            (finished if self.out_len[i] <= 1 else still).append(i)
        self.running = still
        for i in finished:
            self.last[i] = s
            self.done += 1
            if self.nxt < self.n:  # the client sends the next request when this one's last output arrives
                self.send_after[self.nxt] = s
                self.arrival[self.nxt] = self.t + self.ell
                self.waiting.append(self.nxt)
                self.nxt += 1


def simulate_schedule(
    reqs: Sequence[PlannedRequest], concurrency: int, step_seconds: Callable[..., float],
    ell: float, method: str | None = None, k: int = 0, max_batch: int | None = None,
    k_of: Callable[[int], int] | None = None, step_at_k: Callable[[int], Callable[..., float]] | None = None,
) -> Schedule:
    """Run the closed loop once. ``step_seconds(B, drafted_sum, drafted_max, context, prefill_tokens,
    prefill_reqs, emitted, sampled, sampled_verify, sampled_drafted)`` is the law for this server config.
    ``k_of``: a proposal length per step from the requests it schedules (prefills included, as vLLM's
    ``num_speculative_tokens_per_batch_size`` keys it); every request then needs its ``positions``, and
    ``step_at_k(k)`` gives the law at that step's k (a draft model's forwards grow with it)."""
    loop = _ClosedLoop(reqs, concurrency, ell, max_batch)
    ks: list[int] = []
    s = 0
    while loop.done < loop.n:
        admitted, woke = loop.admit()
        if k_of is not None:
            loop.k_step = max(0, min(k, k_of(len(loop.running) + len(admitted))))
            ks.append(loop.k_step)
        row = loop.row(admitted)
        fn = step_at_k(loop.k_step) if step_at_k is not None and loop.k_step is not None else step_seconds
        dur = fn(*row)
        for c, v in zip(loop.cols.values(), row, strict=True):
            c.append(v)
        loop.wake.append(woke)
        loop.t += dur
        loop.advance(s, admitted)
        s += 1
    i64 = np.int64
    col = {c: np.asarray(v, dtype=i64) for c, v in loop.cols.items()}
    table = StepTable(batch=col["batch"], drafted_sum=col["dsum"], drafted_max=col["dmax"], context=col["ctx"],
                      prefill_tokens=col["ptok"], prefill_reqs=col["preq"], method=method, k=k, emitted=col["emit"],
                      sampled=col["smp"], sampled_verify=col["sver"], sampled_drafted=col["sdr"],
                      k_steps=np.asarray(ks, dtype=i64) if k_of is not None else None)
    return Schedule(steps=table, wake=np.asarray(loop.wake, dtype=i64), send_after=np.asarray(loop.send_after, dtype=i64),
                    first_step=np.asarray(loop.first, dtype=i64), last_step=np.asarray(loop.last, dtype=i64),
                    output_tokens=np.asarray(loop.out_len, dtype=i64), ids=[r.id for r in reqs])


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
