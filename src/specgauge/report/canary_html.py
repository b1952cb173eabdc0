"""The canary section of the HTML report (``specgauge report CANARY_DIR``).

Recognises a canary output directory (``decisions.jsonl`` beside ``canary.json``) or its
``decisions.jsonl``. Everything comes from the decision log, so a run that is still going (or
crashed) renders too; ``summary.json`` adds the run's totals when present. Shows the weight over
time with every decision point (hover: the reason), per-window p95 TTFT / E2E of both sides, and
a table of the decisions that moved the weight or failed. Text reaches the page through jinja2
autoescaping; plot labels are HTML-escaped (plotly reads a subset of HTML in labels).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specgauge.canary.eventlog import read_events
from specgauge.errors import UserError
from specgauge.i18n import en, t, translate, word
from specgauge.report.figures import fig_html, plot_label, template_env

_COLORS = {"promote": "#2ca02c", "hold": "#8c8c8c", "rollback": "#d62728", "complete": "#1f77b4"}


class CanaryLoadError(UserError):
    pass


class CanaryWindow(BaseModel):
    t: float
    weight: float
    to_weight: float
    action: str
    outcome: str
    score: float | None = None
    reason: str = ""
    requests: dict[str, int] = Field(default_factory=dict)
    failed_checks: list[str] = Field(default_factory=list)
    latency_ms: dict[str, Any] = Field(default_factory=dict)
    acceptance_rate: float | None = None


class CanarySection(BaseModel):
    label: str
    mode: str = "live"
    started_at: float | None = None
    steps: list[float] = Field(default_factory=list)
    upstreams: dict[str, Any] = Field(default_factory=dict)
    status: str = "running"
    rollback_reason: str | None = None
    restarts: list[float] = Field(default_factory=list)  #: times the proxy resumed from a saved state
    timeline: list[tuple[float, float]] = Field(default_factory=list)  #: (t, weight) at each change
    windows: list[CanaryWindow] = Field(default_factory=list)
    totals: dict[str, Any] | None = None  #: from summary.json when the run ended
    exact_match_rate: float | None = None
    greedy_pairs: int | None = None
    notes: list[str] = Field(default_factory=list)


def is_canary(path: Path) -> bool:
    if path.is_dir():
        return (path / "decisions.jsonl").is_file() and (path / "canary.json").is_file()
    return path.name == "decisions.jsonl" and path.is_file()


def split_canaries(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(canary runs, everything else) among report inputs."""
    can, rest = [], []
    for p in paths:
        (can if is_canary(Path(p)) else rest).append(Path(p))
    return can, rest


def load_canary(path: Path) -> CanarySection:
    d = path if path.is_dir() else path.parent
    try:
        events = read_events(d / "decisions.jsonl")
    except OSError as e:
        raise CanaryLoadError(f"{d / 'decisions.jsonl'}: cannot read: {e}") from None
    if not events:
        raise CanaryLoadError(f"{d / 'decisions.jsonl'}: no canary events")
    sec = CanarySection(label=d.resolve().name)
    for e in events:
        kind = e.get("event")
        state = e.get("state") or {}
        if kind in ("start", "resume"):
            cfg = e.get("config") or {}
            sec.mode = cfg.get("mode", sec.mode)
            sec.steps = cfg.get("steps", sec.steps)
            sec.upstreams = e.get("upstreams") or sec.upstreams
            if sec.started_at is None:
                sec.started_at = e.get("t")
            if kind == "resume":
                sec.restarts.append(float(e["t"]))
            sec.timeline.append((float(e["t"]), float(state.get("weight", 0.0))))
        elif kind == "evaluation":
            dec, j, w = e.get("decision") or {}, e.get("judgement") or {}, e.get("window") or {}
            acc = w.get("acceptance") or {}
            sec.windows.append(CanaryWindow(
                t=float(e["t"]), weight=float(w.get("weight", dec.get("from_weight", 0.0))),
                to_weight=float(dec.get("to_weight", 0.0)), action=str(dec.get("action", "")), outcome=str(j.get("outcome", "")),
                score=j.get("score"), reason=str(dec.get("reason", "")), requests=w.get("requests") or {},
                failed_checks=[str(c.get("name")) for c in j.get("checks", []) if c.get("status") == "fail"],
                latency_ms=w.get("latency_ms") or {}, acceptance_rate=acc.get("acceptance_rate")))
            if dec.get("to_weight") != dec.get("from_weight"):
                sec.timeline.append((float(e["t"]), float(dec.get("to_weight", 0.0))))
        if state:
            sec.status = state.get("status", sec.status)
            sec.rollback_reason = state.get("rollback_reason", sec.rollback_reason)
        if kind == "stop":
            sec.timeline.append((float(e["t"]), float(state.get("weight", 0.0))))
    summary = d / "summary.json"
    if summary.is_file():
        try:
            s = json.loads(summary.read_text(encoding="utf-8"))
            sec.totals = s.get("totals")
            sec.exact_match_rate = s.get("exact_match_rate")
            sec.greedy_pairs = s.get("greedy_pairs")
        except (OSError, ValueError):
            sec.notes.append(en("canary.n.unreadable", path=summary.name))
    else:
        sec.notes.append(en("canary.n.no_summary"))
    return sec


