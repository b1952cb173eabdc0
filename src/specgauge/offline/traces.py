"""A planned request's replayed trace (and every position's proposal), and its check against a run's live counts.

``specgauge.predict``'s planner gives one ``PlannedRequest`` per request a run sends (``predict.replay``);
calibration asks which of them a live run followed (``predict.fit_traces``) with ``replay_check``: the
server's own per-request counts against the replayed totals, a request agreeing when ``counts_agree``.
(The bench's per-request judgement, with vLLM's per-step lists and suffix decoding's uncertainty, is
``stats.replay_check``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specgauge.drafters.base import ReplayTrace, final_bound
from specgauge.records import RequestRecord


@dataclass
class PositionTrace:
    """What a deterministic drafter proposes for one logged output at every position, not only at the
    positions one k's steps reach: index p is a decode step that starts with p output tokens emitted
    (0 unused: output token 0 comes from the prefill). ``drafted[p]``: tokens proposed at the largest k;
    ``accepted[p]``: how many of them the logged output continues with. A step at p with proposal
    length k' <= that k drafts ``min(drafted[p], k')`` and accepts ``min(accepted[p], k')`` — a greedy
    chain of k' tokens is the first k' tokens of the longer one — so steps whose k changes with the
    batch (vLLM's ``num_speculative_tokens_per_batch_size``) or whose acceptance is drawn (synthetic
    acceptance) follow from one table."""

    drafted: np.ndarray  # (L,) int
    accepted: np.ndarray  # (L,) int

    def at(self, pos: int, k: int) -> tuple[int, int]:
        """(drafted, accepted) of a step at output position ``pos`` with proposal length ``k``."""
        if pos >= len(self.drafted):
            return 0, 0
        d = min(int(self.drafted[pos]), k)
        return d, min(int(self.accepted[pos]), d)


@dataclass
class PlannedRequest:
    """One request of the run: its prompt size and the decode steps replay says it takes."""

    id: str
    prompt_tokens: int
    output_tokens: int  #: L; output token 0 comes from the prefill step
    drafted: np.ndarray  #: (decode steps,) tokens proposed at each decode step
    accepted: np.ndarray  #: (decode steps,) of which the target kept
    greedy: bool = True  #: temperature 0 (the live output equals the logged one)
    #: every position's proposal (``PositionTrace``), for a run whose k changes per step; None: the steps above
    positions: PositionTrace | None = None


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
