"""Predicted speedup against batch size, per configuration (k), with measured points: the data of the
report's speedup-vs-batch plot (``report.speedup_plot`` renders it; it computes nothing).

``speedup_curves`` groups per-cell predictions (``predict.CellPrediction``: estimate and band) and
measured speedups (compare's estimate and 95 % CI) by configuration, each series sorted by batch
size (the client concurrency a closed loop holds), and carries the margin and, when there is one, the
recommended ``num_speculative_tokens_per_batch_size`` schedule, so the plot can show where k changes
and where speculation stops paying ("off" is not k = 0: vLLM #49548). ``curves_from_analysis`` does the
same from a sweep's analysis (its measured cells and the predictions attached to them); the
recommendation stores the result (``Recommendation.curves``), which the report draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from specgauge.config import MIN_SPEEDUP
from specgauge.predict.types import CellPrediction
from specgauge.sweep.models import SweepAnalysis


class CurvePoint(BaseModel):
    batch: int
    estimate: float
    low: float | None = None
    high: float | None = None


class SpeedupCurve(BaseModel):
    label: str
    method: str | None = None
    k: int = 0
    predicted: list[CurvePoint] = Field(default_factory=list)
    measured: list[CurvePoint] = Field(default_factory=list)


class SpeedupCurves(BaseModel):
    min_speedup: float = MIN_SPEEDUP
    baseline: str = "off"  #: the configuration the speedups are against
    curves: list[SpeedupCurve] = Field(default_factory=list)
    schedule: list[list[int]] | None = None  #: [start, end, k] ranges of the recommended schedule
    stops_paying_at: int | None = None  #: first batch size of a trailing k = 0 range (off beyond it)


def speedup_curves(predictions: Sequence[CellPrediction],
                   measured: Mapping[tuple[str, int], tuple[float | None, float | None, float | None]] | None = None,
                   min_speedup: float = MIN_SPEEDUP, schedule: list[list[int]] | None = None) -> SpeedupCurves:
    """One curve per configuration label (speculative cells only), points sorted by batch size."""
    out: dict[str, SpeedupCurve] = {}
    for p in predictions:
        if p.method is None or p.speedup is None:
            continue
        c = out.setdefault(p.label, SpeedupCurve(label=p.label, method=p.method, k=p.k))
        c.predicted.append(CurvePoint(batch=p.concurrency, estimate=p.speedup, low=p.speedup_low, high=p.speedup_high))
    for (label, batch), (est, lo, hi) in (measured or {}).items():
        if est is None:
            continue
        c = out.setdefault(label, SpeedupCurve(label=label))
        c.measured.append(CurvePoint(batch=batch, estimate=est, low=lo, high=hi))
    for c in out.values():
        c.predicted.sort(key=lambda q: q.batch)
        c.measured.sort(key=lambda q: q.batch)
    stops = schedule[-1][0] if schedule and schedule[-1][2] == 0 else None
    return SpeedupCurves(min_speedup=min_speedup, curves=list(out.values()), schedule=schedule, stops_paying_at=stops)


def curves_from_analysis(a: SweepAnalysis, min_speedup: float = MIN_SPEEDUP,
                         schedule: list[list[int]] | None = None) -> SpeedupCurves:
    """The curves of a sweep: each speculative configuration's measured speedups (finished cells, 95 % CI)
    and the predictions attached to its cells (``sweep --cost-profile``), against the sweep's baseline."""
    preds = [c.predicted for c in a.cells if c.predicted is not None and c.label != a.baseline]
    measured = {c.key: (c.speedup.estimate, c.speedup.low, c.speedup.high) for c in a.cells
                if c.label != a.baseline and c.status == "done" and c.speedup is not None}
    out = speedup_curves(preds, measured, min_speedup, schedule)
    kinds = {c.label: (c.method, c.k) for c in a.cells}
    for c in out.curves:
        if c.method is None and c.label in kinds:
            c.method, c.k = kinds[c.label]
    out.baseline = a.baseline or out.baseline
    return out
