"""Predict per-cell figures from a profile and an offline replay of the workload."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellPrediction, CellSpec


def predict_cells(profile: StepCostProfile, workload: Sequence[Path], cells: Sequence[CellSpec], *, tokenizer: Any = None,
                  num_prompts: int | None = None, **kwargs: Any) -> list[CellPrediction]:
    """Predicted figures per cell (work in progress)."""
    raise NotImplementedError("predict_cells is being written (issue 9)")
