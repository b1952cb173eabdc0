"""Console rendering of ``specgauge compare`` (rich). Data in, tables out; nothing here computes.

Text from the runs (outputs, ids, segment names) is escaped for rich markup and shown with control
characters visible, so an output cannot restyle or garble the terminal.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

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


def _group_rows(t: Table, g: GroupComparison) -> None:
    t.add_row(escape(g.group), str(g.pairs), _ci(g.speedup, "{:.3f}×"),
              *[_ci(m.delta_ms) for m in g.latency if m.stat == "p95"],
              _ci(g.failure_rate_diff, "{:+.2f}", 100.0),
              _f(g.acceptance.acceptance_rate, "{:.1%}") if g.acceptance.available else "–",
              _f(g.acceptance.mean_acceptance_length, "{:.2f}") if g.acceptance.available else "–")


def _verdict_line(console: Console, name: str, v: GroupVerdict) -> None:
    finding = f" ({v.finding})" if v.finding and v.verdict.value != "GO" else ""
    console.print(f"[{_STYLE[v.verdict.value]}]{v.verdict.value}{finding}[/] {escape(name)}", highlight=False)
    for r in v.reasons:
        console.print(f"  • {escape(r)}", highlight=False)
    if v.more_requests_reason:
        console.print(f"  → {escape(v.more_requests_reason)}", highlight=False)
    for n in v.notes:
        console.print(f"  [dim]· {escape(n)}[/dim]", highlight=False)


def render_comparison(r: ComparisonResult, console: Console, mismatches: int = 5) -> None:
    console.print(f"baseline  [bold]{escape(r.baseline.label)}[/bold] ({escape(r.baseline.path)})", highlight=False)
    console.print(f"candidate [bold]{escape(r.candidate.label)}[/bold] ({escape(r.candidate.path)})", highlight=False)
    if r.mode == "simulate":
        t = Table(title="Simulated acceptance: baseline → candidate", title_justify="left")
        for c in ("segment", "method", "k", "acc rate", "MAL", "predicted speedup"):
            t.add_column(c, justify="left" if c in ("segment", "method") else "right")
        for d in r.simulation:
            t.add_row(escape(d.segment), escape(d.method), str(d.k),
                      f"{_f(d.baseline_acceptance_rate, '{:.1%}')} → {_f(d.candidate_acceptance_rate, '{:.1%}')}",
                      f"{_f(d.baseline_mal, '{:.2f}')} → {_f(d.candidate_mal, '{:.2f}')}",
                      f"{_f(d.baseline_predicted_speedup, '{:.2f}×')} → {_f(d.candidate_predicted_speedup, '{:.2f}×')}")
        console.print(t)
    else:
        assert r.overall is not None
        conf = f"{100 * r.config.confidence:g} % CI"
        t = Table(title=f"Candidate vs baseline ({conf}, {r.config.resamples} bootstrap resamples, "
                        f"{'paired' if r.overall.paired else 'unpaired'})", title_justify="left")
        t.add_column("segment")
        t.add_column("pairs", justify="right")
        t.add_column("speedup", justify="right")
        for m in r.overall.latency:
            if m.stat == "p95":
                t.add_column(f"Δ {m.metric.upper()} p95 ms", justify="right")
        t.add_column("Δ fail %pt", justify="right")
        t.add_column("acc rate", justify="right")
        t.add_column("MAL", justify="right")
        for g in r.segments.values():
            _group_rows(t, g)
        if r.segments:
            t.add_section()
        _group_rows(t, r.overall)
        console.print(t)
        o = r.overall
        lat = Table(title="Latency overall, baseline → candidate (ms)", title_justify="left")
        for c in ("statistic", "baseline", "candidate", "ratio", f"Δ ms [{conf}]"):
            lat.add_column(c, justify="left" if c == "statistic" else "right")
        for m in o.latency:
            lat.add_row(f"{m.metric.upper()} {m.stat}", _f(m.baseline_ms), _f(m.candidate_ms), _f(m.ratio, "{:.3f}"), _ci(m.delta_ms))
        console.print(lat)
        console.print(
            f"requests: baseline {o.baseline_requests} ({o.baseline_failed} failed), candidate {o.candidate_requests} "
            f"({o.candidate_failed} failed); unpaired: {o.baseline_only} only in baseline, {o.candidate_only} only in "
            f"candidate, {o.failed_in_a_pair} failed on a side", highlight=False)
        if o.measured_throughput_ratio is not None:
            console.print(f"run-level output throughput ratio (no CI): {o.measured_throughput_ratio:.3f}×", highlight=False)
        if o.acceptance.available:
            pos = " ".join(f"{x:.2f}" for x in o.acceptance.per_position)
            console.print(f"candidate acceptance: rate {_f(o.acceptance.acceptance_rate, '{:.1%}')}, MAL "
                          f"{_f(o.acceptance.mean_acceptance_length, '{:.2f}')}, per position {pos or '–'} "
                          f"(from {escape(o.acceptance.basis())})", highlight=False)
        else:
            console.print(f"candidate acceptance: n/a ({escape(o.acceptance.reason or '')})", highlight=False)
        _render_equivalence(r, console, mismatches)
    for n in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(n)}", highlight=False)
    console.print()
    for name, v in r.verdict.segments.items():
        _verdict_line(console, f"segment {name}", v)
    _verdict_line(console, "overall", r.verdict.overall)
    if r.mode == "bench":
        lo, hi = band(r.criteria.min_speedup)
        console.print(f"[dim]practical margin {r.criteria.min_speedup:g}× (--min-speedup): GO needs the whole speedup CI "
                      f"above it; inside [{lo:.3f}×, {hi:.3f}×] is equivalent (NO-GO: nothing worth turning on)[/dim]",
                      highlight=False)


def _render_equivalence(r: ComparisonResult, console: Console, mismatches: int) -> None:
    assert r.overall is not None and r.overall.equivalence is not None
    eq = r.overall.equivalence
    g = eq.greedy
    console.print(f"[bold]Output equivalence[/bold] (temperatures from {escape(eq.temperature_source)})", highlight=False)
    if g.pairs:
        console.print(f"  temperature 0: {g.matches}/{g.pairs} exact matches ({_f(g.match_rate, '{:.2%}')}, by {g.compared_by})",
                      highlight=False)
        for m in g.mismatches[:mismatches]:
            where = f"token {m.token_position}" if m.token_position is not None else ""
            if m.char_position is not None:
                where += (", " if where else "") + f"char {m.char_position}"
            console.print(f"  [red]≠[/red] {escape(m.id)} at {where}: …{visible(m.context)}", highlight=False)
            console.print(f"      baseline:  [green]{visible(m.baseline_continuation)}[/green]", highlight=False)
            console.print(f"      candidate: [red]{visible(m.candidate_continuation)}[/red]", highlight=False)
        if len(g.mismatches) > mismatches:
            console.print(f"  … {len(g.mismatches) - mismatches} more mismatches in --json", highlight=False)
    s = eq.sampled
    if s.pairs:
        ks, tv = s.length_ks, s.unigram_tvd
        console.print(f"  temperature > 0 ({s.pairs} pairs): output lengths KS D={_f(ks.statistic, '{:.3f}')} "
                      f"p={_f(ks.p_value, '{:.3g}')}; {s.unigram_unit} frequencies TVD={_f(tv.statistic, '{:.4f}')} "
                      f"p={_f(tv.p_value, '{:.3g}')}", highlight=False)
    if eq.scorer is not None:
        sc = eq.scorer
        console.print(f"  scorer {escape(eq.scorer_name or '')}: mean {_f(sc.statistic, '{:+.4g}')} over {sc.n} pairs, "
                      f"p={_f(sc.p_value, '{:.3g}')} ({sc.reason or 'paired sign-flip test'})", highlight=False)
