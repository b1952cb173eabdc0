"""Replay-vs-live check of one bench run: does the server accept what its own outputs allow?

The replay theorem (``shared/design.md``) says a deterministic drafter's draft token is accepted
exactly when the target emits it. So replaying the run's own recorded outputs (token ids) through the
same drafter gives, request by request, the drafts and accepted tokens a correct server reports. A
server whose acceptance falls below that has a broken drafter or verifier (the *drafter* side of a
failure); outputs that differ from a no-speculation baseline are the *target* side (``compare``).

Boundary: bench records and a speculative config in, data out (``ReplayCheck``); no I/O, no printing.
The traces come from ``offline.live`` (the run's outputs replayed in the order its server saw them:
warm-ups first, the embedded engine's own call order where its records give it); this module judges
them against the server's own counts. Rules, per request:

* the server's final step may accept draft tokens past the returned output (past ``max_tokens``,
  after the EOS) and counts them: there the replay is a lower bound, by at most the draft tokens its
  final step proposed past the output's end (``final_bound``); every other step must be identical
  (with vLLM's ``per_step_*`` lists) or the totals equal within that bound (without them);
* ``suffix``: from the step on which the replay cannot vouch (``offline.live``: overlapping requests,
  requests the records lack, a token no log holds) a request is ``uncertain``, never a gap;
* a gap is a request the replay proves the server got wrong: different draft counts, fewer accepted
  tokens than its output allows, or more than the bound permits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import ReplayTrace, drafter_factory, final_bound
from specgauge.i18n import en
from specgauge.offline.record_fields import max_model_len_of_server, per_step, speculative_config_of_server, token_ids
from specgauge.offline.live import LiveReplayer, LiveReplayError, replay_run
from specgauge.records import RequestRecord
from specgauge.stats.collapse import AcceptanceProfile, CollapseCriteria, Row, profile

Status = Literal["match", "gap", "uncertain", "no_server_counts"]
MAX_ROWS_KEPT = 2000
#: what bench keeps of each warm-up request's ``extra`` (``RunRecord.warmups``)
WARMUP_KEYS = ("prompt_token_ids", "output_token_ids", "metrics")


class Counts(BaseModel):
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    def add(self, o: Counts) -> None:
        self.drafts += o.drafts
        self.draft_tokens += o.draft_tokens
        self.accepted_tokens += o.accepted_tokens


class RequestCheck(BaseModel):
    id: str
    status: Status
    server: Counts | None = None
    replay: Counts
    #: draft tokens the server may have accepted past the output's end (its count may exceed the
    #: replay's by up to this, at the final step)
    final_bound: int = 0
    detail: str | None = None


class ReplayCheck(BaseModel):
    """``summary.json``'s ``specgauge.replay_check``."""

    available: bool
    reason: str | None = None  #: why the check did not run (or what limits it)
    method: str | None = None
    k: int | None = None
    config_source: str | None = None
    requests: int = 0  #: requests replayed (ok, with token ids)
    matching: int = 0
    gaps: int = 0
    uncertain: int = 0
    no_server_counts: int = 0
    replay: Counts = Field(default_factory=Counts)  #: over the requests compared with the server
    server: Counts = Field(default_factory=Counts)
    replay_acceptance_rate: float | None = None
    server_acceptance_rate: float | None = None
    #: the server's acceptance falls below what its outputs allow (or its drafts differ)
    gap: bool = False
    gap_summary: str | None = None
    gap_ids: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    rows: list[RequestCheck] = Field(default_factory=list)  #: per request (the first MAX_ROWS_KEPT)
    #: replay totals of the requests the server gave no counts for, and their final-step bounds
    unpaired: Counts = Field(default_factory=Counts)
    unpaired_bound: int = 0
    #: live against replayed acceptance per draft position and prompt-length band, and a collapse
    #: (live far below the replay) named with its evidence (``stats.collapse``)
    profile: AcceptanceProfile | None = None


def unavailable(reason: str, **kw: Any) -> ReplayCheck:
    return ReplayCheck(available=False, reason=reason, **kw)


def _ids(rec: RequestRecord) -> tuple[list[int], list[int]] | None:
    return token_ids(rec.extra)


def _per_step(rec: RequestRecord) -> list[tuple[int, int]] | None:
    return per_step(rec.extra)


