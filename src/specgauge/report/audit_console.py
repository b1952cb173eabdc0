"""Console rendering of ``specgauge audit`` (rich). Data in, tables out; nothing here computes.

Server-provided text (model names, prompt ids from a workload) is escaped for rich markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.audit.run import AuditResult
from specgauge.report.decide_console import visible

_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow"}


def _p(p: float) -> str:
    return "<1e-300" if p == 0 else f"{p:.3g}"


def render_audit(res: AuditResult, console: Console, max_rows: int = 40) -> None:
    cand, ref = res.servers.get("candidate"), res.servers.get("reference")
    if cand and ref:
        console.print(f"candidate {escape(cand.base_url)} ({escape(cand.model)}) vs reference "
                      f"{escape(ref.base_url)} ({escape(ref.model)}); tokens from {cand.token_source}, "
                      f"n per request: {'yes' if cand.supports_n else 'no'}/{'yes' if ref.supports_n else 'no'}",
                      highlight=False)
    s = res.settings
    t = Table(title=f"token distributions at temperature {s.get('temperature')} (first {s.get('positions')} positions)",
              title_justify="left")
    for col in ("prompt", "pos", "cols", "n ref/cand", "X²" if s.get("stats", {}).get("test") != "g" else "G", "dof", "p", "p Holm", "TV", "Cramér's V", "detects TV"):
        t.add_column(col, justify="left" if col == "prompt" else "right")
    rows = sorted(res.tests, key=lambda x: (not x.rejected, x.p_holm, x.prompt, x.position))[:max_rows]
    for x in sorted(rows, key=lambda x: (x.prompt, x.position)):
        style = "red" if x.rejected else None
        t.add_row(escape(x.prompt_id), str(x.position), str(len(x.columns)), f"{x.n_reference}/{x.n_candidate}",
                  f"{x.statistic:.1f}", str(x.dof), _p(x.p_value), _p(x.p_holm), f"{x.tv:.3f}",
                  f"{x.cramers_v:.3f}", f"{x.detectable_tv:.3f}", style=style)
    console.print(t)
    if len(res.tests) > max_rows:
        console.print(f"({len(res.tests) - max_rows} more tests in audit.json)", highlight=False)
    g = res.greedy
    if g.rounds:
        line = f"greedy in batches mixed with sampled requests: {g.total - g.mismatches} of {g.total} identical to the reference's greedy output sent alone"
        if g.control_total:
            line += f"; control (reference, same mixed batches): {g.control_total - g.control_mismatches} of {g.control_total}"
        console.print(line, highlight=False)
        for e in g.examples:
            d = e.first_divergence
            console.print(f"  {escape(e.side)} prompt {escape(e.prompt_id)} round {e.round}: first difference at token "
                          f"{d}: expected {visible(str(e.expected[d:d + 6]))}, got {visible(str(e.got[d:d + 6]))}",
                          highlight=False)
    console.print(f"[{_STYLE[res.verdict]}]{res.verdict}[/]", highlight=False)
    for r in res.reasons:
        console.print(f"  • {escape(r)}", highlight=False)
