"""The sweep and recommendation sections of the HTML report (``specgauge report``, ``specgauge sweep``).

Inputs it recognises among ``specgauge report``'s: a sweep directory (holding ``sweep.json``), a
``sweep.json``, a recommendation JSON (``specgauge recommend --json``). For a sweep it shows the cell
table, three plots — speedup vs concurrency per config (95 % CI bars; predictions dashed), p95 E2E
vs concurrency, throughput vs p95 latency with the Pareto front — the crossovers, and the
recommendation computed from it (unless a recommendation JSON was passed as well).
Text reaches the page through jinja2 autoescaping, plot labels HTML-escaped (plotly reads a subset of
HTML in labels).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specgauge.recommend.models import KIND as REC_KIND
from specgauge.recommend.models import Recommendation
from specgauge.i18n import en, t
from specgauge.report.figures import fig_html, plot_label, template_env
from specgauge.report.speedup_plot import speedup_vs_batch_html
from specgauge.sweep.models import MANIFEST, SweepManifest


class SweepSection(BaseModel):
    label: str
    manifest: SweepManifest
    recommendation: Recommendation | None = None
    notes: list[str] = Field(default_factory=list)


def _is_recommendation(path: Path) -> bool:
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        head = path.read_text(encoding="utf-8")[:400]
    except (OSError, UnicodeDecodeError):
        return False
    return f'"kind": "{REC_KIND}"' in head or f'"kind":"{REC_KIND}"' in head


def is_sweep(path: Path) -> bool:
    return (path.is_dir() and (path / MANIFEST).is_file()) or (path.name == MANIFEST and path.is_file())


def split_inputs(paths: Sequence[Path]) -> tuple[list[SweepSection], list[Recommendation], list[Path]]:
    """(sweeps, recommendations, everything else) among report inputs. A sweep is read once: its stored
    analysis and the recommendation ``specgauge sweep`` stored beside it (``recommend.sources.STORED``,
    used while it is not older than sweep.json); a sweep without them (interrupted, older, or run from
    the library) gets them computed here from that one reading (default margin)."""
    from specgauge.recommend.sources import STORED, RecommendError, recommend_from_manifest
    from specgauge.sweep.run import load_analysed

    sweeps: list[SweepSection] = []
    recs: list[Recommendation] = []
    rest: list[Path] = []
    for p in paths:
        p = Path(p)
        if is_sweep(p):
            d = p if p.is_dir() else p.parent
            m = load_analysed(d)
            sec = SweepSection(label=d.resolve().name, manifest=m)
            stored = d / STORED
            if stored.is_file() and stored.stat().st_mtime >= (d / MANIFEST).stat().st_mtime:
                sec.recommendation = Recommendation.model_validate(json.loads(stored.read_text(encoding="utf-8")))
            else:
                try:
                    sec.recommendation = recommend_from_manifest(m, d)
                except RecommendError as e:
                    sec.notes.append(en("rec.no_rec", why=str(e)))
            sweeps.append(sec)
        elif _is_recommendation(p):
            recs.append(Recommendation.model_validate(json.loads(p.read_text(encoding="utf-8"))))
        else:
            rest.append(p)
    if recs:
        for s in sweeps:
            s.recommendation = None  # the one passed explicitly is shown instead
    return sweeps, recs, rest


# ---------------------------------------------------------------------------- figures


def _speedup_vs_concurrency(a: Any, idx: int) -> str:
    """Measured speedup per config vs concurrency (95 % CI bars), predictions dashed: a sweep without a
    stored recommendation's curves."""
    import plotly.graph_objects as go

    done = [c for c in a.cells if c.status == "done"]
    sp = go.Figure()
    for label in a.labels:
        if label == a.baseline:
            continue
        cs = sorted((c for c in done if c.label == label and c.speedup is not None and c.speedup.estimate is not None),
                    key=lambda c: c.concurrency)
        if cs:
            sp.add_trace(go.Scatter(
                x=[c.concurrency for c in cs], y=[c.speedup.estimate for c in cs], mode="lines+markers", name=plot_label(label),
                error_y={"type": "data", "symmetric": False,
                         "array": [(c.speedup.high or c.speedup.estimate) - c.speedup.estimate for c in cs],
                         "arrayminus": [c.speedup.estimate - (c.speedup.low or c.speedup.estimate) for c in cs]}))
        ps = sorted((c for c in a.cells if c.label == label and c.predicted is not None and c.predicted.speedup is not None),
                    key=lambda c: c.concurrency)
        if ps:
            sp.add_trace(go.Scatter(x=[c.concurrency for c in ps], y=[c.predicted.speedup for c in ps], mode="lines",
                                    line={"dash": "dash"}, name=plot_label(t("sweep.fig.predicted", label=label))))
    if not sp.data:
        return ""
    sp.add_hline(y=1.0, line_dash="dot", line_color="grey")
    if a.min_speedup != 1.0:
        sp.add_hline(y=a.min_speedup, line_dash="dash", line_color="#b7791f")
    sp.update_layout(title=t("sweep.fig.speedup", base=plot_label(a.baseline)),
                     xaxis_title=t("sweep.fig.concurrency"), yaxis_title=t("sweep.fig.speedup_axis"),
                     xaxis={"type": "log", "tickvals": a.concurrencies})
    return fig_html(sp, f"sweep{idx}-speedup")


