"""Console rendering of ``specgauge audit`` (rich). Data in, tables out; nothing here computes.

Server-provided text (model names, prompt ids from a workload) is escaped for rich markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.audit.run import AuditResult
from specgauge.i18n import t, translate, word
from specgauge.report.decide_console import visible

_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow"}


def _p(p: float) -> str:
    return "<1e-300" if p == 0 else f"{p:.3g}"


def render_audit(res: AuditResult, console: Console, max_rows: int = 40) -> None:
    cand, ref = res.servers.get("candidate"), res.servers.get("reference")
    if cand and ref:
        console.print(escape(t("audit.servers", cand=cand.base_url, cm=cand.model, ref=ref.base_url, rm=ref.model,
                                 src=cand.token_source, n_cand=t("audit.yes") if cand.supports_n else t("audit.no"),
                                 n_ref=t("audit.yes") if ref.supports_n else t("audit.no"))), highlight=False)
    s = res.settings
    tb = Table(title=t("audit.title", temp=s.get("temperature"), pos=s.get("positions")), title_justify="left")
    stat = "X²" if s.get("stats", {}).get("test") != "g" else "G"
    for i, col in enumerate((t("audit.c.prompt"), t("audit.c.pos"), t("audit.c.cols"), t("audit.c.n"), stat, t("audit.c.dof"), "p",
                             t("audit.c.p_holm"), "TV", "Cramér's V", t("audit.c.detects"))):
        tb.add_column(col, justify="left" if i == 0 else "right")
    rows = sorted(res.tests, key=lambda x: (not x.rejected, x.p_holm, x.prompt, x.position))[:max_rows]
    for x in sorted(rows, key=lambda x: (x.prompt, x.position)):
        style = "red" if x.rejected else None
        tb.add_row(escape(x.prompt_id), str(x.position), str(len(x.columns)), f"{x.n_reference}/{x.n_candidate}",
                  f"{x.statistic:.1f}", str(x.dof), _p(x.p_value), _p(x.p_holm), f"{x.tv:.3f}",
                  f"{x.cramers_v:.3f}", f"{x.detectable_tv:.3f}", style=style)
    console.print(tb)
    if len(res.tests) > max_rows:
        console.print(t("audit.more_tests", n=len(res.tests) - max_rows), highlight=False)
    g = res.greedy
    if g.rounds:
        line = t("audit.greedy", same=g.total - g.mismatches, n=g.total)
        if g.control_total:
            line += t("audit.greedy_control", same=g.control_total - g.control_mismatches, n=g.control_total)
        console.print(line, highlight=False)
        for e in g.examples:
            d = e.first_divergence
            console.print(t("audit.example", side=escape(word("audit.side", e.side)), prompt=escape(e.prompt_id), round=e.round, d=d,
                            exp=visible(str(e.expected[d:d + 6])), got=visible(str(e.got[d:d + 6]))), highlight=False)
    console.print(f"[{_STYLE[res.verdict]}]{escape(t('audit.verdict.' + res.verdict))}[/]", highlight=False)
    for r in res.reasons:
        console.print(f"  • {escape(translate(r))}", highlight=False)
