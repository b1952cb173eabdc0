"""Predicted speedup of speculative decoding from measured acceptance and a cost profile.

Time is counted in units of one plain decode step of the target at batch size B, ``T(B)``.

* A target forward over ``n`` tokens per sequence at batch B costs ``T(B·n) / T(B)`` where
  ``T(x) = max(1, x / saturation_tokens) + 0`` — decode is memory-bound (flat) until the batch holds
  ``saturation_tokens`` tokens, then compute-bound (linear). This is what makes speculation stop
  paying at high concurrency: verifying k+1 tokens per sequence is free only while B·(k+1) stays
  under saturation.
* Drafting costs ``draft_cost`` per draft token relative to one target step (a draft model's c: its
  step time over the target's; ~0 for n-gram / suffix lookups), plus ``step_overhead`` per step
  (scheduling, rejection sampling, host work).

For a replayed run with S decode steps, N decode tokens (output tokens after the first, which the
prefill emits either way) and D drafted tokens (measured per step, not an i.i.d. α assumption):

    baseline = N                                   (one decode step per token)
    spec     = S·V(B, 1 + D/S) + D·c + S·o         with V(B, n) = T(B·n) / T(B)
    speedup  = baseline / spec

UNCALIBRATED FALLBACK. The defaults are documented guesses for a dense ~8B target on one modern GPU.
A fitted step-cost law of your own server (``specgauge calibrate`` -> ``cost_profile.json``, see
``specgauge.predict``) replaces this model whenever ``--cost-profile`` names one; a JSON of
``CostProfile`` fields (optionally per method: ``{"default": {...}, "draft_model": {...}}``) is still
read here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from specgauge.config import ConfigError, format_validation_error

#: draft-token cost relative to one target step, by method, when the profile says nothing
DEFAULT_DRAFT_COST = {"ngram": 0.0, "suffix": 0.0, "draft_model": 0.1}


class CostProfile(BaseModel):
    draft_cost: float | None = Field(
        default=None, ge=0, description="cost of one draft token / one target decode step (c); None: method default"
    )
    saturation_tokens: float = Field(
        default=128.0, gt=0, description="tokens per target forward at which decode turns compute-bound"
    )
    step_overhead: float = Field(default=0.02, ge=0, description="fixed cost per speculative step, in target steps")

    def c(self, method: str) -> float:
        if self.draft_cost is not None:
            return self.draft_cost
        return DEFAULT_DRAFT_COST.get(method.split(":")[0], 0.1)


class CostProfiles(BaseModel):
    default: CostProfile = Field(default_factory=CostProfile)
    per_method: dict[str, CostProfile] = Field(default_factory=dict)

    def for_method(self, method: str) -> CostProfile:
        return self.per_method.get(method, self.per_method.get(method.split(":")[0], self.default))

    @classmethod
    def load(cls, path: str | Path | None) -> CostProfiles:
        if path is None:
            return cls()
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--cost-profile {path}: cannot read JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"--cost-profile {path}: expected a JSON object")
        try:
            if "default" in data or any(isinstance(v, dict) for v in data.values()):
                default = CostProfile.model_validate(data.get("default", {}))
                per = {k: CostProfile.model_validate(v) for k, v in data.items() if k != "default"}
                return cls(default=default, per_method=per)
            return cls(default=CostProfile.model_validate(data))
        except ValidationError as e:
            raise ConfigError(f"--cost-profile {path}: {format_validation_error(e)}") from None


def step_time(batch: float, tokens_per_seq: float, saturation_tokens: float) -> float:
    """T(B·n) / T(B): a forward over n tokens per sequence relative to a plain decode step."""
    t = lambda x: max(1.0, x / saturation_tokens)  # noqa: E731
    return t(batch * tokens_per_seq) / t(batch)


#: ``SpeedupPrediction.source`` of this module's guess (shown as a guess, never as a figure)
UNCALIBRATED = "uncalibrated cost model"


class SpeedupPrediction(BaseModel):
    method: str
    k: int
    batch: int
    tokens_per_step: float | None
    predicted_speedup: float | None
    note: str | None = None
    #: where the number comes from: this module's guessed cost model, or a fitted step-cost law
    #: (``specgauge calibrate``) replayed through a simulated closed-loop bench (``specgauge.predict``)
    source: str = UNCALIBRATED
    low: float | None = None  #: calibrated only: 2.5 % of the band from the law's bootstrap
    high: float | None = None
    extrapolated: bool = False


def predict_speedup(
    method: str, k: int, decode_tokens: int, steps: int, draft_tokens: int, batch: int, profile: CostProfile
) -> SpeedupPrediction:
    """Speedup over no speculation for a replayed set of requests (see module docstring)."""
    if steps == 0 or decode_tokens == 0:
        return SpeedupPrediction(method=method, k=k, batch=batch, tokens_per_step=None, predicted_speedup=None,
                                 note="no output tokens to replay")
    n_per_seq = 1 + draft_tokens / steps
    spec = steps * step_time(batch, n_per_seq, profile.saturation_tokens) + draft_tokens * profile.c(method) + steps * profile.step_overhead
    return SpeedupPrediction(
        method=method, k=k, batch=batch, tokens_per_step=decode_tokens / steps, predicted_speedup=decode_tokens / spec
    )


def theoretical_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al.'s expected speedup for i.i.d. acceptance α: (1−α^{k+1}) / ((1−α)(k·c+1))."""
    if alpha >= 1.0:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
