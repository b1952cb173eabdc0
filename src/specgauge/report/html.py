"""``specgauge report``: one self-contained HTML file, plus the same data as JSON and CSV.

Self-contained: plotly's JavaScript is embedded inline once, every figure is a div plus an inline
script; nothing is fetched when the file is viewed (no ``<script src=http…>``, no fonts, no CDN).
Safety: every string from a run (prompts, outputs, ids, segment and file names) reaches the page
through jinja2 autoescaping, or through plotly's JSON (which escapes ``<``) after HTML-escaping, so
a ``<script>`` in a prompt is shown, never run. ``--redact`` replaces prompts and outputs by short
hashes everywhere (HTML, JSON, CSV).

Each section appears when its data was passed and says what to pass when it was not.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from specgauge.errors import UserError
from specgauge.i18n import check_lang, en, t, translate, use_lang
from specgauge.recommend.models import Recommendation
from specgauge.report.canary_html import (
    CanarySection,
    load_canary,
    render_canaries,
    split_canaries,
)
from specgauge.report.field_html import render_field
from specgauge.report.figures import fig_html, plot_label, template_env
from specgauge.report.runs import LoadedRun, load_run
from specgauge.report.sweep_html import SweepSection, render_sections, split_inputs
from specgauge.simulate.cost_model import UNCALIBRATED
from specgauge.simulate.run import SimulateResult
from specgauge.stats.latency import per_token_itls, tpot
from specgauge.stats.memory import MemoryFigure, run_memory
from specgauge.stats.verdict import ComparisonResult
from specgauge.workload.profile import WorkloadProfile

SAMPLES_PER_RUN = 5
TEXT_CHARS = 400
CDF_POINTS = 400


class ReportError(UserError):
    pass


class ReportConfig(BaseModel):
    inputs: list[Path] = Field(min_length=1)
    out: Path = Path("report.html")
    redact: bool = False
    json_out: Path | None = None
    csv_out: Path | None = None
    title: str | None = None  #: None: "specgauge report" in the report's language
    lang: str | None = None  #: en | ko; None: from the locale (LC_ALL / LC_MESSAGES / LANG starting with ko)


class RunRow(BaseModel):
    """One bench run, summarised (also the CSV row)."""

    label: str
    path: str
    speculative: bool | None
    max_concurrency: int | None
    requests: int
    failed: int
    output_throughput: float | None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p95_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position: list[float] = Field(default_factory=list)
    #: where the acceptance came from: "per-request" counts or the run's /metrics "counters" diff
    acceptance_origin: str | None = None
    acceptance_note: str | None = None  #: the source in words, or why there is none
    memory: list[MemoryFigure] = Field(default_factory=list)  #: device / KV / weight memory measured in the run


class Sample(BaseModel):
    run: str
    id: str
    segment: str
    ok: bool
    output_tokens: int | None
    prompt: str | None  #: None: the workload was not available
    output: str


class ReportData(BaseModel):
    title: str
    lang: str = "en"
    generated_at: float
    redacted: bool
    inputs: list[dict[str, str]]
    profile: WorkloadProfile | None = None
    simulations: dict[str, SimulateResult] = Field(default_factory=dict)
    runs: list[RunRow] = Field(default_factory=list)
    comparisons: list[ComparisonResult] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list)
    sweeps: list[SweepSection] = Field(default_factory=list)  #: report/sweep_html.py renders these
    recommendations: list[Recommendation] = Field(default_factory=list)
    canaries: list[CanarySection] = Field(default_factory=list)  #: report/canary_html.py renders these
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------- data


def redact_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _pct(vals: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(vals, float), q)) if len(vals) else None


def _throughput(run: LoadedRun) -> float | None:
    s = run.summary or {}
    v = s.get("output_throughput")
    if isinstance(v, (int, float)):
        return float(v)
    recs = run.records
    if not recs:
        return None
    t0 = min(r.started_at for r in recs)
    dur = max(r.started_at + r.elapsed_s for r in recs) - t0
    return sum(r.output_tokens or 0 for r in recs if r.ok) / dur if dur > 0 else None


def run_row(run: LoadedRun) -> RunRow:
    ok = [r for r in run.records if r.ok]
    ttft = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s * 1000 for r in ok if r.e2e_s is not None]
    tp = [t * 1000 for r in ok if (t := tpot(r)) is not None]
    itl = [x * 1000 for r in ok for x in per_token_itls(r.chunks)]
    acc = run.acceptance()
    return RunRow(
        label=run.label, path=str(run.path), speculative=run.speculative, max_concurrency=run.max_concurrency,
        requests=len(run.records), failed=len(run.records) - len(ok), output_throughput=_throughput(run),
        ttft_p50_ms=_pct(ttft, 50), ttft_p95_ms=_pct(ttft, 95), tpot_p50_ms=_pct(tp, 50), tpot_p95_ms=_pct(tp, 95),
        itl_p50_ms=_pct(itl, 50), itl_p95_ms=_pct(itl, 95), e2e_p50_ms=_pct(e2e, 50), e2e_p95_ms=_pct(e2e, 95),
        acceptance_rate=acc.acceptance_rate, mean_acceptance_length=acc.mean_acceptance_length, per_position=acc.per_position,
        acceptance_origin=acc.origin, acceptance_note=acc.basis() if acc.available else acc.reason,
        memory=run_memory(run.summary),
    )


def _redact_comparison(c: ComparisonResult) -> ComparisonResult:
    c = c.model_copy(deep=True)
    groups = ([c.overall] if c.overall else []) + list(c.segments.values())
    for g in groups:
        if g.equivalence is None:
            continue
        for m in g.equivalence.greedy.mismatches:
            m.context = redact_text(m.context) if m.context else ""
            m.baseline_continuation = redact_text(m.baseline_continuation)
            m.candidate_continuation = redact_text(m.candidate_continuation)
    return c


def build_report(cfg: ReportConfig) -> tuple[ReportData, list[LoadedRun]]:
    sweeps, recs, rest = split_inputs(cfg.inputs)
    canary_paths, rest = split_canaries(rest)
    runs = [load_run(p) for p in rest]
    seen: dict[str, int] = {}
    for r in runs:  # labels must tell the runs apart (same directory names under different parents)
        seen[r.label] = seen.get(r.label, 0) + 1
    for r in runs:
        if seen[r.label] > 1:
            r.label = str(r.path)
    data = ReportData(title=cfg.title or t("report.title"), lang=check_lang(cfg.lang), generated_at=time.time(), redacted=cfg.redact,
                      inputs=[{"label": r.label, "kind": r.kind, "path": str(r.path)} for r in runs],
                      sweeps=sweeps, recommendations=recs)
    data.inputs += [{"label": s.label, "kind": "sweep", "path": s.label} for s in sweeps]
    data.inputs += [{"label": r.source_name, "kind": "recommendation", "path": r.source_name} for r in recs]
    data.canaries = [load_canary(p) for p in canary_paths]
    data.inputs += [{"label": c.label, "kind": "canary", "path": c.label} for c in data.canaries]
    for r in runs:
        data.notes += r.notes
        if r.kind == "profile":
            if data.profile is not None:
                data.notes.append(en("report.n.second_profile", path=r.path))
            else:
                data.profile = r.profile
        elif r.kind == "simulate":
            assert r.simulate is not None
            data.simulations[r.label] = r.simulate
        elif r.kind == "compare":
            assert r.compare is not None
            data.comparisons.append(_redact_comparison(r.compare) if cfg.redact else r.compare)
        else:
            data.runs.append(run_row(r))
            for rec in r.records[:SAMPLES_PER_RUN]:
                prompt = r.prompts.get(rec.id)
                if cfg.redact:
                    prompt = None if prompt is None else redact_text(prompt)
                    out = redact_text(rec.text)
                else:
                    prompt = None if prompt is None else prompt[:TEXT_CHARS]
                    out = rec.text[:TEXT_CHARS]
                data.samples.append(Sample(run=r.label, id=rec.id, segment=rec.segment, ok=rec.ok,
                                           output_tokens=rec.output_tokens, prompt=prompt, output=out))
    return data, runs


# ---------------------------------------------------------------------------- figures


def _cdf(vals: Sequence[float]) -> tuple[list[float], list[float]]:
    a = np.sort(np.asarray(vals, float))
    if a.size == 0:
        return [], []
    y = np.arange(1, a.size + 1) / a.size
    if a.size > CDF_POINTS:
        idx = np.unique(np.linspace(0, a.size - 1, CDF_POINTS).astype(int))
        a, y = a[idx], y[idx]
    return a.tolist(), y.tolist()


def latency_figures(runs: Sequence[LoadedRun]) -> dict[str, str]:
    import plotly.graph_objects as go

    bench = [r for r in runs if r.kind in ("bench", "results")]
    if not bench:
        return {}
    out = {}
    for key, title, unit, get in (
        ("ttft", "TTFT", "ms", lambda r: [x.ttft_s * 1000 for x in r.records if x.ok and x.ttft_s is not None]),
        ("e2e", t("report.fig.e2e"), "ms", lambda r: [x.e2e_s * 1000 for x in r.records if x.ok and x.e2e_s is not None]),
        ("itl", t("report.fig.itl"), "ms",
         lambda r: [v * 1000 for x in r.records if x.ok for v in per_token_itls(x.chunks)]),
    ):
        fig = go.Figure()
        for r in bench:
            xs, ys = _cdf(get(r))
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=plot_label(r.label), line={"shape": "hv"}))
        fig.update_layout(title=t("report.fig.cdf", title=title), xaxis_title=f"{title} ({unit})",
                          yaxis_title=t("report.fig.share_requests") if key != "itl" else t("report.fig.share_tokens"))
        out[key] = fig_html(fig, f"cdf-{key}")
    return out


def acceptance_figures(data: ReportData) -> dict[str, str]:
    import plotly.graph_objects as go

    out: dict[str, str] = {}
    pos = go.Figure()
    for label, sim in data.simulations.items():
        for s in sim.overall.summaries:
            if sim.overall.best_k.get(s.method) == s.k:
                pos.add_trace(go.Scatter(x=list(range(len(s.per_position_rate))), y=s.per_position_rate, mode="lines+markers",
                                         name=plot_label(t("report.fig.simulated", label=label, method=s.method, k=s.k))))
                tf = s.teacher_forced_per_position_rate  # a hidden-state head: training tools' optimistic figure
                if tf:
                    pos.add_trace(go.Scatter(x=list(range(len(tf))), y=tf, mode="lines", line={"dash": "dash"},
                                             name=plot_label(t("simulate.fig.tf", label=label, method=s.method, k=s.k))))
    for row in data.runs:
        if row.per_position:
            how = t("report.fig.measured_counters") if row.acceptance_origin == "counters" else t("report.fig.measured")
            pos.add_trace(go.Scatter(x=list(range(len(row.per_position))), y=row.per_position, mode="lines+markers",
                                     name=plot_label(f"{row.label} ({how})"), line={"dash": "dot"}))
    if pos.data:
        pos.update_layout(title=t("report.fig.acc_position"), xaxis_title=t("report.fig.draft_position"), yaxis_title=t("report.fig.acc_rate"),
                          yaxis_range=[0, 1.02])
        out["position"] = fig_html(pos, "acc-position")
    for i, (label, sim) in enumerate(data.simulations.items()):
        rows = [(t("report.v.overall"), sim.overall), *sim.segments.items()]
        ylabels, z = [], []
        for seg, sr in rows:
            for m in sim.methods:
                ylabels.append(plot_label(f"{seg} · {m}"))
                by_k = {s.k: s.acceptance_rate for s in sr.summaries if s.method == m}
                z.append([by_k.get(k) for k in sim.ks])
        hm = go.Figure(go.Heatmap(z=z, x=[str(k) for k in sim.ks], y=ylabels, colorscale="Viridis", zmin=0, zmax=1,
                                  colorbar={"title": t("report.c.acc_rate")},
                                  text=[[("" if v is None else f"{v:.2f}") for v in row] for row in z], texttemplate="%{text}"))
        hm.update_layout(title=plot_label(t("report.fig.heatmap", label=label)), xaxis_title=t("report.fig.k_axis"))
        hm.update_layout(margin={"l": 200})
        out[f"heatmap-{i}"] = fig_html(hm, f"acc-heatmap-{i}", height=max(320, 34 * len(ylabels) + 120))
    return out


def throughput_figure(data: ReportData) -> str | None:
    import plotly.graph_objects as go

    rows = [r for r in data.runs if r.max_concurrency is not None and r.output_throughput is not None]
    if not rows:
        return None
    fig = go.Figure()
    for spec, name in ((True, t("report.fig.with_spec")), (False, t("report.fig.without_spec")), (None, t("report.fig.spec_unknown"))):
        sel = sorted((r for r in rows if r.speculative is spec), key=lambda r: r.max_concurrency or 0)
        if sel:
            fig.add_trace(go.Scatter(x=[r.max_concurrency for r in sel], y=[r.output_throughput for r in sel], mode="lines+markers",
                                     name=name, text=[plot_label(r.label) for r in sel], hovertemplate="%{text}<br>%{x}: %{y:.1f} tok/s"))
    fig.update_layout(title=t("report.fig.throughput"), xaxis_title=t("report.fig.max_conc"), yaxis_title=t("report.fig.out_tps"),
                      xaxis_type="log")
    return fig_html(fig, "throughput")


def measured_speedups(data: ReportData) -> list[dict[str, Any]]:
    """Spec-on over spec-off output throughput at each concurrency both were run at."""
    out = []
    on = {r.max_concurrency: r for r in data.runs if r.speculative and r.max_concurrency and r.output_throughput}
    off = {r.max_concurrency: r for r in data.runs if r.speculative is False and r.max_concurrency and r.output_throughput}
    for c in sorted(set(on) & set(off)):
        out.append({"concurrency": c, "speedup": on[c].output_throughput / off[c].output_throughput,  # type: ignore[operator]
                    "with": on[c].label, "without": off[c].label})
    return out


def speedup_figure(data: ReportData) -> str | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for label, sim in data.simulations.items():
        for m in sim.methods:
            k = sim.overall.best_k.get(m)
            ps = sorted((p for p in sim.overall.predictions if p.method == m and p.k == k and p.predicted_speedup is not None),
                        key=lambda p: p.batch)
            if ps:
                key = "report.fig.guessed" if all(p.source == UNCALIBRATED for p in ps) else "report.fig.predicted"
                fig.add_trace(go.Scatter(x=[p.batch for p in ps], y=[p.predicted_speedup for p in ps], mode="lines+markers",
                                         name=plot_label(t(key, method=m, k=k, label=label))))
    meas = measured_speedups(data)
    if meas:
        fig.add_trace(go.Scatter(x=[m["concurrency"] for m in meas], y=[m["speedup"] for m in meas], mode="markers",
                                 marker={"size": 12, "symbol": "diamond"}, name=t("report.fig.measured_bench")))
    for c in data.comparisons:
        o = c.overall
        if o is not None and o.speedup.estimate is not None and o.speedup.low is not None and o.speedup.high is not None:
            x = c.candidate.max_concurrency or 1
            fig.add_trace(go.Scatter(
                x=[x], y=[o.speedup.estimate], mode="markers", marker={"size": 12, "symbol": "square"},
                error_y={"type": "data", "symmetric": False, "array": [o.speedup.high - o.speedup.estimate],
                         "arrayminus": [o.speedup.estimate - o.speedup.low]},
                name=plot_label(t("report.fig.measured_compare", cand=c.candidate.label, base=c.baseline.label))))
    if not fig.data:
        return None
    fig.add_hline(y=1.0, line_dash="dash", line_color="grey")
    fig.update_layout(title=t("report.fig.speedup"), xaxis_title=t("report.fig.batch"), yaxis_title=t("report.fig.speedup_axis"),
                      xaxis_type="log")
    return fig_html(fig, "speedup")


# ---------------------------------------------------------------------------- rendering


def memory_value(key: str, v: float | None, signed: bool = False) -> str:
    """One memory figure for display, alike in every language: MiB or GiB, a share in %."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    sign = "+" if signed else ""
    if key == "kv_peak_usage":
        return f"{100 * v:{sign}.1f} %"
    mib = v if key.endswith("_mib") else v / 2**20
    if abs(mib) >= 1024:
        return f"{mib / 1024:{sign},.2f} GiB"
    return f"{mib:{sign},.1f} MiB"