def canary_figures(sec: CanarySection, i: int) -> dict[str, str]:
    import plotly.graph_objects as go


    t0 = sec.started_at or (sec.timeline[0][0] if sec.timeline else 0.0)
    figs: dict[str, str] = {}
    if sec.timeline:
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=[t - t0 for t, _ in sec.timeline], y=[w for _, w in sec.timeline], mode="lines",
                                 line={"shape": "hv", "color": "#444"}, name=t("canary.fig.weight")))
        for action, color in _COLORS.items():
            ws = [w for w in sec.windows if w.action == action]
            if not ws:
                continue
            fig.add_trace(go.Scatter(
                x=[w.t - t0 for w in ws], y=[w.weight for w in ws], mode="markers", name=word("canary.action", action),
                marker={"color": color, "size": 9 if action != "hold" else 6},
                text=[plot_label(f"{word('canary.outcome', w.outcome)}: {translate(w.reason)[:300]}") for w in ws],
                hovertemplate="%{text}<extra></extra>"))
        share = t("canary.fig.mirrored") if sec.mode == "shadow" else t("canary.fig.cand_weight")
        fig.update_layout(title=plot_label(t("canary.fig.title_weight", label=sec.label)), xaxis_title=t("canary.fig.seconds"),
                          yaxis_title=share, yaxis={"range": [-3, 103]})
        figs["weight"] = fig_html(fig, f"canary-weight-{i}")
    if sec.windows:
        fig = go.Figure()
        for metric, dash in (("ttft", "solid"), ("e2e", "dot")):
            for side, color in (("baseline", "#1f77b4"), ("candidate", "#ff7f0e")):
                xs, ys = [], []
                for w in sec.windows:
                    v = ((w.latency_ms.get(metric) or {}).get(side) or {}).get("p95")
                    if v is not None:
                        xs.append(w.t - t0)
                        ys.append(v)
                if xs:
                    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers",
                                             name=t("canary.fig.series", metric=metric.upper(), side=t(f"canary.side.{side}")),
                                             line={"dash": dash, "color": color}))
        if fig.data:
            fig.update_layout(title=plot_label(t("canary.fig.title_latency", label=sec.label)), xaxis_title=t("canary.fig.seconds"),
                              yaxis_title="ms", yaxis_type="log")
            figs["latency"] = fig_html(fig, f"canary-latency-{i}")
    return figs


