"""Grid cells and per-cell predictions: the types the sweep and recommend code against."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from specgauge.errors import UserError


class ProfileError(UserError, ValueError):
    """A cost profile or its calibration runs cannot be used (names the file or run)."""


class CellSpec(BaseModel):
    """One grid cell: a server configuration at one client concurrency."""

    label: str  #: e.g. "off", "ngram-k4", "draft_model-k2"
    speculative_config: dict[str, Any] | None = None  #: vLLM --speculative-config JSON; None = no speculation
    concurrency: int = Field(ge=1)


class CellPrediction(BaseModel):
    """Predicted figures for one cell; ``speedup`` is compare's statistic against no speculation at
    the same concurrency: (Σ tok_c / Σ e2e_c) / (Σ tok_b / Σ e2e_b) over the same requests."""

    label: str
    method: str | None
    k: int
    concurrency: int
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    tpot_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    ttft_p95_ms: float | None = None
    throughput_tok_s: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    tokens_per_forward: float | None = None  #: mean tokens through the target per step (batch-flattened)
    #: more than ``predict.BEYOND_SHARE`` of the predicted time lies in steps past the calibration's range
    #: (tokens through a forward, batch size): the law's shape there was not measured
    extrapolated: bool = False
    beyond_range: float | None = None  #: share of the predicted step time past the measured range
    #: terms of the law the calibration did not identify and that move this cell's speedup by more than
    #: ``predict.UNIDENTIFIED_SHIFT`` within what the data allow (``host_par[suffix]``: a host proposer that
    #: stayed hidden in every calibrated step; ``knee``: a forward past the largest calibrated one); the
    #: band's low end is the worst case they allow, and a recommendation never chooses the cell on it
    unidentified: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
