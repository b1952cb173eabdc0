"""Console rendering (rich). Data in, tables out; nothing here computes a figure."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
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
    tc = p.token_counting
    who = tc.tokenizer if tc is not None else p.tokenizer
    console.print(f"token counts {'exact' if p.exact_tokens else 'APPROXIMATE'}; from {src}; tokenizer {who}", highlight=False,
                  markup=False)
    o = p.overall
    if o.tool_calls_openai or o.tool_calls_text or o.tools_share:
        console.print(
            f"tool calls: {_pct(o.tools_share)} of requests offer tools; {_pct(o.tool_call_share)} of logged responses call one "
            f"({_pct(o.tool_call_share_when_offered)} where offered): {o.tool_calls_openai} as OpenAI tool_calls, "
            f"{o.tool_calls_text} as text (<tool_call>…), {o.tool_calls_text_parsed} of those well-formed JSON", highlight=False, markup=False)
    if p.skipped_invalid:
        console.print(f"[yellow]{p.skipped_invalid} invalid request(s) skipped[/yellow]")
    for note in p.overall.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def render_simulation(r: "SimulateResult", console: Console, detail: bool = False) -> None:  # noqa: F821
    from specgauge.simulate.run import SegmentResult

    b0 = r.batch_sizes[0]

    def pred(seg: SegmentResult, method: str, k: int, batch: int) -> float | None:
        return next((p.predicted_speedup for p in seg.predictions if p.method == method and p.k == k and p.batch == batch), None)

    def banded(seg: SegmentResult, method: str, k: int, batch: int) -> str:
        """The speedup with its band when a calibrated law predicted it (^: extrapolated)."""
        p = next((p for p in seg.predictions if p.method == method and p.k == k and p.batch == batch), None)
        if p is None or p.predicted_speedup is None:
            return "–"
        text = f"{p.predicted_speedup:.2f}x"
        if p.low is not None and p.high is not None:
            text += f" ({p.low:.2f}–{p.high:.2f})"
        return text + ("^" if p.extrapolated else "")

    t = Table(title=f"Offline acceptance replay, all requests ({r.requests_replayed} replayed)", title_justify="left")
    cols = ["method", "k", "acc rate", "MAL", "per-position acceptance", "tok/step", "req acc p10/p50/p90"]
    cols += [f"speedup B={b}" for b in r.batch_sizes]
    for c in cols:
        t.add_column(c, justify="left" if c in ("method", "per-position acceptance") else "right")
    for s in r.overall.summaries:
        best = r.overall.best_k.get(s.method) == s.k
        ra = s.request_acceptance_rate
        t.add_row(
            s.method, str(s.k), _pct(s.acceptance_rate), _f(s.mean_acceptance_length),
            " ".join(_f(x, "{:.2f}") for x in s.per_position_rate), _f(s.tokens_per_step),
            "–" if ra.n == 0 else f"{_pct(ra.p10)}/{_pct(ra.p50)}/{_pct(ra.p90)}",
            *[banded(r.overall, s.method, s.k, b) for b in r.batch_sizes],
            style="bold green" if best else None,
        )
    console.print(t)
    seg = Table(title=f"Per segment: best k by predicted speedup at batch {b0}", title_justify="left")
    for c in ["segment", "method", "best k", "requests", "acc rate", "MAL", "tok/step", f"speedup B={b0}"]:
        seg.add_column(c, justify="left" if c in ("segment", "method") else "right")
    for name, sr in [*r.segments.items(), ("overall", r.overall)]:
        if name == "overall":
            seg.add_section()
        for m in r.methods:
            k = sr.best_k.get(m)
            s = next((x for x in sr.summaries if x.method == m and x.k == k), None)
            if s is None:
                seg.add_row(name, m, "–", "0", "–", "–", "–", "–")
                continue
            seg.add_row(name, m, str(k), str(s.requests), _pct(s.acceptance_rate), _f(s.mean_acceptance_length),
                        _f(s.tokens_per_step), _f(pred(sr, m, s.k, b0), "{:.2f}x"))
    console.print(seg)
    if detail:
        d = Table(title="Per segment × method × k", title_justify="left")
        for c in ["segment", "method", "k", "acc rate", "MAL", "per-position", f"speedup B={b0}"]:
            d.add_column(c)
        for name, sr in r.segments.items():
            for s in sr.summaries:
                d.add_row(name, s.method, str(s.k), _pct(s.acceptance_rate), _f(s.mean_acceptance_length),
                          " ".join(_f(x) for x in s.per_position_rate), _f(pred(sr, s.method, s.k, b0), "{:.2f}x"))
        console.print(d)
    label = "EXACT (logged token ids)" if r.exact else f"APPROXIMATE (text re-tokenised by {r.tokenizer}; see the note)"
    console.print(f"acceptance {label}", highlight=False, markup=False)
    for k, v in r.skipped.items():
        console.print(f"[yellow]skipped {v} request(s): {escape(k)}[/yellow]")
    for note in r.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
    for s in r.overall.summaries:  # suffix: what the logs cannot tell (tokens past each cut), at the best k
        if s.open_tail_requests and r.overall.best_k.get(s.method) == s.k:
            console.print(f"[yellow]note:[/yellow] {escape(s.method)} k={s.k}: {escape(s.notes[-1])}", highlight=False)
