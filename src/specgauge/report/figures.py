"""What every section of the HTML report shares: plotly figures as embeddable divs, escaped plot labels,
numbers for display. The sections (``html``, ``canary_html``, ``sweep_html``) import it; it imports none
of them."""

from __future__ import annotations

import html as _html
import math
from typing import Any


def plot_label(s: str) -> str:
    """Text for plotly labels: plotly reads a subset of HTML in labels, so escape it all."""
    return _html.escape(s, quote=True)


def fig_html(fig: Any, div_id: str, height: int = 380) -> str:
    """A plotly figure as a ``<div>`` (plotly.js is inlined once by the page, never fetched)."""
    left = max(60, fig.layout.margin.l or 0)
    fig.update_layout(template="plotly_white", margin={"l": left, "r": 20, "t": 50, "b": 50}, height=height)
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"fig-{div_id}",
                           config={"displaylogo": False, "responsive": True}))


def fmt_number(v: Any, spec: str = "{:.1f}") -> str:
    """The templates' ``f`` filter: ``spec`` applied, a dash for a missing or NaN value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return spec.format(v)
