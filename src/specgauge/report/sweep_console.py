"""Console rendering (rich) of a sweep and of a recommendation. Data in, tables out.

Every string from the data (labels, reasons, flags) reaches the console as plain ``Text`` or with
``markup=False``: a ``[`` in a config label or a path is shown, never read as rich markup.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specgauge.recommend.models import BandChoice, Recommendation
from specgauge.stats.compare import CI
from specgauge.sweep.models import CellResult, SweepManifest


def _n(v: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if v is None or math.isnan(v) else fmt.format(v)


def _ci(ci: CI | None) -> str:
    if ci is None or ci.estimate is None:
        return "–" if ci is None or not ci.reason else "n/a"
    if ci.low is None or ci.high is None:
        return f"{ci.estimate:.2f}×"
    return f"{ci.estimate:.2f}× [{ci.low:.2f}, {ci.high:.2f}]"


def _pair(a: float | None, b: float | None) -> str:
    return f"{_n(a)}/{_n(b)}"


def _greedy(c: CellResult) -> str:
    if not c.greedy_pairs:
        return "–"
    return f"{c.greedy_matches}/{c.greedy_pairs}"


def _pred(c: CellResult) -> tuple[str, str]:
    p = c.predicted
    if p is None or p.speedup is None:
        return "–", "–"
    band = f" [{p.speedup_low:.2f}, {p.speedup_high:.2f}]" if p.speedup_low is not None and p.speedup_high is not None else ""
    err = "–" if c.prediction_error is None else f"{100 * c.prediction_error:+.0f}%" + (" (in CI)" if c.prediction_in_ci else "")
    return f"{p.speedup:.2f}×{band}{' extrap.' if p.extrapolated else ''}", err


def render_sweep(m: SweepManifest, console: Console) -> None:
    a = m.analysis
    if a is None:
        console.print("the sweep has no analysis yet (run or resume it)", highlight=False)
        return
    with_pred = any(c.predicted is not None for c in a.cells)
    t = Table(title=f"Sweep: every cell against {a.baseline or 'the baseline'} at the same concurrency "
                    "(speedup: paired, 95 % bootstrap CI; latency in ms p50/p95)", title_justify="left")
    cols = ["config", "C", "status", "out tok/s", "speedup [95 % CI]", "TTFT", "TPOT", "E2E", "fail", "acc rate", "MAL",
            "greedy same", "Pareto"]
    if with_pred:
        cols += ["predicted", "error"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("config", "status") else "right")
    last = None
    for c in a.cells:
        if last is not None and c.label != last:
            t.add_section()
        last = c.label
        row = [c.label, str(c.concurrency), c.status, _n(c.throughput_tok_s, "{:.1f}"),
               "baseline" if c.label == a.baseline and c.status == "done" else _ci(c.speedup),
               _pair(c.ttft_p50_ms, c.ttft_p95_ms), _pair(c.tpot_p50_ms, c.tpot_p95_ms), _pair(c.e2e_p50_ms, c.e2e_p95_ms),
               "–" if c.failure_rate is None else f"{100 * c.failure_rate:.1f}%",
               "–" if c.acceptance_rate is None else f"{100 * c.acceptance_rate:.1f}%", _n(c.mean_acceptance_length, "{:.2f}"),
               _greedy(c), "●" if c.on_pareto else ""]
        if with_pred:
            row += list(_pred(c))
        t.add_row(*[Text(x) for x in row])
    console.print(t)
    for x in a.crossovers:
        console.print(Text(f"crossover: {x.text}"))
    if a.pareto:
        console.print(Text("Pareto front (throughput up, p95 E2E down): " +
                           ", ".join(f"{p.label}@{p.concurrency} ({p.throughput_tok_s:.0f} tok/s, {p.e2e_p95_ms:.0f} ms)" for p in a.pareto)))
    if a.prediction.profile and not a.prediction.available:
        console.print(Text(f"predicted: none ({a.prediction.reason})"))
    for c in m.cells:
        if c.status == "skipped":
            console.print(Text(f"skipped: {c.label} at concurrency {c.concurrency}: {c.skipped_reason}"))
        elif c.status in ("failed", "interrupted"):
            console.print(Text(f"{c.status}: {c.label} at concurrency {c.concurrency}: {c.error}"))
    for c in a.cells:
        for n in c.notes:
            if c.status == "done":
                console.print(Text(f"note: {c.label} at concurrency {c.concurrency}: {n}"))
    for n in a.notes:
        console.print(Text(f"note: {n}"))


def _band_row(b: BandChoice) -> list[str]:
    o = b.option
    rng = f"{b.batch_range[0]}–{b.batch_range[1]}" if b.batch_range[0] != b.batch_range[1] else str(b.batch_range[0])
    shown = o or b.best
    interval = "–" if shown is None or shown.estimate is None else (
        f"{shown.estimate:.2f}×" + (f" [{shown.low:.2f}, {shown.high:.2f}]" if shown.low is not None and shown.high is not None else ""))
    if o is None and b.best is not None:
        interval = f"(best {b.best.label}: {interval})"
    return [str(b.concurrency), rng, b.choice, interval, b.reason]


def render_recommendation(r: Recommendation, console: Console) -> None:
    src = "measured in the sweep" if r.source == "sweep" else "predicted from replay + calibration"
    console.rule(Text(f"Recommendation ({src}: {r.source_name}; margin {r.min_speedup:g}×)"))
    console.print(Text(("OFF — " if r.verdict == "off" else "") + r.headline, style="bold"))
    interval = "95 % CI" if r.source == "sweep" else "prediction band"
    t = Table(title=f"Best configuration per concurrency band (speedup [{interval}])", title_justify="left")
    for col in ("concurrency", "batch sizes", "choice", "speedup", "why"):
        t.add_column(col, justify="left" if col in ("choice", "why") else "right", overflow="fold")
    for b in r.bands:
        t.add_row(*[Text(x) for x in _band_row(b)])
    console.print(t)
    if r.verdict == "speculate" and [b.choice for b in r.method_bands] != [b.choice for b in r.bands]:
        mt = Table(title=f"{r.method}: best k per band (one server runs one method)", title_justify="left")
        for col in ("concurrency", "batch sizes", "choice", "speedup", "why"):
            mt.add_column(col, justify="left" if col in ("choice", "why") else "right", overflow="fold")
        for b in r.method_bands:
            mt.add_row(*[Text(x) for x in _band_row(b)])
        console.print(mt)
    console.print(Text("vLLM:", style="bold"))
    console.print(Text(f"  {r.flags.vllm}"), soft_wrap=True)
    console.print(Text("llama.cpp:", style="bold"))
    console.print(Text(f"  {r.flags.llamacpp or '(no equivalent)'}"), soft_wrap=True)
    for n in r.flags.llamacpp_notes:
        console.print(Text(f"    note: {n}"))
    console.print(Text("SGLang:", style="bold"))
    console.print(Text(f"  {r.flags.sglang or '(no equivalent)'}"), soft_wrap=True)
    for n in r.flags.sglang_notes:
        console.print(Text(f"    note: {n}"))
    if r.segments:
        console.print(Text("Per segment:", style="bold"))
        for s in r.segments:
            console.print(Text(f"  {s.summary}"))
    for x in r.crossovers:
        console.print(Text(f"crossover: {x}"))
    if r.verdict == "off":
        for why in r.reasons:
            console.print(Text(f"why: {why}"))
    for n in r.notes:
        console.print(Text(f"note: {n}"))
