"""The sweep's data: the ``sweep.json`` manifest (cells and their status) and the analysis in it.

``sweep.json`` is replaced atomically (write a temporary file, rename) after every change of a cell's
status, so an interrupted sweep loses nothing already measured: every finished cell's directory and
status are on disk, and ``--resume`` skips them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from specgauge.config import format_validation_error
from specgauge.errors import UserError
from specgauge.paths import portable_specs, resolve_specs
from specgauge.predict.types import CellPrediction
from specgauge.stats.compare import CI

MANIFEST = "sweep.json"
KIND = "specgauge.sweep"
CellStatus = Literal["pending", "running", "done", "failed", "skipped", "interrupted"]


class SweepError(UserError):
    """A sweep problem the user can fix (flags, an existing output directory, an unreadable sweep.json)."""


class CellRun(BaseModel):
    """One cell of the grid (a configuration at one concurrency) and what happened to it."""

    label: str
    concurrency: int
    speculative_config: dict[str, Any] | None = None
    dir: str  #: the cell's bench output directory, relative to the sweep directory
    status: CellStatus = "pending"
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    requests: int | None = None
    failed: int | None = None
    error: str | None = None
    skipped_reason: str | None = None
    server_log: str | None = None  #: relative to the sweep directory

    @property
    def key(self) -> tuple[str, int]:
        return self.label, self.concurrency


class SweepSettings(BaseModel):
    """What every cell shares; a resumed sweep must use the same (pairing by request id needs it)."""

    workload: list[str]  #: as ``specgauge.paths.portable_path`` writes them (relative to the sweep directory)
    num_prompts: int | None = None
    seed: int = 0


class SegmentSpeedup(BaseModel):
    segment: str
    pairs: int
    speedup: CI


class CellResult(BaseModel):
    """Measured figures of one cell; speedup and equivalence against the baseline at the same concurrency."""

    label: str
    method: str | None
    k: int
    concurrency: int
    status: CellStatus
    speculative_config: dict[str, Any] | None = None
    requests: int = 0
    completed: int = 0
    failed: int = 0
    failure_rate: float | None = None
    duration_s: float | None = None
    throughput_tok_s: float | None = None  #: output tokens/s over the run
    request_throughput: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    acceptance_source: str | None = None
    speedup: CI | None = None  #: compare's paired speedup vs the baseline (None for the baseline itself)
    throughput_ratio: float | None = None  #: run-level output throughput / the baseline's
    e2e_p95_delta_ms: CI | None = None
    segments: list[SegmentSpeedup] = Field(default_factory=list)
    greedy_pairs: int = 0
    greedy_matches: int = 0
    greedy_match_rate: float | None = None
    predicted: CellPrediction | None = None
    prediction_error: float | None = None  #: predicted speedup / measured − 1
    prediction_in_ci: bool | None = None
    on_pareto: bool = False
    notes: list[str] = Field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return self.label, self.concurrency


class ParetoPoint(BaseModel):
    label: str
    concurrency: int
    throughput_tok_s: float
    e2e_p95_ms: float


class Crossover(BaseModel):
    """Where one configuration stops paying as concurrency grows.

    ``concurrency``: where the speedup estimate crosses ``threshold``, interpolated linearly in
    log2(concurrency) between the two measured concurrencies around it. From the CIs:
    ``clearly_pays_up_to`` is the largest concurrency up to which every CI lies above the threshold,
    ``clearly_stops_by`` the smallest concurrency whose CI lies entirely below it."""

    label: str
    threshold: float
    status: Literal["pays_throughout", "never_pays", "stops_paying", "starts_paying", "mixed", "no_data"]
    concurrency: float | None = None
    between: list[int] | None = None
    clearly_pays_up_to: int | None = None
    clearly_stops_by: int | None = None
    text: str = ""


class PredictionInfo(BaseModel):
    profile: str | None = None  #: the cost profile file's name
    available: bool = False
    reason: str | None = None


class SweepAnalysis(BaseModel):
    baseline: str
    min_speedup: float
    concurrencies: list[int]
    labels: list[str]
    segments: list[str] = Field(default_factory=list)
    cells: list[CellResult] = Field(default_factory=list)
    pareto: list[ParetoPoint] = Field(default_factory=list)
    crossovers: list[Crossover] = Field(default_factory=list)
    prediction: PredictionInfo = Field(default_factory=PredictionInfo)
    notes: list[str] = Field(default_factory=list)

    def cell(self, label: str, concurrency: int) -> CellResult | None:
        return next((c for c in self.cells if c.label == label and c.concurrency == concurrency), None)


class SweepManifest(BaseModel):
    kind: Literal["specgauge.sweep"] = KIND
    version: int = 1
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    settings: SweepSettings
    target: dict[str, Any] = Field(default_factory=dict)
    time_budget_s: float | None = None
    cells: list[CellRun] = Field(default_factory=list)
    analysis: SweepAnalysis | None = None
    notes: list[str] = Field(default_factory=list)

    def cell(self, label: str, concurrency: int) -> CellRun | None:
        return next((c for c in self.cells if c.label == label and c.concurrency == concurrency), None)

    def by_status(self, *status: str) -> list[CellRun]:
        return [c for c in self.cells if c.status in status]

    def save(self, out_dir: Path) -> Path:
        """Atomic replace of ``out_dir/sweep.json``."""
        self.updated_at = time.time()
        path = out_dir / MANIFEST
        tmp = path.with_name(path.name + ".tmp")
        data = portable_specs(self.model_dump(mode="json"), out_dir)  # a draft model's directory: no machine path
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, allow_nan=False), encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: Path) -> SweepManifest:
        """From ``sweep.json`` or the directory holding it."""
        if not path.exists():
            raise SweepError(f"{path}: no such file or directory (expected a sweep directory holding {MANIFEST})")
        p = path / MANIFEST if path.is_dir() else path
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SweepError(f"{path}: no {MANIFEST} here (is it a sweep output directory?)") from None
        except (OSError, UnicodeDecodeError) as e:
            raise SweepError(f"{p}: cannot read: {e}") from None
        except json.JSONDecodeError as e:
            raise SweepError(f"{p}:{e.lineno}: not JSON ({e.msg})") from None
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise SweepError(f"{p}: not a specgauge sweep manifest (kind {KIND!r} expected)")
        try:
            return cls.model_validate(resolve_specs(data, p.parent))
        except ValidationError as e:
            raise SweepError(f"{p}: {format_validation_error(e)}") from None
