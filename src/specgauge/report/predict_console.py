"""Console rendering of a fitted step-cost profile, its calibration check and predictions (rich).
Data in, tables out; nothing here computes a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.i18n import t, translate
from specgauge.predict.law import DESCRIPTIONS, KNEE
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellPrediction


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v * 1e3:.4g}"


def _tokens(v: float | None) -> str:
    return "–" if v is None else f"{v:.0f} tok"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def _meaning(name: str) -> str:
    base = name.split("[")[0]
    if name == "ell":
        return t("predict.ell")
    text = translate(DESCRIPTIONS.get(base, ""))
    return f"{text} ({name[len(base) + 1:-1]})" if "[" in name else text


def render_profile_fit(p: StepCostProfile, console: Console) -> None:
    tb = Table(title=t("predict.law_title", shape=p.shape, n=len(p.bootstrap)), title_justify="left")
    for i, col in enumerate((t("predict.c.parameter"), t("predict.c.value"), "2.5 %", "97.5 %", t("predict.c.meaning"))):
        tb.add_column(col, justify="left" if i in (0, 4) else "right")
    for name, v, lo, hi in p.describe():
        f = _tokens if name == KNEE else _ms  # the knee is a position in tokens per forward, not a cost
        tb.add_row(escape(name), f(v), f(lo), f(hi), escape(_meaning(name)))
    console.print(tb)
    r = p.residuals
    shapes = r.get("shapes", {})
    if len(shapes) > 1:
        conf = r.get("shape_confidence")
        console.print(t("predict.shapes", shapes=", ".join(f"{k} {v:.4g}" for k, v in shapes.items()))
                      + (t("predict.shape_conf", shape=p.shape, conf=f"{conf:.0%}") if conf is not None else ""),
                      highlight=False, markup=False)
    console.print(t("predict.residuals", rows=r.get("rows", 0), ttft=r.get("ttft_rows", 0), dropped=r.get("rows_dropped_as_outliers", 0),
                    rmse=r.get("step_rmse_ms", "–"), mean=r.get("mean_step_ms", "–"), rel=r.get("relative_rmse", "–")),
                  highlight=False, markup=False)
    for run, pr in r.get("per_run", {}).items():
        ratio = pr["decode_time_predicted_over_measured"]
        console.print(t("predict.per_run", run=run, ratio="–" if ratio is None else f"{ratio:.3f}", n=pr["rows"]),
                      highlight=False, markup=False)
    m = p.measured
    console.print(t("predict.range", tpf=f"{m.max_tokens_per_forward:.0f}", b=f"{m.max_batch:.0f}", cs=",".join(map(str, m.concurrencies)),
                    methods=", ".join(f"{k} (k={','.join(map(str, v))})" for k, v in m.methods.items())), highlight=False, markup=False)
    for run, c in p.replay_checks.items():
        if "gap" in c:
            console.print(t("predict.replay_check", run=run, rep=f"{c['replayed_acceptance']:.1%}", live=f"{c['live_acceptance']:.1%}",
                            same=c["identical_requests"], n=c["requests"]), highlight=False, markup=False)
    for n in p.notes:
        console.print(t("predict.note", text=translate(n)), highlight=False, markup=False)


def render_calibration(res: Any, console: Console) -> None:
    render_profile_fit(res.profile, console)
    if res.checks:
        tb = Table(title=t("predict.cal_title"), title_justify="left")
        for i, col in enumerate(("config", "concurrency", "predicted", "band", "measured", "ci", "error")):
            tb.add_column(t(f"predict.c.{col}"), justify="left" if i == 0 else "right")
        for c in res.checks:
            tb.add_row(escape(c.label), str(c.concurrency), _x(c.predicted), f"{_x(c.predicted_low)}–{_x(c.predicted_high)}",
                      _x(c.measured), f"{_x(c.measured_low)}–{_x(c.measured_high)}",
                      "–" if c.error is None else f"{100 * c.error:+.1f}%")
        console.print(tb)
    for pt in getattr(res, "identified", []):
        console.print(t("predict.identified", term=pt.term, label=pt.label, c=pt.concurrency), highlight=False, markup=False)
    for pt in getattr(res, "proposed", []):
        console.print(t("predict.proposed", term=pt.term, label=pt.label, c=pt.concurrency, why=pt.why), highlight=False, markup=False)
    console.print(t("predict.profile_path", path=res.profile_path), highlight=False, markup=False)


def render_predictions(p: StepCostProfile, preds: Sequence[CellPrediction], console: Console) -> None:
    tb = Table(title=t("predict.title", shape=p.shape, model=escape(str(p.provenance.get("model") or "?")),
                       date=escape(str(p.provenance.get("date", "?")))), title_justify="left")
    cols = (t("predict.c.config"), "C", t("predict.c.speedup"), t("predict.c.band"), "TPOT ms", "E2E p50/p95 ms", "TTFT p95 ms", "tok/s",
            t("predict.c.acceptance"), t("predict.c.tok_forward"), "")
    for i, col in enumerate(cols):
        tb.add_column(col, justify="left" if i in (0, len(cols) - 1) else "right")
    for c in preds:
        flag = t("predict.extrapolated") if c.extrapolated else ""
        tb.add_row(escape(c.label), str(c.concurrency), _x(c.speedup), f"{_x(c.speedup_low)}–{_x(c.speedup_high)}",
                  "–" if c.tpot_ms is None else f"{c.tpot_ms:.1f}",
                  "–" if c.e2e_p50_ms is None else f"{c.e2e_p50_ms:.0f}/{c.e2e_p95_ms:.0f}",
                  "–" if c.ttft_p95_ms is None else f"{c.ttft_p95_ms:.0f}",
                  "–" if c.throughput_tok_s is None else f"{c.throughput_tok_s:.1f}",
                  "–" if c.acceptance_rate is None else f"{100 * c.acceptance_rate:.1f}%",
                  "–" if c.tokens_per_forward is None else f"{c.tokens_per_forward:.1f}", flag)
    console.print(tb)
    seen: set[str] = set()
    for c in preds:
        for n in c.notes:
            if n not in seen:
                seen.add(n)
                console.print(t("predict.cell_note", label=c.label, c=c.concurrency, text=translate(n)), highlight=False, markup=False)


def render_k_comparison(cmp: Any, console: Console) -> None:
    """A ``recommend.variants.KComparison``: one row per concurrency, one column per fixed k, the schedule
    (and adaptive verification where it exists)."""
    labels = list(dict.fromkeys((r.variant, r.label) for r in cmp.rows))
    tb = Table(title=t("variants.title", method=escape(cmp.method)), title_justify="left")
    tb.add_column("C", justify="right")
    for variant, label in labels:
        tb.add_column(escape(label if variant == "fixed" else f"{t(f'variants.c.{variant}')}: {label}"), justify="right")
    for c in sorted({r.concurrency for r in cmp.rows}):
        cells = []
        for variant, label in labels:
            r = next((x for x in cmp.rows if x.concurrency == c and (x.variant, x.label) == (variant, label)), None)
            if r is None or r.speedup is None:
                cells.append("–")
            else:
                cells.append(f"{r.speedup:.3f} [{_x(r.speedup_low)}, {_x(r.speedup_high)}]" + ("?" if r.unidentified else ""))
        tb.add_row(str(c), *cells)
    console.print(tb)
    if cmp.schedule:
        console.print(t("variants.schedule", schedule=cmp.schedule), highlight=False, markup=False)
    for r in {x.reason for x in cmp.rows if x.reason}:
        console.print(t("predict.note", text=translate(r)), highlight=False, markup=False)