def _steps(t: ReplayTrace) -> list[tuple[int, int]]:
    return [(int(d), int(a)) for d, a in zip(t.drafted, t.accepted) if d > 0]


def judge_request(rid: str, t: ReplayTrace, n_out: int, server: Counts | None,
                  steps: list[tuple[int, int]] | None, uncertain_from: int | None = None) -> RequestCheck:
    """One request: the replay's trace against the server's counts (and per-step lists, if any).
    ``uncertain_from``: index among drafted steps from which the replay cannot vouch (suffix)."""
    ours = _steps(t)
    replay = Counts(drafts=len(ours), draft_tokens=sum(d for d, _ in ours), accepted_tokens=sum(a for _, a in ours))
    bound = final_bound(t, n_out)
    row = RequestCheck(id=rid, status="match", server=server, replay=replay, final_bound=bound)
    if server is None:
        row.status = "no_server_counts"
        return row
    if steps is not None:
        upto = len(ours) if uncertain_from is None else uncertain_from
        same = len(ours) == len(steps) and ours[:-1] == steps[:-1] and (
            not ours or (ours[-1][0] == steps[-1][0] and ours[-1][1] <= steps[-1][1] <= ours[-1][1] + bound))
        if uncertain_from is not None and ours[:upto] == steps[:upto]:
            row.status = "uncertain"
        elif not same:
            j = next((i for i, (x, y) in enumerate(zip(ours, steps)) if x != y), min(len(ours), len(steps)))
            row.status = "uncertain" if uncertain_from is not None and j >= uncertain_from else "gap"
            row.detail = en("rc.d.step", j=j, server=steps[j] if j < len(steps) else en("rc.d.nothing"),
                            replay=ours[j] if j < len(ours) else en("rc.d.nothing"))
        return row
    short = server.accepted_tokens - replay.accepted_tokens
    same = server.drafts == replay.drafts and server.draft_tokens == replay.draft_tokens and 0 <= short <= bound
    if not same:
        row.status = "uncertain" if uncertain_from is not None else "gap"
        row.detail = en("rc.d.counts", sd=server.drafts, st=server.draft_tokens, sa=server.accepted_tokens, rd=replay.drafts,
                        rt=replay.draft_tokens, ra=replay.accepted_tokens, b=bound)
    elif uncertain_from is not None:
        row.status = "uncertain"
    return row


def replayable(method: str | None) -> bool:
    """A registered drafter whose proposal is a deterministic function of the history (the replay theorem)."""
    return method is not None and bool(getattr(drafter_factory(method), "deterministic", False))


def check_run(records: Sequence[RequestRecord], spec: SpeculativeConfig | dict[str, Any] | None, config_source: str,
              max_model_len: int | None = None, warmups: Sequence[dict[str, Any]] = (),
              collapse: CollapseCriteria | None = None) -> ReplayCheck:
    """Replay every successful request with token ids and compare with the server's own counts.
    ``warmups``: the run's warm-up requests (``RunRecord.warmups``), which a stateful cache learned first;
    ``collapse``: when live acceptance counts as collapsed (``stats.collapse``)."""
    if spec is None:
        return unavailable(en("rc.r.no_config"))
    try:
        cfg = spec if isinstance(spec, SpeculativeConfig) else SpeculativeConfig.model_validate(spec)
    except ValueError as e:
        return unavailable(en("rc.r.bad_config", source=config_source, error=str(e).splitlines()[0]))
    base = {"method": cfg.method, "k": cfg.num_speculative_tokens, "config_source": config_source}
    if not replayable(cfg.method):
        return unavailable(en("rc.r.hidden", method=repr(cfg.method)), **base)
    if cfg.rejection_sample_method == "synthetic":  # calibrate --synthetic-acceptance: no drafter to hold to
        return unavailable(en("rc.r.synthetic"), **base)
    if cfg.method == "draft_model" and not (cfg.model and Path(cfg.model).is_dir()):
        return unavailable(en("rc.r.no_draft_dir", model=repr(cfg.model)), **base)
    ok = sorted((r for r in records if r.ok), key=lambda r: (r.sent_s, r.index))
    with_ids = [(r, ids) for r in ok if (ids := _ids(r)) is not None]
    if not with_ids:
        return unavailable(en("rc.r.no_ids"), **base)
    try:
        rep = LiveReplayer(cfg, max_model_len)
    except (ValueError, TypeError, OSError, ImportError) as e:
        return unavailable(en("rc.r.no_drafter", method=cfg.method, error=e), **base)
    res = ReplayCheck(available=True, **base)
    if len(with_ids) < len(ok):
        res.notes.append(en("rc.n.no_ids", n=len(ok) - len(with_ids)))
    try:
        live = replay_run(rep, with_ids, warmups, max_model_len)
    except LiveReplayError as e:  # e.g. ids outside the draft model's vocabulary
        return unavailable(en("rc.r.failed", id=e.rid, method=cfg.method, error=e.cause), **base)
    res.notes += live.notes
    rows: list[Row] = []
    for rec, (prompt, out) in with_ids:
        steps = _per_step(rec)
        t, unc = live.traces[rec.id], live.uncertain_from[rec.id]
        s = rec.spec
        server = None if s is None or s.draft_tokens is None or s.accepted_tokens is None else Counts(
            drafts=s.drafts or 0, draft_tokens=s.draft_tokens, accepted_tokens=s.accepted_tokens)
        row = judge_request(rec.id, t, len(out), server, steps, unc)
        _tally(res, row)
        if server is not None and s is not None:
            rows.append(Row(prompt_tokens=len(prompt), server=s, drafted=t.drafted, accepted=t.accepted))
    _finish(res)
    if rows:
        res.profile = profile(rows, collapse, int(cfg.num_speculative_tokens or 0) or None)
    return res


