"""The field-failures section of the HTML report (``docs/field-failures.md``): per comparison, the
structured-output and stall rates of both sides per segment, the candidate's longest stalls and the
TTFT split; per bench run, acceptance against prompt length, live and replayed (the figure where a
drafter stops paying as prompts grow), the collapse named with its evidence, and the stall table.
Everything comes from ``summary.json`` and ``compare --json`` as stored; nothing is computed here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from specgauge.i18n import t
from specgauge.report.field_console import ttft_lines
from specgauge.report.figures import fig_html, plot_label, template_env
from specgauge.report.runs import LoadedRun
from specgauge.stats.collapse import AcceptanceProfile
from specgauge.stats.stalls import StallSummary
from specgauge.stats.verdict import ComparisonResult


class RunField(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    label: str
    outputs: dict[str, Any] | None = None
    kinds: str = ""
    profile: AcceptanceProfile | None = None
    profile_why: str | None = None  #: why a speculative run has no profile
    stalls: StallSummary | None = None
    fig: Any = None


def _run_field(r: LoadedRun, i: int) -> RunField | None:
    g = (r.summary or {}).get("specgauge") or {}
    rc = g.get("replay_check") or {}
    out = RunField(label=r.label, outputs=g.get("structured_outputs"))
    if out.outputs:
        out.kinds = ", ".join(f"{t('field.kind.' + k)} {v.get('invalid', 0)}/{v.get('judged', 0)}"
                              for k, v in (out.outputs.get("kinds") or {}).items())
    if isinstance(rc.get("profile"), dict):
        out.profile = AcceptanceProfile.model_validate(rc["profile"])
        out.fig = acceptance_vs_context(r.label, out.profile, i)
    elif r.speculative and rc.get("reason"):
        out.profile_why = rc["reason"]
    if isinstance(g.get("stalls"), dict):
        out.stalls = StallSummary.model_validate(g["stalls"])
    return out if (out.outputs or out.profile or out.profile_why or (out.stalls and out.stalls.stalled)) else None


def acceptance_vs_context(label: str, p: AcceptanceProfile, i: int) -> str | None:
    """Acceptance per prompt-length band: live (the server's counts) and replayed (its own outputs)."""
    import plotly.graph_objects as go

    if not p.bands:
        return None
    x = [b.label for b in p.bands]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[b.replay_rate for b in p.bands], mode="lines+markers", name=t("field.fig.replayed"),
                             line={"dash": "dash"}))
    fig.add_trace(go.Scatter(x=x, y=[b.server_rate for b in p.bands], mode="lines+markers", name=t("field.fig.live"),
                             text=[t("field.fig.hover", n=b.requests) for b in p.bands]))
    fig.update_layout(title=t("field.fig.title", label=plot_label(label)), xaxis_title=t("field.fig.x"),
                      yaxis_title=t("report.fig.acc_rate"), yaxis={"range": [0, 1], "tickformat": ".0%"})
    return fig_html(fig, f"field-acc-{i}", height=340)


def render_field(runs: Sequence[LoadedRun], comparisons: Sequence[ComparisonResult]) -> str:
    """The section's HTML (empty when no run or comparison has a field figure)."""
    import jinja2

    rows = [f for i, r in enumerate(runs) if r.kind in ("bench", "results") and (f := _run_field(r, i)) is not None]
    comps = [c for c in comparisons if c.overall is not None and (c.overall.outputs or c.overall.stalls or c.ttft)]
    if not rows and not comps:
        return ""
    for f in rows:
        f.fig = jinja2.utils.markupsafe.Markup(f.fig) if f.fig else None
    env = template_env(ttft=ttft_lines)
    return str(env.get_template("field.html.j2").render(runs=rows, comparisons=comps))
