"""Console rendering of ``specgauge compare`` (rich). Data in, tables out; nothing here computes.

Text from the runs (outputs, ids, segment names) is escaped for rich markup and shown with control
characters visible, so an output cannot restyle or garble the terminal.
"""

from __future__ import annotations

from contextlib import nullcontext

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.i18n import t, translate, use_lang
from specgauge.report.field_console import render_compare as render_field
from specgauge.stats.compare import CI, GroupComparison
from specgauge.stats.verdict import ComparisonResult, GroupVerdict, band

_STYLE = {"GO": "bold green", "NO-GO": "bold red", "INCONCLUSIVE": "bold yellow"}


def visible(text: str) -> str:
    """Control characters shown as escapes (\\n, \\t, \\x1b…), then rich-markup escaped."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return escape("".join(out))


def _ci(c: CI, fmt: str = "{:+.1f}", scale: float = 1.0) -> str:
    if c.estimate is None:
        return f"n/a ({c.reason})" if c.reason else "n/a"
    est = fmt.format(c.estimate * scale)
    if c.low is None or c.high is None:
        return est
    return f"{est} [{fmt.format(c.low * scale)}, {fmt.format(c.high * scale)}]"


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def _group_rows(tb: Table, g: GroupComparison) -> None:
    tb.add_row(escape(t("compare.overall") if g.group == "overall" else g.group), str(g.pairs), _ci(g.speedup, "{:.3f}×"),
              *[_ci(m.delta_ms) for m in g.latency if m.stat == "p95"],
              _ci(g.failure_rate_diff, "{:+.2f}", 100.0),
              _f(g.acceptance.acceptance_rate, "{:.1%}") if g.acceptance.available else "–",
              _f(g.acceptance.mean_acceptance_length, "{:.2f}") if g.acceptance.available else "–")


def _verdict_line(console: Console, name: str, v: GroupVerdict) -> None:
    finding = f" ({translate(v.finding)})" if v.finding and v.verdict.value != "GO" else ""
    console.print(f"[{_STYLE[v.verdict.value]}]{escape(t('verdict.' + v.verdict.value))}{escape(finding)}[/] {escape(name)}", highlight=False)
    for r in v.reasons:
        console.print(f"  • {escape(translate(r))}", highlight=False)
    if v.more_requests_reason:
        console.print(f"  → {escape(translate(v.more_requests_reason))}", highlight=False)
    for n in v.notes:
        console.print(f"  [dim]· {escape(translate(n))}[/dim]", highlight=False)


def render_comparison(r: ComparisonResult, console: Console, mismatches: int = 5, lang: str | None = None) -> None:
    """The comparison as tables and verdict lines in ``lang`` (None: the current language)."""
    with use_lang(lang) if lang else nullcontext():
        _render(r, console, mismatches)


def _render(r: ComparisonResult, console: Console, mismatches: int) -> None:
    console.print(f"{escape(t('compare.baseline'))} [bold]{escape(r.baseline.label)}[/bold] ({escape(r.baseline.path)})", highlight=False)
    console.print(f"{escape(t('compare.candidate'))} [bold]{escape(r.candidate.label)}[/bold] ({escape(r.candidate.path)})", highlight=False)
    if r.mode == "simulate":
        tb = Table(title=t("compare.sim_table"), title_justify="left")
        for key in ("segment", "method", "k", "acc_rate", "mal", "predicted_speedup"):
            tb.add_column(t(f"report.c.{key}"), justify="left" if key in ("segment", "method") else "right")
        for d in r.simulation:
            tb.add_row(escape(d.segment), escape(d.method), str(d.k),
                      f"{_f(d.baseline_acceptance_rate, '{:.1%}')} → {_f(d.candidate_acceptance_rate, '{:.1%}')}",
                      f"{_f(d.baseline_mal, '{:.2f}')} → {_f(d.candidate_mal, '{:.2f}')}",
                      f"{_f(d.baseline_predicted_speedup, '{:.2f}×')} → {_f(d.candidate_predicted_speedup, '{:.2f}×')}")
        console.print(tb)
    else:
        assert r.overall is not None
        conf = t("compare.conf", pct=f"{100 * r.config.confidence:g}")
        tb = Table(title=t("compare.table", conf=conf, n=r.config.resamples,
                           paired=t("compare.paired") if r.overall.paired else t("compare.unpaired")), title_justify="left")
        tb.add_column(t("report.c.segment"))
        tb.add_column(t("report.c.pairs"), justify="right")
        tb.add_column(t("compare.c.speedup"), justify="right")
        for m in r.overall.latency:
            if m.stat == "p95":
                tb.add_column(t("compare.c.delta_p95", metric=m.metric.upper()), justify="right")
        tb.add_column(t("compare.c.delta_fail"), justify="right")
        tb.add_column(t("report.c.acc_rate"), justify="right")
        tb.add_column(t("report.c.mal"), justify="right")
        for g in r.segments.values():
            _group_rows(tb, g)
        if r.segments:
            tb.add_section()
        _group_rows(tb, r.overall)
        console.print(tb)
        o = r.overall
        lat = Table(title=t("compare.lat_table"), title_justify="left")
        for i, c in enumerate((t("compare.c.statistic"), t("report.c.baseline"), t("report.c.candidate"), t("compare.c.ratio"),
                               t("compare.c.delta_ci", conf=conf))):
            lat.add_column(c, justify="left" if i == 0 else "right")
        for m in o.latency:
            lat.add_row(f"{m.metric.upper()} {m.stat}", _f(m.baseline_ms), _f(m.candidate_ms), _f(m.ratio, "{:.3f}"), _ci(m.delta_ms))
        console.print(lat)
        console.print(t("compare.requests", b=o.baseline_requests, bf=o.baseline_failed, c=o.candidate_requests,
                        cf=o.candidate_failed, bo=o.baseline_only, co=o.candidate_only, fp=o.failed_in_a_pair), highlight=False)
        if o.measured_throughput_ratio is not None:
            console.print(t("compare.tput_ratio", ratio=f"{o.measured_throughput_ratio:.3f}×"), highlight=False)
        if o.acceptance.available:
            pos = " ".join(f"{x:.2f}" for x in o.acceptance.per_position)
            console.print(escape(t("compare.acceptance", rate=_f(o.acceptance.acceptance_rate, '{:.1%}'),
                                   mal=_f(o.acceptance.mean_acceptance_length, '{:.2f}'), pos=pos or "–",
                                   src=translate(o.acceptance.basis()))), highlight=False)
        else:
            console.print(escape(t("compare.acceptance_na", why=translate(o.acceptance.reason or ""))), highlight=False)
        _render_equivalence(r, console, mismatches)
        _render_memory(r, console)
        render_field(r, console)
    for n in r.notes:
        console.print(f"[yellow]{escape(t('compare.note'))}[/yellow] {escape(translate(n))}", highlight=False)
    console.print()
    for name, v in r.verdict.segments.items():
        _verdict_line(console, t("compare.segment", name=name), v)
    _verdict_line(console, t("compare.overall"), r.verdict.overall)
    if r.mode == "bench":
        lo, hi = band(r.criteria.min_speedup)
        console.print(f"[dim]{escape(t('compare.margin', m=f'{r.criteria.min_speedup:g}', lo=f'{lo:.3f}', hi=f'{hi:.3f}'))}[/dim]",
                      highlight=False)


def _render_memory(r: ComparisonResult, console: Console) -> None:
    if not r.memory:
        return
    from specgauge.report.html import memory_value

    tb = Table(title=t("compare.c.memory"), title_justify="left")
    for i, c in enumerate((t("report.c.figure"), t("report.c.baseline"), t("report.c.candidate"), t("report.c.delta"), t("report.c.source"))):
        tb.add_column(c, justify="left" if i in (0, 4) else "right")
    for m in r.memory:
        tb.add_row(t(f"memory.{m.key}"), memory_value(m.key, m.baseline), memory_value(m.key, m.candidate),
                   memory_value(m.key, m.delta, True), escape(m.source))
    console.print(tb)


def _render_equivalence(r: ComparisonResult, console: Console, mismatches: int) -> None:
    assert r.overall is not None and r.overall.equivalence is not None
    eq = r.overall.equivalence
    g = eq.greedy
    console.print(f"[bold]{escape(t('compare.eq'))}[/bold] {escape(t('compare.eq_from', src=translate(eq.temperature_source)))}", highlight=False)
    if g.pairs:
        console.print(escape(t("compare.eq_greedy", m=g.matches, n=g.pairs, rate=_f(g.match_rate, '{:.2%}'), by=translate(g.compared_by))),
                      highlight=False)
        for m in g.mismatches[:mismatches]:
            where = [t("compare.eq_at_token", pos=m.token_position)] if m.token_position is not None else []
            if m.char_position is not None:
                where.append(t("compare.eq_at_char", pos=m.char_position))
            at = escape(t("compare.eq_mismatch", id=m.id, where=", ".join(where)))
            console.print(f"  [red]≠[/red] {at}: …{visible(m.context)}", highlight=False)
            console.print(f"      {escape(t('compare.eq_base'))} [green]{visible(m.baseline_continuation)}[/green]", highlight=False)
            console.print(f"      {escape(t('compare.eq_cand'))} [red]{visible(m.candidate_continuation)}[/red]", highlight=False)
        if len(g.mismatches) > mismatches:
            console.print(escape(t("compare.eq_more", n=len(g.mismatches) - mismatches)), highlight=False)
    s = eq.sampled
    if s.pairs:
        ks, tv = s.length_ks, s.unigram_tvd
        console.print(escape(t("compare.eq_sampled", n=s.pairs, d=_f(ks.statistic, '{:.3f}'), p=_f(ks.p_value, '{:.3g}'),
                               unit=translate(s.unigram_unit), tvd=_f(tv.statistic, '{:.4f}'), p2=_f(tv.p_value, '{:.3g}'))),
                      highlight=False)
    if eq.scorer is not None:
        sc = eq.scorer
        console.print(escape(t("compare.eq_scorer", name=eq.scorer_name or "", mean=_f(sc.statistic, "{:+.4g}"), n=sc.n,
                               p=_f(sc.p_value, "{:.3g}"), why=translate(sc.reason) if sc.reason else t("compare.eq_sign_flip"))),
                      highlight=False)
