"""Fit a step-cost law from bench output directories."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specgauge.predict.profile import StepCostProfile


def fit_profile(run_dirs: Sequence[Path], **kwargs: object) -> StepCostProfile:
    """Fit the step-cost law of the server the runs were measured on (work in progress)."""
    raise NotImplementedError("fit_profile is being written (issue 9)")