def render_html(data: ReportData, runs: Sequence[LoadedRun]) -> str:
    import jinja2
    import plotly.offline

    env = template_env(mem=memory_value)
    figs = {
        "latency": {k: jinja2.utils.markupsafe.Markup(v) for k, v in latency_figures(runs).items()},
        "acceptance": {k: jinja2.utils.markupsafe.Markup(v) for k, v in acceptance_figures(data).items()},
        "throughput": jinja2.utils.markupsafe.Markup(tf) if (tf := throughput_figure(data)) else None,
        "speedup": jinja2.utils.markupsafe.Markup(s) if (s := speedup_figure(data)) else None,
    }
    # "</" inside the inline library would end the script element early; plotly.min.js has none,
    # but make sure for any version.
    js = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
    return env.get_template("report.html.j2").render(
        d=data, figs=figs, plotly_js=jinja2.utils.markupsafe.Markup(js), measured=measured_speedups(data),
        sweep_html=jinja2.utils.markupsafe.Markup(render_sections(data.sweeps, data.recommendations)),
        canary_html=jinja2.utils.markupsafe.Markup(render_canaries(data.canaries)),
        field_html=jinja2.utils.markupsafe.Markup(render_field(runs, data.comparisons)),
        generated=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.generated_at)),
    )


def csv_rows(data: ReportData) -> list[dict[str, Any]]:
    rows = []
    for r in data.runs:
        row = r.model_dump(exclude={"per_position", "memory"})
        for m in r.memory:
            row[f"memory_{m.key}"] = m.value
        for i, v in enumerate(r.per_position):
            row[f"pos{i}_acceptance"] = v
        rows.append(row)
    return rows


class ReportResult(BaseModel):
    out: Path
    notes: list[str]


def write_report(cfg: ReportConfig) -> ReportResult:
    with use_lang(check_lang(cfg.lang)):
        data, runs = build_report(cfg)
        text = render_html(data, runs)
    try:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(text, encoding="utf-8")
        if cfg.json_out is not None:
            cfg.json_out.write_text(json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=2), encoding="utf-8")
        if cfg.csv_out is not None:
            from specgauge.report.tables import write_csv

            write_csv(csv_rows(data), cfg.csv_out)
    except OSError as e:
        raise ReportError(f"cannot write the report: {e}") from None
    return ReportResult(out=cfg.out, notes=data.notes)