def _tally(res: ReplayCheck, row: RequestCheck) -> None:
    res.requests += 1
    if row.status == "match":
        res.matching += 1
    elif row.status == "gap":
        res.gaps += 1
        if len(res.gap_ids) < 20:
            res.gap_ids.append(row.id)
    elif row.status == "uncertain":
        res.uncertain += 1
    else:
        res.no_server_counts += 1
    if row.server is not None:
        res.replay.add(row.replay)
        res.server.add(row.server)
    else:
        res.unpaired.add(row.replay)
        res.unpaired_bound += row.final_bound
    if len(res.rows) < MAX_ROWS_KEPT:
        res.rows.append(row)


def _pct(x: float | None) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.1f} %"


def _finish(res: ReplayCheck) -> None:
    res.replay_acceptance_rate = res.replay.acceptance_rate
    res.server_acceptance_rate = res.server.acceptance_rate
    if res.no_server_counts == res.requests:
        res.notes.append(en("rc.n.no_counts"))
    if res.gaps:
        res.gap = True
        res.gap_summary = en("rc.g.requests", k=res.gaps, n=res.requests, srv=_pct(res.server_acceptance_rate),
                             rep=_pct(res.replay_acceptance_rate))


def check_totals(res: ReplayCheck, counters: Any) -> None:
    """Without per-request counts: the run's counter diff (``SpecCounts``) against the replay's
    totals (other traffic on the server makes this inexact; the bench warns about that)."""
    if not res.available or res.no_server_counts != res.requests or counters is None:
        return
    rep, bound = res.unpaired, res.unpaired_bound
    drafted, acc = counters.draft_tokens, counters.accepted_tokens
    if drafted is None or acc is None:
        return
    res.replay, res.server = rep, Counts(drafts=counters.drafts or 0, draft_tokens=int(drafted), accepted_tokens=int(acc))
    res.replay_acceptance_rate, res.server_acceptance_rate = rep.acceptance_rate, res.server.acceptance_rate
    if int(drafted) != rep.draft_tokens or not 0 <= int(acc) - rep.accepted_tokens <= bound:
        res.gap = True
        res.gap_summary = en("rc.g.totals", acc=int(acc), d=int(drafted), racc=rep.accepted_tokens, rd=rep.draft_tokens, b=bound)


def check_bench_run(records: Sequence[RequestRecord], stated: SpeculativeConfig | None, server: dict[str, Any],
                    counters: Any = None, warmups: Sequence[dict[str, Any]] = ()) -> ReplayCheck:
    """The check ``bench`` runs after every run: the config the user stated, else the one the server
    states (embedded server); the server's ``max_model_len`` from ``/v1/models``; the counter diff for
    runs without per-request counts."""
    spec: SpeculativeConfig | dict[str, Any] | None = stated
    src = "bench --speculative-config"
    if spec is None:
        spec, src = speculative_config_of_server(server), "the server's /v1/models card"
    res = check_run(records, spec, src, max_model_len_of_server(server), warmups)
    check_totals(res, counters)
    return res
