"""Replay a stateful drafter (suffix decoding's shared cache) in the exact call order of the embedded engine.

Requests that overlap in time reach a shared cache interleaved step by step, so replaying them one
after the other is not what the server did. The embedded engine (``engine/core.py``) reports, per
request, the engine step of its prefill and its admission number (``SpecStats.schedule``, in the
record's ``metrics.speculative_decoding``: ``specgauge_prefill_step``, ``specgauge_admitted``): its
decode steps then follow at every later engine step until it ends, and within one engine step the
engine calls the drafter in this order:

1. ``propose`` for every decoding request, in admission order (each learns the tokens its previous
   step emitted, then drafts);
2. verification; ``end`` for each request that finished this step, in the same order;
3. ``begin`` for the requests admitted this step, in admission order (and ``end`` at once for one
   whose prefill token already ended it).

When bench records (plus the run's warm-ups, ``RunRecord.warmups``) hold *every* request the server
admitted — admissions 0..n-1, each with its token ids — the cache's whole history is known and
replaying that order gives the server's drafts exactly, requests that overlapped in time included
(``scheduled_requests`` then ``schedule_traces``). Records of several runs on one server (a sweep's
concurrencies) are one schedule. The drafter sees each request under its admission number (the
engine's ids are unique; a reused id would evict a cached response). ``ScheduleError``: the schedule
is inconsistent (a request admitted into a step that had already passed), so it cannot be what one
engine did. Boundary: records in, traces out; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgauge.drafters.base import Drafter, ReplayTrace, accepted_prefix, make_drafter
from specgauge.i18n import en
from specgauge.offline.record_fields import per_step, spec_decoding, token_ids
from specgauge.records import RequestRecord


class ScheduleError(ValueError):
    pass


@dataclass
class ScheduledRequest:
    id: str
    prompt: list[int]
    output: list[int]
    prefill_step: int  #: the engine step that prefilled it
    admitted: int  #: its admission number (order among requests admitted in one step)
    #: the server's accepted count at the final step (it counts draft tokens accepted past the output's
    #: end, e.g. after the EOS): used for that step when it lies within what the final draft allows
    final_accepted: int | None = None


@dataclass
class _State:
    req: ScheduledRequest
    pos: int = 1  # output token 0 came from the prefill
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft: list[int] = field(default_factory=list)


def replay_schedule(drafter: Drafter, requests: Sequence[ScheduledRequest], k: int,
                    max_model_len: int | None = None) -> dict[int, ReplayTrace]:
    """Traces of every request (by admission number), the drafter called as the engine called it (module doc).
    ``max_model_len``: the engine's; it caps each proposal at ``max_model_len - len(history)``."""
    pending = sorted(requests, key=lambda r: r.admitted)
    running: list[_State] = []
    out: dict[int, ReplayTrace] = {}
    i, t = 0, -1
    while i < len(pending) or running:
        t = t + 1 if running else pending[i].prefill_step
        if i < len(pending) and pending[i].prefill_step < t:
            raise ScheduleError(f"request {pending[i].id!r} is admitted at engine step {pending[i].prefill_step}, "
                                f"which had passed (step {t})")
        for s in running:  # 1. every decoding request drafts, in admission order
            r = s.req
            hist = r.prompt + r.output[: s.pos]
            kk = k if max_model_len is None else min(k, max_model_len - len(hist))
            s.draft = list(drafter.propose(f"adm-{r.admitted}", hist, kk))[:kk] if kk > 0 else []
        still: list[_State] = []
        for s in running:  # 2. verification: the matching prefix is accepted, one more token emitted
            r, d = s.req, s.draft
            n, left = len(r.output), len(r.output) - s.pos
            a = accepted_prefix(d, r.output, s.pos)
            s.drafted.append(len(d))
            s.accepted.append(a)
            s.pos += min(a + 1, left)
            if s.pos < n:
                still.append(s)
                continue
            drafter.end(f"adm-{r.admitted}", r.output)
            fin = r.final_accepted
            if a >= left and fin is not None and a <= fin <= len(d):  # the output ended inside the accepted draft:
                s.accepted[-1] = fin  # the server counts acceptance before it cuts the output
            out[r.admitted] = ReplayTrace(np.asarray(s.drafted, dtype=np.int64), np.asarray(s.accepted, dtype=np.int64))
        running = still
        while i < len(pending) and pending[i].prefill_step == t:  # 3. this step's admissions are prefilled
            r = pending[i]
            i += 1
            drafter.begin(f"adm-{r.admitted}", r.prompt)
            if len(r.output) <= 1:
                drafter.end(f"adm-{r.admitted}", r.output)
                out[r.admitted] = ReplayTrace(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            else:
                running.append(_State(r))
    return out


@dataclass(frozen=True)
class ScheduleGap:
    """Why a run's records cannot be replayed in the engine's order. ``missing``: requests the server
    admitted that the records lack (earlier runs, failed or aborted requests): its cache saw them, so
    no replay of these records can vouch for a row; 0 for every other reason."""

    why: str
    missing: int = 0

    def __str__(self) -> str:
        return self.why


def schedule_of(extra: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(prefill step, admission number) the embedded server reported for one request, or None."""
    sd = spec_decoding(dict(extra) if extra else None)
    if sd is None:
        return None
    p, a = sd.get("specgauge_prefill_step"), sd.get("specgauge_admitted")
    return (p, a) if isinstance(p, int) and isinstance(a, int) else None


def scheduled_requests(records: Iterable[RequestRecord], warmups: Iterable[Mapping[str, Any]] = ()
                       ) -> tuple[list[ScheduledRequest], None] | tuple[None, ScheduleGap]:
    """Every request the server admitted, as a schedule; (None, why) when one is missing or unplaced."""
    items = [(str(w.get("id")), w) for w in warmups if w.get("ok")]
    items += [(r.id, r.extra or {}) for r in records if r.ok]
    out: list[ScheduledRequest] = []
    for rid, extra in items:
        ids, sc = token_ids(dict(extra)), schedule_of(extra)
        if sc is None:
            return None, ScheduleGap(en("rc.s.no_schedule", id=rid))
        if ids is None:
            return None, ScheduleGap(en("rc.s.no_ids", id=rid))
        steps = per_step(dict(extra))
        out.append(ScheduledRequest(id=rid, prompt=ids[0], output=ids[1], prefill_step=sc[0], admitted=sc[1],
                                    final_accepted=steps[-1][1] if steps else None))
    if not out:
        return None, ScheduleGap(en("rc.s.none"))
    adm = sorted(r.admitted for r in out)
    if len(set(adm)) != len(adm):
        return None, ScheduleGap(en("rc.s.shared"))
    if adm != list(range(len(adm))):
        missing = adm[-1] + 1 - len(adm)
        return None, ScheduleGap(en("rc.s.missing", n=missing), missing)
    return out, None


def schedule_traces(requests: Sequence[ScheduledRequest], drafter_options: Mapping[str, Any], k: int,
                    max_model_len: int | None, kind: str = "suffix") -> dict[int, ReplayTrace] | None:
    """Replay ``requests`` through a fresh drafter of ``kind`` (the engine's suffix cache by default) in
    the engine's order: traces by admission number (None: an inconsistent schedule)."""
    drafter = make_drafter(kind, **{**drafter_options, "num_speculative_tokens": k, "max_model_len": max_model_len})
    try:
        return replay_schedule(drafter, requests, k, max_model_len)
    except ScheduleError:
        return None
