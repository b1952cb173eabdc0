"""Per-request speculative-decoding statistics, counted exactly as vLLM counts them.

A *draft* is one non-empty proposal for one request at one step; its *accepted* count is the number of
draft tokens the target kept (the recovered / bonus token is not a draft token). Steps without a draft
are not counted at all. ``to_vllm`` gives the shape of vLLM's ``metrics.speculative_decoding`` under
``--per-request-spec-decode-metrics summary|detailed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SpecStats:
    num_spec_tokens: int  # k, as configured
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)  # [k]: drafts whose token i was accepted
    acceptance_histogram: list[int] = field(default_factory=list)  # [k+1]: drafts with n accepted tokens
    per_step_drafted: list[int] = field(default_factory=list)
    per_step_accepted: list[int] = field(default_factory=list)
    #: (engine step of the prefill, admission number) set by the engine; a decode step follows every step
    #: after the prefill until the request ends, so with ``detailed`` this fixes the drafter's call order
    schedule: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * self.num_spec_tokens
        if not self.acceptance_histogram:
            self.acceptance_histogram = [0] * (self.num_spec_tokens + 1)

    def observe(self, drafted: int, accepted: int) -> None:
        """Record one step's draft. Steps with no draft tokens are ignored, as in vLLM."""
        if drafted <= 0:
            return
        if not 0 <= accepted <= drafted <= self.num_spec_tokens:
            raise ValueError(f"bad draft record: drafted={drafted} accepted={accepted} k={self.num_spec_tokens}")
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        for i in range(accepted):
            self.accepted_per_pos[i] += 1
        self.acceptance_histogram[accepted] += 1
        self.per_step_drafted.append(drafted)
        self.per_step_accepted.append(accepted)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts (NaN when nothing was drafted: there is no length to report)."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def draft_acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")

    def to_vllm(self, detailed: bool = False) -> dict[str, Any]:
        """vLLM's per-request ``speculative_decoding`` object (NaN becomes null, JSON has no NaN)."""
        out: dict[str, Any] = {
            "mean_acceptance_length": self.mean_acceptance_length if self.num_drafts else None,
            "draft_acceptance_rate": self.draft_acceptance_rate if self.num_draft_tokens else None,
            "acceptance_histogram": list(self.acceptance_histogram),
            "num_spec_steps": self.num_drafts,
            "num_accepted_draft_tokens": self.num_accepted_tokens,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        if detailed:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
            if self.schedule is not None:  # specgauge's own keys (vLLM has none): the replay's call order
                out["specgauge_prefill_step"], out["specgauge_admitted"] = self.schedule
        return out
