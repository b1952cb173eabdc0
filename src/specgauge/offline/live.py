"""A bench run's own outputs replayed as its server saw them: the traces the replay-vs-live check judges.

The replay theorem (``shared/design.md``) says a deterministic drafter's draft token is accepted exactly
when the target emits it, so replaying a run's recorded outputs (token ids) through the same drafter
gives, request by request, the drafts and accepted tokens a correct server reports. Boundary: records
(with their token ids) and a speculative config in, one ``ReplayTrace`` per request out, with the draft
step from which it cannot vouch for the server (``uncertain_from``) and notes saying why; judging them
against the server's own counts is ``stats.replay_check``'s. Rules:

* the server's final-step count goes to a drafter whose replay takes it (suffix learns the tokens past
  the cut with it);
* ``suffix``: one cache shared by all requests; warm-up requests (``RunRecord.warmups``) entered it
  first. When the records hold every request the embedded engine admitted (its prefill step and
  admission number), the cache is replayed in the engine's own call order (``offline.schedule``), exact
  also for requests that overlapped in time. Otherwise it is fed request by request in send order: exact
  only while requests did not overlap in time (overlapping ones interleave their tokens in the cache
  step by step) and the cache saw nothing the records lack, and only up to the first step that may
  depend on a token no log holds (``SuffixTrace.first_uncertain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import ReplayTrace, ServerReport
from specgauge.i18n import en
from specgauge.offline.record_fields import per_step, token_ids
from specgauge.offline.replay import MethodReplay, MethodSpec
from specgauge.offline.schedule import schedule_of, schedule_traces, scheduled_requests
from specgauge.records import RequestRecord

#: a record and its (prompt ids, output ids)
WithIds = tuple[RequestRecord, tuple[list[int], list[int]]]


class LiveReplayError(Exception):
    """One request's replay failed (e.g. ids outside the draft model's vocabulary): ``rid``, ``cause``."""

    def __init__(self, rid: str, cause: Exception) -> None:
        super().__init__(f"{rid}: {cause}")
        self.rid, self.cause = rid, cause


class LiveReplayer:
    """The run's drafter, through the one offline replay (``offline.replay``): a stateful cache (suffix)
    is shared across requests, fed in the order ``trace`` is called."""

    def __init__(self, spec: SpeculativeConfig, max_model_len: int | None) -> None:
        self.method, self.k = str(spec.method), int(spec.num_speculative_tokens or 0)
        mspec = MethodSpec.from_config(spec)
        context = {"max_model_len": max_model_len, "track_unknown_tails": True}
        self.options = mspec.drafter_options(self.k, **context)
        self.replayer = MethodReplay(mspec, [self.k], where="", **context)

    def trace(self, rid: str, prompt: list[int], out: list[int], steps: list[tuple[int, int]] | None) -> ReplayTrace:
        server = ServerReport(final_accepted=steps[-1][1]) if steps else None
        return self.replayer.traces(rid, "", prompt, out, server=server)[self.k]


@dataclass
class RunReplay:
    traces: dict[str, ReplayTrace]  #: by record id
    #: by record id: index among its drafted steps from which the replay cannot vouch (None: every step)
    uncertain_from: dict[str, int | None]
    notes: list[str] = field(default_factory=list)


def replay_run(rep: LiveReplayer, with_ids: Sequence[WithIds], warmups: Sequence[dict[str, Any]] = (),
               max_model_len: int | None = None) -> RunReplay:
    """Every record's trace, in send order (``with_ids`` sorted so). Raises ``LiveReplayError`` naming the
    request whose replay failed."""
    out = RunReplay({}, {})
    scheduled, all_uncertain = _suffix_state(out.notes, rep, [r for r, _ in with_ids], warmups, max_model_len) \
        if rep.method == "suffix" else (None, False)
    for rec, (prompt, completion) in with_ids:
        try:
            t = scheduled[rec.id] if scheduled is not None else rep.trace(rec.id, prompt, completion, per_step(rec.extra))
        except (ValueError, IndexError, RuntimeError) as e:
            raise LiveReplayError(rec.id, e) from e
        unc: int | None = None
        if rep.method == "suffix" and scheduled is None:
            fu = getattr(t, "first_uncertain", None)
            unc = 0 if all_uncertain else (None if fu is None else int((t.drafted[:fu] > 0).sum()))
        out.traces[rec.id], out.uncertain_from[rec.id] = t, unc
    return out


def _overlapping(records: Sequence[RequestRecord]) -> bool:
    spans = sorted((r.sent_s, r.sent_s + r.elapsed_s) for r in records)
    return any(b0 < a1 for (_, a1), (b0, _) in pairwise(spans))


def _suffix_state(notes: list[str], rep: LiveReplayer, ok: Sequence[RequestRecord], warmups: Sequence[dict[str, Any]],
                  max_model_len: int | None) -> tuple[dict[str, ReplayTrace] | None, bool]:
    """How the suffix cache is replayed: in the engine's own order when the records hold every request the
    server admitted (returns those traces), else request by request after the warm-ups (returns None, and
    whether every row is uncertain: the requests overlapped in time, or the cache saw requests these
    records lack)."""
    sched, gap = scheduled_requests(ok, warmups)
    if sched is not None:
        opts = {n: v for n, v in rep.options.items() if n.startswith("suffix_decoding_")}
        traces = schedule_traces(sched, opts, rep.k, max_model_len)
        if traces is not None:
            notes.append(en("rc.n.engine_order", n=len(sched)))
            return {r.id: traces[sc[1]] for r in ok if (sc := schedule_of(r.extra)) is not None}, False
    for w in warmups:  # what the cache learned before the run, in the order they were sent
        ids = token_ids(w) if w.get("ok") else None
        if ids is not None:
            rep.trace(str(w.get("id")), ids[0], ids[1], per_step(w))
        elif w.get("ok") is not None:
            notes.append(en("rc.n.warmup_no_ids", id=w.get("id")))
    unknown_before = False
    if gap is not None and gap.missing:  # the cache saw requests these records lack
        unknown_before = True
        notes.append(en("rc.n.uncertain_why", why=gap.why))
    if _overlapping(ok):
        notes.append(en("rc.n.overlap"))
        return None, True
    return None, unknown_before
