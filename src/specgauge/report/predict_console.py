"""Console rendering of a fitted step-cost profile, its calibration check and predictions (rich).
Data in, tables out; nothing here computes a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.predict.law import DESCRIPTIONS
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellPrediction


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v * 1e3:.4g}"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _meaning(name: str) -> str:
    base = name.split("[")[0]
    if name == "ell":
        return "HTTP round trip: request sent -> admitted, and last chunk -> client"
    text = DESCRIPTIONS.get(base, "")
    return f"{text} ({name[len(base) + 1:-1]})" if "[" in name else text


def render_profile_fit(p: StepCostProfile, console: Console) -> None:
    t = Table(title=f"Step-cost law (verification shape: {p.shape}); milliseconds, 95 % band from "
                    f"{len(p.bootstrap)} refits on resampled requests", title_justify="left")
    for col in ("parameter", "value", "2.5 %", "97.5 %", "meaning"):
        t.add_column(col, justify="left" if col in ("parameter", "meaning") else "right")
    for name, v, lo, hi in p.describe():
        t.add_row(escape(name), _ms(v), _ms(lo), _ms(hi), escape(_meaning(name)))
    console.print(t)
    r = p.residuals
    shapes = r.get("shapes", {})
    if len(shapes) > 1:
        conf = r.get("shape_confidence")
        console.print("shapes (squared error, lower fits better): " + ", ".join(f"{k} {v:.4g}" for k, v in shapes.items())
                      + (f"; {p.shape} fits better in {conf:.0%} of resamples" if conf is not None else ""),
                      highlight=False, markup=False)
    console.print(f"residuals: {r.get('rows', 0)} rows ({r.get('ttft_rows', 0)} TTFT), {r.get('rows_dropped_as_outliers', 0)} "
                  f"dropped as outliers; step RMSE {r.get('step_rmse_ms', '–')} ms on a mean step of {r.get('mean_step_ms', '–')} ms "
                  f"(relative {r.get('relative_rmse', '–')})", highlight=False, markup=False)
    for run, pr in r.get("per_run", {}).items():
        ratio = pr["decode_time_predicted_over_measured"]
        console.print(f"  {run}: predicted / measured decode time {'–' if ratio is None else f'{ratio:.3f}'} "
                      f"over {pr['rows']} requests", highlight=False, markup=False)
    m = p.measured
    console.print(f"measured range: up to {m.max_tokens_per_forward:.0f} tokens per forward, batch up to {m.max_batch:.0f}, "
                  f"concurrency {','.join(map(str, m.concurrencies))}; methods "
                  + ", ".join(f"{k} (k={','.join(map(str, v))})" for k, v in m.methods.items()), highlight=False, markup=False)
    for run, c in p.replay_checks.items():
        if "gap" in c:
            console.print(f"  replay vs server {run}: acceptance {c['replayed_acceptance']:.1%} replayed, "
                          f"{c['live_acceptance']:.1%} live; {c['identical_requests']}/{c['requests']} requests identical",
                          highlight=False, markup=False)
    for n in p.notes:
        console.print(f"note: {n}", highlight=False, markup=False)


def render_calibration(res: Any, console: Console) -> None:
    render_profile_fit(res.profile, console)
    if res.checks:
        t = Table(title="Calibration cells: predicted beside measured speedup (compare's statistic vs no speculation)",
                  title_justify="left")
        for col in ("config", "concurrency", "predicted", "band", "measured", "95 % CI", "error"):
            t.add_column(col, justify="left" if col == "config" else "right")
        for c in res.checks:
            t.add_row(escape(c.label), str(c.concurrency), _x(c.predicted), f"{_x(c.predicted_low)}–{_x(c.predicted_high)}",
                      _x(c.measured), f"{_x(c.measured_low)}–{_x(c.measured_high)}",
                      "–" if c.error is None else f"{100 * c.error:+.1f}%")
        console.print(t)
    console.print(f"cost profile: {res.profile_path}", highlight=False, markup=False)


def render_predictions(p: StepCostProfile, preds: Sequence[CellPrediction], console: Console) -> None:
    t = Table(title=f"Predicted from the calibrated step-cost law ({p.shape} verification; server "
                    f"{escape(str(p.provenance.get('model') or '?'))}, calibrated {escape(str(p.provenance.get('date', '?')))})",
              title_justify="left")
    for col in ("config", "C", "speedup", "band", "TPOT ms", "E2E p50/p95 ms", "TTFT p95 ms", "tok/s", "acceptance",
                "tok/forward", ""):
        t.add_column(col, justify="left" if col in ("config", "") else "right")
    for c in preds:
        flag = "extrapolated" if c.extrapolated else ""
        t.add_row(escape(c.label), str(c.concurrency), _x(c.speedup), f"{_x(c.speedup_low)}–{_x(c.speedup_high)}",
                  "–" if c.tpot_ms is None else f"{c.tpot_ms:.1f}",
                  "–" if c.e2e_p50_ms is None else f"{c.e2e_p50_ms:.0f}/{c.e2e_p95_ms:.0f}",
                  "–" if c.ttft_p95_ms is None else f"{c.ttft_p95_ms:.0f}",
                  "–" if c.throughput_tok_s is None else f"{c.throughput_tok_s:.1f}",
                  "–" if c.acceptance_rate is None else f"{100 * c.acceptance_rate:.1f}%",
                  "–" if c.tokens_per_forward is None else f"{c.tokens_per_forward:.1f}", flag)
    console.print(t)
    seen: set[str] = set()
    for c in preds:
        for n in c.notes:
            if n not in seen:
                seen.add(n)
                console.print(f"note ({c.label}, C={c.concurrency}): {n}", highlight=False, markup=False)
