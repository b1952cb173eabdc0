"""Where a recommendation's options come from: a sweep (measured) or replay + calibration (predicted)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specgauge.errors import UserError
from specgauge.i18n import en
from specgauge.predict.types import CellPrediction
from specgauge.recommend.build import RecommendSettings, recommend
from specgauge.recommend.curves import curves_from_analysis, speedup_curves
from specgauge.recommend.models import Option, Recommendation
from specgauge.sweep.models import SweepAnalysis, SweepManifest


class RecommendError(UserError):
    pass


def options_from_analysis(a: SweepAnalysis, max_divergence: float = 0.02) -> tuple[list[Option], dict[str, list[Option]], list[str]]:
    """Measured options (overall and per segment) from a sweep's analysis, and notes.

    A configuration is left out at a concurrency where it changed more than ``max_divergence`` of its
    greedy outputs (speculation must not change a temperature-0 output), or failed more requests than
    the baseline did there."""
    opts: list[Option] = []
    segs: dict[str, list[Option]] = {}
    notes: list[str] = []
    for c in a.cells:
        if c.label == a.baseline or c.status != "done" or c.speedup is None:
            continue
        if c.greedy_pairs and (c.greedy_pairs - c.greedy_matches) > max_divergence * c.greedy_pairs:
            notes.append(f"{c.label} at concurrency {c.concurrency} left out: it changed {c.greedy_pairs - c.greedy_matches} of "
                         f"{c.greedy_pairs} greedy outputs (the server's speculation is not lossless there)")
            continue
        base = a.cell(a.baseline, c.concurrency)
        if c.failed > (base.failed if base is not None else 0):
            notes.append(f"{c.label} at concurrency {c.concurrency} left out: {c.failed} of {c.requests} requests failed, "
                         f"{base.failed if base is not None else 0} without speculation")
            continue
        common = {"label": c.label, "method": c.method, "k": c.k, "concurrency": c.concurrency, "source": "measured",
                  "speculative_config": c.speculative_config}
        opts.append(Option(**common, estimate=c.speedup.estimate, low=c.speedup.low, high=c.speedup.high, pairs=c.speedup.n))  # type: ignore[arg-type]
        for sg in c.segments:
            segs.setdefault(sg.segment, []).append(Option(**common, estimate=sg.speedup.estimate, low=sg.speedup.low,  # type: ignore[arg-type]
                                                          high=sg.speedup.high, pairs=sg.pairs))
    skipped = [c for c in a.cells if c.status != "done"]
    if skipped:
        notes.append(f"{len(skipped)} cell(s) not measured ({', '.join(f'{c.label}@{c.concurrency}: {c.status}' for c in skipped[:6])}"
                     f"{', …' if len(skipped) > 6 else ''}): the recommendation covers the measured ones only")
    return opts, segs, notes


#: the recommendation ``specgauge sweep`` stores beside sweep.json (default settings), for the report
STORED = "recommendation.json"


def recommend_from_sweep(sweep_dir: Path, settings: RecommendSettings | None = None) -> Recommendation:
    """The recommendation from a sweep directory (its analysis is recomputed when sweep.json has none)."""
    from specgauge.sweep.run import load_analysed

    return recommend_from_manifest(load_analysed(sweep_dir), sweep_dir, settings)


def recommend_from_manifest(m: SweepManifest, sweep_dir: Path, settings: RecommendSettings | None = None) -> Recommendation:
    """The recommendation from a sweep's analysed manifest (read from ``sweep_dir``)."""
    a = m.analysis
    assert a is not None, "an analysed manifest (sweep.run.load_analysed)"
    if not a.baseline:
        raise RecommendError(f"{sweep_dir}: the sweep has no configuration without speculation; nothing to measure speedups against")
    opts, segs, notes = options_from_analysis(a)
    if not opts and not any(c.status == "done" for c in a.cells):
        raise RecommendError(f"{sweep_dir}: no finished cell in the sweep; run or resume it first (specgauge sweep --resume)")
    name = Path(sweep_dir).resolve().name if Path(sweep_dir).is_dir() else Path(sweep_dir).resolve().parent.name
    rec = recommend(opts, a.concurrencies, source="sweep", source_name=name, settings=settings,
                    segment_options=segs if len(segs) > 1 else None, notes=notes + a.notes)
    rec.curves = curves_from_analysis(a, rec.min_speedup, rec.schedule)
    return rec


def store_recommendation(m: SweepManifest, sweep_dir: Path) -> Path | None:
    """Compute the default recommendation of a finished sweep once and store it beside sweep.json
    (``STORED``), where the report reads it; None when the sweep gives none (the report says why)."""
    if m.analysis is None:
        return None
    try:
        rec = recommend_from_manifest(m, sweep_dir)
    except RecommendError:
        return None
    path = Path(sweep_dir) / STORED
    path.write_text(rec.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return path


def options_from_predictions(preds: Sequence[CellPrediction]) -> tuple[list[Option], list[str]]:
    opts, notes = [], []
    for p in preds:
        if p.method is None:
            continue
        o = Option(label=p.label, method=p.method, k=p.k, concurrency=p.concurrency, estimate=p.speedup,
                   low=p.speedup_low, high=p.speedup_high, source="predicted", notes=list(p.notes),
                   unidentified=list(p.unidentified))
        if p.unidentified:
            notes.append(en("rec.n.unidentified", label=p.label, c=p.concurrency, terms=", ".join(p.unidentified)))
        if p.extrapolated:
            o.notes.append("extrapolated past the largest tokens per forward measured in calibration")
            notes.append(f"{p.label} at concurrency {p.concurrency}: extrapolated past what calibration measured")
        if p.speedup is not None and (p.speedup_low is None or p.speedup_high is None):
            notes.append(f"{p.label} at concurrency {p.concurrency}: no prediction band; it cannot clear the margin")
        opts.append(o)
    return opts, notes


class PredictedRecommendConfig(BaseModel):
    """``specgauge recommend --cost-profile FILE [WORKLOAD] --method … --k … --concurrency …``."""

    model_config = ConfigDict(extra="forbid")

    cost_profile: Path
    workload: list[Path] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    ks: list[int] = Field(min_length=1)
    concurrencies: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16], min_length=1)
    num_prompts: int | None = Field(default=None, ge=1)
    settings: RecommendSettings = Field(default_factory=RecommendSettings)


def recommend_from_profile(cfg: PredictedRecommendConfig) -> Recommendation:
    """Replay + calibration: predicted speedups with their bands, then the same choice as from a sweep."""
    from specgauge.predict import StepCostProfile, predict_cells
    from specgauge.sweep.grid import build_configs, cells_for, expand_grid

    profile = StepCostProfile.load(cfg.cost_profile)
    configs = build_configs(expand_grid(cfg.methods, cfg.ks))
    cells = cells_for(configs, cfg.concurrencies)
    # attach the config to each prediction by label (predictions carry label, method and k)
    spec_of = {c.label: c.speculative_config for c in configs}
    try:
        preds = predict_cells(profile, cfg.workload, cells, num_prompts=cfg.num_prompts)
    except NotImplementedError as e:
        raise RecommendError(f"--cost-profile: the predictor is not available in this version ({e}); recommend from a sweep instead") from None
    opts, notes = options_from_predictions(preds)
    for o in opts:
        o.speculative_config = spec_of.get(o.label)
    rec = recommend(opts, cfg.concurrencies, source="prediction", source_name=cfg.cost_profile.name, settings=cfg.settings, notes=notes)
    rec.curves = speedup_curves(preds, None, rec.min_speedup, rec.schedule)
    return rec
