"""``run_sweep``: the grid (``run_grid``), then the analysis, both kept in ``OUT/sweep.json``.

The analysis is written without predictions first and again with them, so a failing predictor
never costs a measured figure. A cost profile is read before any server starts (a bad file fails
fast); the prediction itself runs after the measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specgauge import units
from specgauge.errors import UserError
from specgauge.sweep.analysis import analyze, attach_predictions
from specgauge.sweep.grid import ServerConfig, build_configs, cells_for
from specgauge.sweep.models import PredictionInfo, SweepError, SweepManifest
from specgauge.sweep.runner import SweepResult, run_grid
from specgauge.sweep.target import ServerTarget

def parse_duration(text: str | None, flag: str = "--time-budget") -> float | None:
    """``30m``, ``30min``, ``1h30m``, ``90s``, ``90sec``, ``45`` (seconds) -> seconds (``units``' grammar);
    None for empty text."""
    return units.parse_duration(text, flag, SweepError) if text else None


class SweepConfig(BaseModel):
    """Everything ``specgauge sweep`` needs (the CLI fills it from flags)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    workload: list[Path] = Field(min_length=1)
    configs: list[ServerConfig] = Field(default_factory=list)  #: "off" is added when absent
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1)
    out_dir: Path = Path("results/sweep")
    num_prompts: int | None = Field(default=None, ge=1)
    seed: int = 0
    target: ServerTarget = Field(default_factory=ServerTarget)
    cost_profile: Path | None = None
    time_budget_s: float | None = Field(default=None, gt=0)
    resume: bool = False
    min_speedup: float = Field(default=1.0, gt=0, description="the crossover's threshold (1.0: break-even)")
    warmup: int = Field(default=1, ge=0)
    timeout: float = Field(default=600.0, gt=0)


def _load_profile(path: Path | None) -> Any:
    if path is None:
        return None
    from specgauge.predict import StepCostProfile

    return StepCostProfile.load(path)


def run_sweep(cfg: SweepConfig, console: Any = None) -> SweepResult:
    """Bench the grid, analyse it, write the analysis into sweep.json; returns the manifest."""
    configs = build_configs(cfg.configs)
    cells = cells_for(configs, cfg.concurrencies)
    profile = _load_profile(cfg.cost_profile)
    result = run_grid(cells, cfg.target, cfg.workload, cfg.out_dir, num_prompts=cfg.num_prompts, seed=cfg.seed,
                      time_budget_s=cfg.time_budget_s, resume=cfg.resume, console=console, warmup=cfg.warmup,
                      timeout=cfg.timeout)
    m = result.manifest
    info = PredictionInfo(profile=cfg.cost_profile.name if cfg.cost_profile else None, available=False,
                          reason=None if profile is not None else "no --cost-profile given")
    m.analysis = analyze(result.out_dir, m, min_speedup=cfg.min_speedup, prediction=info)
    m.save(result.out_dir)
    if profile is not None:
        from specgauge.predict import predict_cells

        try:
            mb = max(cfg.concurrencies) if cfg.target.kind == "embedded" else None  # the embedded server's --max-batch
            # one server per config over ascending concurrencies: a suffix cache remembers the earlier cells
            preds = predict_cells(profile, cfg.workload, cells, num_prompts=cfg.num_prompts, max_batch=mb,
                                  warmup=cfg.warmup, reused_server=True)
        except UserError as e:
            info.reason = f"prediction failed: {e}"
        else:
            attach_predictions(m.analysis, preds)
            info.available = True
        m.analysis.prediction = info
        m.save(result.out_dir)
    return result


def reanalyze(out_dir: Path, *, min_speedup: float = 1.0, manifest: SweepManifest | None = None) -> SweepManifest:
    """Recompute the analysis of an existing sweep directory (predictions already there are kept);
    ``manifest``: its sweep.json, already loaded."""
    m = manifest if manifest is not None else SweepManifest.load(out_dir)
    old = m.analysis
    m.analysis = analyze(out_dir, m, min_speedup=min_speedup, prediction=old.prediction if old else None)
    if old is not None:
        attach_predictions(m.analysis, [c.predicted for c in old.cells if c.predicted is not None])
    return m


def load_analysed(out_dir: Path) -> SweepManifest:
    """A sweep directory's manifest, read once, with its stored analysis (computed only for a sweep.json
    that has none: an interrupted or older sweep)."""
    m = SweepManifest.load(out_dir)
    return m if m.analysis is not None else reanalyze(out_dir, manifest=m)
