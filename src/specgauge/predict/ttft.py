"""The step law's prediction of the drafter's share of TTFT: a prompt of P tokens prefilled alone
costs ``T(prefill P | the candidate's method) − T(prefill P | no speculation)`` more on the candidate,
i.e. ``draft_prefill[m] · P`` for a draft model, EAGLE or DFlash head and nothing for a model-free
method (n-gram and suffix draft on the host, from the decode steps on). Averaged over the run's
prompts; a step that prefills several prompts at once pays for all of them, so under load the
measured share can be larger (the basis says "one prompt per prefill step")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specgauge.i18n import en
from specgauge.predict.predict import step_function
from specgauge.predict.profile import StepCostProfile
from specgauge.config import resolve_spec


def predicted_prefill_delta_s(profile: StepCostProfile, spec: dict[str, Any] | None, prompt_tokens: Sequence[int]) -> float:
    """Mean extra seconds of a prefill step for the candidate's speculative config ``spec``."""
    method, k, _ = resolve_spec(spec)
    cand = step_function(profile.params, profile.shape, method, k)
    base = step_function(profile.params, profile.shape, None, 0)
    deltas = [cand(0, 0, 0, 0, int(p), 1, 0) - base(0, 0, 0, 0, int(p), 1, 0) for p in prompt_tokens]
    return float(np.mean(deltas)) if deltas else 0.0


def basis(profile_name: str, spec: dict[str, Any] | None) -> str:
    method, k, _ = resolve_spec(spec)
    return en("ttft.basis", profile=profile_name, method=method or "off", k=k)
