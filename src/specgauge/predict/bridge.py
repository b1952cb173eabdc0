"""Calibrated predictions for ``specgauge simulate --cost-profile FILE`` (a fitted profile): one cell per
replayed method × k × batch size, for all requests and per segment, as simulate's prediction rows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specgauge.predict.predict import predict_cells
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.replay import WorkloadReplay
from specgauge.predict.types import CellPrediction, CellSpec


def method_config(kind: str, drafter_options: dict[str, Any]) -> dict[str, Any]:
    """vLLM's --speculative-config for one of simulate's methods at one k (its resolved drafter options)."""
    if kind == "draft_model":
        return {"model": drafter_options["model"], "num_speculative_tokens": drafter_options["num_speculative_tokens"]}
    return {"method": kind, **drafter_options}


def predict_grid(profile: StepCostProfile, workload: Sequence[Path], methods: Sequence[tuple[str, str, Any]],
                 ks: Sequence[int], batch_sizes: Sequence[int], *, load: Any = None, segments: Sequence[str] = (),
                 tokenizer: Any = None) -> dict[str, dict[tuple[str, int, int], CellPrediction]]:
    """``methods``: (label, kind, options_for_k callable). Returns segment ("" = all) -> (label, k, batch) -> prediction."""
    cells: list[CellSpec] = []
    keys: list[tuple[str, int, int]] = []
    for label, kind, options_for_k in methods:
        for k in ks:
            spec = method_config(kind, options_for_k(k))
            for b in batch_sizes:
                cells.append(CellSpec(label=f"{label}-k{k}", speculative_config=spec, concurrency=b))
                keys.append((label, k, b))
    out: dict[str, dict[tuple[str, int, int], CellPrediction]] = {}
    for seg in ["", *segments]:
        rp = WorkloadReplay(workload, tokenizer, None, load=load, segment=seg or None)
        preds = predict_cells(profile, workload, cells, replay=rp)
        out[seg] = dict(zip(keys, preds, strict=True))
    return out