def sweep_figures(sec: SweepSection, idx: int) -> dict[str, str]:
    """The sweep's figures: speedup (vs batch per k with the recommendation's predicted curves when it
    stored them, else vs concurrency), p95 E2E latency and the throughput / latency Pareto plot."""
    import plotly.graph_objects as go

    a = sec.manifest.analysis
    if a is None:
        return {}
    out: dict[str, str] = {}
    done = [c for c in a.cells if c.status == "done"]
    curves = sec.recommendation.curves if sec.recommendation is not None else None
    speedup = speedup_vs_batch_html(curves, f"sweep{idx}-speedup") if curves is not None else ""
    speedup = speedup or _speedup_vs_concurrency(a, idx)
    if speedup:
        out["speedup"] = speedup
    lat = go.Figure()
    for label in a.labels:
        cs = sorted((c for c in done if c.label == label and c.e2e_p95_ms is not None), key=lambda c: c.concurrency)
        if cs:
            lat.add_trace(go.Scatter(x=[c.concurrency for c in cs], y=[c.e2e_p95_ms for c in cs], mode="lines+markers", name=plot_label(label)))
    if lat.data:
        lat.update_layout(title=t("sweep.fig.latency"), xaxis_title=t("sweep.fig.concurrency"), yaxis_title=t("sweep.fig.e2e_axis"),
                          xaxis={"type": "log", "tickvals": a.concurrencies})
        out["latency"] = fig_html(lat, f"sweep{idx}-latency")
    tl = go.Figure()
    for label in a.labels:
        cs = [c for c in done if c.label == label and c.e2e_p95_ms is not None and c.throughput_tok_s is not None]
        if cs:
            tl.add_trace(go.Scatter(x=[c.e2e_p95_ms for c in cs], y=[c.throughput_tok_s for c in cs], mode="markers", name=plot_label(label),
                                    text=[plot_label(f"{label} @ {c.concurrency}") for c in cs], marker={"size": 9},
                                    hovertemplate="%{text}<br>p95 %{x:.0f} ms, %{y:.1f} tok/s"))
    if a.pareto:
        front = sorted(a.pareto, key=lambda p: p.e2e_p95_ms)
        tl.add_trace(go.Scatter(x=[p.e2e_p95_ms for p in front], y=[p.throughput_tok_s for p in front], mode="lines+markers",
                                name=t("sweep.fig.pareto_front"), line={"color": "black", "dash": "dot"},
                                marker={"symbol": "circle-open", "size": 16, "color": "black"},
                                text=[plot_label(f"{p.label} @ {p.concurrency}") for p in front], hovertemplate="%{text}"))
    if tl.data:
        tl.update_layout(title=t("sweep.fig.pareto"), xaxis_title=t("sweep.fig.e2e_axis"), yaxis_title=t("sweep.fig.out_tps"))
        out["pareto"] = fig_html(tl, f"sweep{idx}-pareto")
    return out


def render_sections(sweeps: Sequence[SweepSection], recs: Sequence[Recommendation]) -> str:
    """The HTML fragment for every sweep and recommendation (empty when there are none)."""
    if not sweeps and not recs:
        return ""
    import jinja2

    from specgauge.report.sweep_console import choice, segment_line, status

    env = template_env(status=status, choice=choice, segment_line=segment_line)
    figs = [{k: jinja2.utils.markupsafe.Markup(v) for k, v in sweep_figures(s, i).items()} for i, s in enumerate(sweeps)]
    all_recs: list[Any] = [(s.label, s.recommendation) for s in sweeps if s.recommendation is not None]
    all_recs += [(r.source_name, r) for r in recs]
    return str(env.get_template("sweep.html.j2").render(sweeps=sweeps, figs=figs, recs=all_recs))
