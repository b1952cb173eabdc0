"""What every section of the HTML report shares: plotly figures as embeddable divs, escaped plot labels,
numbers for display, and the one jinja2 environment (autoescaped, with the catalogue's words: ``t`` for
an entry, ``tr`` for a stored English message). The sections (``html``, ``canary_html``,
``sweep_html``) import it; it imports none of them."""

from __future__ import annotations

import html as _html
import math
from pathlib import Path
from typing import Any

from specgauge.i18n import t, translate, word


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


def t_markup(key: str, **params: Any) -> Any:
    """The catalogue text as trusted markup, its parameters escaped (a run label cannot inject HTML)."""
    from markupsafe import Markup

    return Markup(t(key)).format(**params) if params else Markup(t(key))


def template_env(**extra: Any) -> Any:
    """The report's jinja2 environment: templates from ``report/templates``, autoescaping, undefined
    names an error, ``f`` for numbers, ``t`` / ``tr`` for words, ``data`` / ``code`` marking user data and
    paste-able commands (both left as they are in every language); ``extra`` globals added."""
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["f"] = fmt_number
    env.globals.update(t=t_markup, tr=translate, word=word, data=lambda v: Markup('<span class="data">{}</span>').format(v),
                       code=lambda v: Markup("<code>{}</code>").format(v), **extra)
    return env
