"""The speedup-vs-batch plot: predicted speedup per configuration (k) with its band, the measured points
with their 95 % CI over it, break-even and the margin, and the recommended schedule's ranges (k = 0 marked
as what it is: not off). Renders a ``recommend.curves.SpeedupCurves`` record (stored with the
recommendation) as an embeddable plotly ``<div>``; it computes nothing. Words from ``specgauge.i18n``."""

from __future__ import annotations

from specgauge.i18n import t
from specgauge.recommend.curves import SpeedupCurves
from specgauge.report.figures import fig_html, plot_label


def speedup_vs_batch_html(curves: SpeedupCurves, div_id: str = "speedup-vs-batch") -> str:
    """The figure as a ``<div>`` (empty string when there is nothing to draw)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, c in enumerate(curves.curves):
        color = f"hsl({(i * 67) % 360}, 60%, 45%)"
        if c.predicted:
            xs = [p.batch for p in c.predicted]
            if all(p.low is not None and p.high is not None for p in c.predicted):
                fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[p.high for p in c.predicted] + [p.low for p in c.predicted][::-1],
                                         fill="toself", line={"width": 0}, fillcolor=color, opacity=0.15, hoverinfo="skip",
                                         showlegend=False))
            fig.add_trace(go.Scatter(x=xs, y=[p.estimate for p in c.predicted], mode="lines", line={"color": color, "dash": "dash"},
                                     name=plot_label(t("sweep.fig.predicted", label=c.label))))
        if c.measured:
            fig.add_trace(go.Scatter(
                x=[p.batch for p in c.measured], y=[p.estimate for p in c.measured], mode="markers", marker={"color": color, "size": 9},
                name=plot_label(t("sweep.fig.measured", label=c.label)),
                error_y={"type": "data", "symmetric": False,
                         "array": [(p.high if p.high is not None else p.estimate) - p.estimate for p in c.measured],
                         "arrayminus": [p.estimate - (p.low if p.low is not None else p.estimate) for p in c.measured]}))
    if not fig.data:
        return ""
    fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
    if curves.min_speedup != 1.0:
        fig.add_hline(y=curves.min_speedup, line_dash="dash", line_color="#b7791f")
    for s, e, k in curves.schedule or []:
        fig.add_vrect(x0=s, x1=e, line_width=0, fillcolor="#4a5568" if k == 0 else "#3182ce", opacity=0.06,
                      annotation_text=t("sweep.fig.k", k=k) if k else t("sweep.fig.k0"), annotation_position="top left")
    title = t("sweep.fig.batch", base=plot_label(curves.baseline))
    if curves.stops_paying_at is not None:
        title += t("sweep.fig.batch_off", b=curves.stops_paying_at)
    batches = sorted({p.batch for c in curves.curves for p in c.predicted + c.measured})
    fig.update_layout(title=title, xaxis_title=t("sweep.fig.batch_axis"), yaxis_title=t("sweep.fig.speedup_axis"),
                      xaxis={"type": "log", "tickvals": batches})
    return fig_html(fig, div_id)
