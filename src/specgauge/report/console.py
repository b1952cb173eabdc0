"""Console rendering (rich). Data in, tables out; nothing here computes a figure."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from specgauge.workload.profile import Dist, WorkloadProfile


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "–" if v is None or v != v else f"{100 * v:.1f}%"


def _dist(d: Dist) -> str:
    if d.n == 0:
        return "–"
    return f"{_num(d.p50)}/{_num(d.p95)}/{_num(d.max)}"


def render_profile(p: WorkloadProfile, console: Console) -> None:
    rows = [*p.segments.items(), ("overall", p.overall)]
    t = Table(title="Workload profile: lengths in tokens (p50/p95/max)", title_justify="left")
    for col in ("segment", "requests", "logged", "prompt", "output", "max_tokens"):
        t.add_column(col, justify="left" if col == "segment" else "right")
    for name, s in rows:
        if name == "overall":
            t.add_section()
        t.add_row(name, str(s.requests), str(s.with_logged_response), _dist(s.prompt_tokens), _dist(s.output_tokens),
                  _dist(s.max_tokens), style="bold" if name == "overall" else None)
    console.print(t)
    m = Table(title="Workload profile: mix (share of requests; copy overlap: share of output tokens)", title_justify="left")
    for col in ("segment", "T=0", "top_p<1", "tools", "tool calls", "RAG ctx", "copy overlap", "Hangul", "languages"):
        m.add_column(col, justify="left" if col in ("segment", "languages") else "right")
    for name, s in rows:
        if name == "overall":
            m.add_section()
        m.add_row(
            name, _pct(s.temperature_mix.get("0 (greedy)", 0.0)), _pct(s.top_p_mix.get("< 1", 0.0)), _pct(s.tools_share),
            _pct(s.tool_call_share), _pct(s.context_share), _pct(s.copy_overlap), _pct(s.hangul_share),
            " ".join(f"{k}:{v}" for k, v in s.languages.items()), style="bold" if name == "overall" else None,
        )
    console.print(m)
    bands = ", ".join(f"T {b}: {_pct(v)}" for b, v in p.overall.temperature_mix.items())
    console.print(f"temperature mix (overall): {bands}", highlight=False)
    src = ", ".join(f"{k} {v}" for k, v in p.token_sources.items())
    console.print(f"tokenizer: {p.tokenizer} ({'exact' if p.exact_tokens else 'APPROXIMATE'}); token counts from {src}", highlight=False)
    if p.skipped_invalid:
        console.print(f"[yellow]{p.skipped_invalid} invalid request(s) skipped[/yellow]")
    for note in p.overall.notes:
        console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
