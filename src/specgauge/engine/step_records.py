"""What the engine keeps per request and what one step hands back: :class:`EngineRequest` (prompt, sampling,
generator, output so far, cache slot), :class:`StepOutput` (one request's tokens and draft counts at one
step, built by keyword through :meth:`EngineRequest.step_output`) and :class:`StepTiming` (where the last
step's time went). Plain records: the step loop (``core.py``) and the verifier (``batch_verify.py``) act on
them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from specgauge.engine.sampling import SamplingParams
from specgauge.engine.spec_stats import SpecStats

#: why a request finished: its length, a stop / EOS token, an abort, or a failure inside the step
FinishReason = Literal["length", "stop", "abort", "error"]


@dataclass
class StepOutput:
    request_id: str
    new_token_ids: list[int]  # tokens emitted this step (already clipped at max_tokens / stop)
    num_drafted: int  # draft tokens proposed this step (0: no draft)
    num_accepted: int  # of which the target kept (before clipping, as vLLM counts)
    accepted: list[bool]  # per draft position
    finished: bool
    finish_reason: str | None  # "length" | "stop" | "abort" | "error" (failed inside the step) | None
    num_prompt_tokens: int
    num_output_tokens: int  # total so far
    spec: SpecStats | None  # this request's running statistics (None without speculation)

    @classmethod
    def failed(cls, request_id: str) -> StepOutput:
        """A request that ends with ``"error"`` before the engine knew anything of it."""
        return cls(request_id=request_id, new_token_ids=[], num_drafted=0, num_accepted=0, accepted=[], finished=True,
                   finish_reason="error", num_prompt_tokens=0, num_output_tokens=0, spec=None)


@dataclass
class StepTiming:
    """Where the last step's time went (seconds); read by the benchmark."""

    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    num_prefill: int = 0
    num_decode: int = 0
    verify_tokens: int = 0  # tokens through the target's verification forward (padding included)


@dataclass
class EngineRequest:
    id: str
    prompt: list[int]
    params: SamplingParams
    gen: torch.Generator
    stats: SpecStats | None
    output: list[int] = field(default_factory=list)
    hist: list[int] = field(default_factory=list)  # prompt + output (what the drafter sees; read-only to it)
    slot: int = -1
    cached: int = 0  # tokens whose keys/values are in the target cache

    def step_output(self, new_token_ids: list[int], *, drafted: int = 0, accepted: int = 0,
                    finish_reason: FinishReason | None = None) -> StepOutput:
        """This step's record: ``new_token_ids`` emitted, ``accepted`` of ``drafted`` draft tokens kept,
        finished when a ``finish_reason`` is given."""
        return StepOutput(request_id=self.id, new_token_ids=new_token_ids, num_drafted=drafted, num_accepted=accepted,
                          accepted=[i < accepted for i in range(drafted)], finished=finish_reason is not None,
                          finish_reason=finish_reason, num_prompt_tokens=len(self.prompt),
                          num_output_tokens=len(self.output), spec=self.stats)


__all__ = ["EngineRequest", "FinishReason", "StepOutput", "StepTiming"]