_TEMPLATE = """
{% for sec in sections %}{% set f = figs[loop.index0] %}
<section id="canary-{{ loop.index0 }}">
  <h2>{{ t("canary.h", label=data(sec.label), mode=word("canary.mode", sec.mode)) }}</h2>
  <p><span class="badge {{ badge[sec.status] }}">{{ word("canary.status", sec.status) }}</span>
  {% set steps = [] %}{% for s in sec.steps %}{% set _ = steps.append(s | f("{:g}")) %}{% endfor %}
  {{ t("canary.steps", steps=steps | join(", "), base=data(sec.upstreams.get("baseline", {}).get("url", "?")),
       cand=data(sec.upstreams.get("candidate", {}).get("url", "?"))) }}</p>
  {% if sec.rollback_reason %}<p>{{ t("canary.why", text=tr(sec.rollback_reason)) }}</p>{% endif %}
  {% if sec.restarts %}<p class="note">{{ t("canary.restarts", n=sec.restarts | length) }}</p>{% endif %}
  {% if sec.totals %}<p>{{ t("canary.totals", nb=sec.totals.requests.baseline.values() | sum, nc=sec.totals.requests.candidate.values() | sum,
                             r=sec.totals.retried_on_baseline, v=sec.totals.client_visible_failures) }}
  {% if sec.greedy_pairs %}{{ t("canary.greedy_html", rate=sec.exact_match_rate | f("{:.2%}"), n=sec.greedy_pairs) }}{% endif %}</p>{% endif %}
  {% if f.weight %}<div class="plot">{{ f.weight }}</div>{% endif %}
  {% if f.latency %}<div class="plot">{{ f.latency }}</div>{% endif %}
  {% set points = sec.windows | selectattr("action", "ne", "hold") | list + (sec.windows | selectattr("action", "eq", "hold") | selectattr("outcome", "eq", "FAIL") | list) %}
  {% if points %}
  <table><tr><th>{{ t("canary.c.t") }}</th><th>{{ t("canary.c.weight") }}</th><th>{{ t("canary.c.outcome") }}</th><th>{{ t("canary.c.decision") }}</th>
    <th>{{ t("canary.c.score") }}</th><th>{{ t("canary.c.sides") }}</th><th class="l">{{ t("canary.c.failed_checks") }}</th><th class="l">{{ t("canary.c.reason") }}</th></tr>
  {% for w in points | sort(attribute="t") %}
  <tr><td>{{ (w.t - (sec.started_at or w.t)) | f("{:.0f}") }}</td><td>{{ w.weight | f("{:g}") }}</td><td>{{ word("canary.outcome", w.outcome) }}</td>
      <td>{{ word("canary.action", w.action) }}{% if w.to_weight != w.weight %} → {{ w.to_weight | f("{:g}") }}{% endif %}</td><td>{{ w.score | f("{:.0f}") }}</td>
      <td>{{ w.requests.get("baseline", 0) }} / {{ w.requests.get("candidate", 0) }}</td>
      <td class="l">{{ code(w.failed_checks | join(", ")) if w.failed_checks else "" }}</td><td class="l">{{ tr(w.reason)[:400] }}</td></tr>
  {% endfor %}</table>
  {% endif %}
  <p class="note">{{ t("canary.evaluations", n=sec.windows | length, log=code("decisions.jsonl")) }}</p>
  {% if sec.notes %}<ul class="note">{% for n in sec.notes %}<li>{{ tr(n) }}</li>{% endfor %}</ul>{% endif %}
</section>
{% endfor %}
"""


def render_canaries(sections: Sequence[CanarySection]) -> str:
    """The HTML fragment for every canary run (empty when there are none)."""
    if not sections:
        return ""
    import jinja2

    env = template_env()
    figs = [{k: jinja2.utils.markupsafe.Markup(v) for k, v in canary_figures(s, i).items()} for i, s in enumerate(sections)]
    figs = [{"weight": f.get("weight"), "latency": f.get("latency")} for f in figs]
    return str(env.from_string(_TEMPLATE).render(
        sections=sections, figs=figs, badge={"complete": "GO", "rolled_back": "NO-GO", "running": "INCONCLUSIVE"}))
