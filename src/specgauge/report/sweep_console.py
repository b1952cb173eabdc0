"""Console rendering (rich) of a sweep and of a recommendation. Data in, tables out.

Every string from the data (labels, reasons, flags) reaches the console as plain ``Text`` or with
``markup=False``: a ``[`` in a config label or a path is shown, never read as rich markup.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specgauge.i18n import t, translate, word
from specgauge.recommend.models import BandChoice, Recommendation, SegmentChoice
from specgauge.stats.compare import CI
from specgauge.sweep.models import CellResult, SweepManifest


def _n(v: float | None, fmt: str = "{:.0f}") -> str:
    return "–" if v is None or math.isnan(v) else fmt.format(v)


def _ci(ci: CI | None) -> str:
    if ci is None or ci.estimate is None:
        return "–" if ci is None or not ci.reason else t("bench.na")
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
    err = "–" if c.prediction_error is None else f"{100 * c.prediction_error:+.0f}%" + (t("sweep.in_ci") if c.prediction_in_ci else "")
    return f"{p.speedup:.2f}×{band}{t('sweep.extrap') if p.extrapolated else ''}", err


def status(s: str) -> str:
    """A cell's status in the current language (the stored value is the English word)."""
    return word("sweep.status", s)


def render_sweep(m: SweepManifest, console: Console) -> None:
    a = m.analysis
    if a is None:
        console.print(t("sweep.no_analysis"), highlight=False)
        return
    with_pred = any(c.predicted is not None for c in a.cells)
    tb = Table(title=t("sweep.title", base=a.baseline or t("sweep.the_baseline")), title_justify="left")
    cols = [t("sweep.c.config"), "C", t("sweep.c.status"), t("sweep.c.out_tps"), t("sweep.c.speedup_ci"), "TTFT", "TPOT", "E2E",
            t("sweep.c.fail"), t("sweep.c.acc_rate"), "MAL", t("sweep.c.greedy_same"), t("sweep.c.pareto")]
    if with_pred:
        cols += [t("sweep.c.predicted"), t("sweep.c.error")]
    for i, col in enumerate(cols):
        tb.add_column(col, justify="left" if i in (0, 2) else "right")
    last = None
    for c in a.cells:
        if last is not None and c.label != last:
            tb.add_section()
        last = c.label
        row = [c.label, str(c.concurrency), status(c.status), _n(c.throughput_tok_s, "{:.1f}"),
               t("sweep.baseline") if c.label == a.baseline and c.status == "done" else _ci(c.speedup),
               _pair(c.ttft_p50_ms, c.ttft_p95_ms), _pair(c.tpot_p50_ms, c.tpot_p95_ms), _pair(c.e2e_p50_ms, c.e2e_p95_ms),
               "–" if c.failure_rate is None else f"{100 * c.failure_rate:.1f}%",
               "–" if c.acceptance_rate is None else f"{100 * c.acceptance_rate:.1f}%", _n(c.mean_acceptance_length, "{:.2f}"),
               _greedy(c), "●" if c.on_pareto else ""]
        if with_pred:
            row += list(_pred(c))
        tb.add_row(*[Text(x) for x in row])
    console.print(tb)
    for x in a.crossovers:
        console.print(Text(t("sweep.crossover", text=translate(x.text))))
    if a.pareto:
        console.print(Text(t("sweep.pareto", points=", ".join(
            t("sweep.pareto_point", label=p.label, c=p.concurrency, tps=f"{p.throughput_tok_s:.0f}", ms=f"{p.e2e_p95_ms:.0f}")
            for p in a.pareto))))
    if a.prediction.profile and not a.prediction.available:
        console.print(Text(t("sweep.predicted_none", why=translate(a.prediction.reason or ""))))
    for c in m.cells:
        if c.status == "skipped":
            console.print(Text(t("sweep.cell_skipped", label=c.label, c=c.concurrency, why=translate(c.skipped_reason or ""))))
        elif c.status in ("failed", "interrupted"):
            console.print(Text(t("sweep.cell_failed", status=status(c.status), label=c.label, c=c.concurrency, why=translate(c.error or ""))))
    for c in a.cells:
        for n in c.notes:
            if c.status == "done":
                console.print(Text(t("sweep.cell_note", label=c.label, c=c.concurrency, text=translate(n))))
    for n in a.notes:
        console.print(Text(t("sweep.note", text=translate(n))))


def _band_row(b: BandChoice) -> list[str]:
    o = b.option
    rng = f"{b.batch_range[0]}–{b.batch_range[1]}" if b.batch_range[0] != b.batch_range[1] else str(b.batch_range[0])
    shown = o or b.best
    interval = "–" if shown is None or shown.estimate is None else (
        f"{shown.estimate:.2f}×" + (f" [{shown.low:.2f}, {shown.high:.2f}]" if shown.low is not None and shown.high is not None else ""))
    if o is None and b.best is not None:
        interval = t("rec.best", label=b.best.label, interval=interval)
    return [str(b.concurrency), rng, choice(b.choice), interval, translate(b.reason)]


def choice(label: str) -> str:
    """A band's choice: a config label as it is, "off" in the current language."""
    return t("rec.choice.off") if label == "off" else label


def segment_line(s: SegmentChoice, min_speedup: float) -> str:
    """One segment's choices, from its bands (the stored ``summary`` is the same line in English)."""
    chosen = [b for b in s.bands if b.option is not None]
    thr = f"{min_speedup:g}×"
    if not chosen:
        return t("rec.s.off", seg=s.segment, thr=thr)
    parts = ", ".join(t("rec.s.at", choice=b.choice, c=b.concurrency) for b in chosen)
    offs = [str(b.concurrency) for b in s.bands if b.option is None]
    return t("rec.s.parts_off", seg=s.segment, parts=parts, cs=", ".join(offs)) if offs else t("rec.s.parts", seg=s.segment, parts=parts)


def _bands_table(title: str, bands: list[BandChoice], interval: str) -> Table:
    tb = Table(title=title, title_justify="left")
    for i, col in enumerate(("rec.c.concurrency", "rec.c.batch", "rec.c.choice", "rec.c.speedup", "rec.c.why")):
        tb.add_column(t(col), justify="left" if i in (2, 4) else "right", overflow="fold")
    for b in bands:
        tb.add_row(*[Text(x) for x in _band_row(b)])
    return tb


def render_recommendation(r: Recommendation, console: Console) -> None:
    src = t("rec.src.sweep") if r.source == "sweep" else t("rec.src.predicted")
    console.rule(Text(t("rec.title", src=src, name=r.source_name, m=f"{r.min_speedup:g}")))
    console.print(Text((t("rec.off_prefix") if r.verdict == "off" else "") + translate(r.headline), style="bold"))
    interval = t("rec.ci") if r.source == "sweep" else t("rec.band")
    console.print(_bands_table(t("rec.bands_title", interval=interval), r.bands, interval))
    if r.verdict == "speculate" and [b.choice for b in r.method_bands] != [b.choice for b in r.bands]:
        console.print(_bands_table(t("rec.method_title", method=r.method), r.method_bands, interval))
    for engine, cmd, notes in (("vLLM", r.flags.vllm, []), ("llama.cpp", r.flags.llamacpp, r.flags.llamacpp_notes),
                               ("SGLang", r.flags.sglang, r.flags.sglang_notes)):
        console.print(Text(f"{engine}:", style="bold"))
        console.print(Text(f"  {cmd or t('rec.no_equivalent')}"), soft_wrap=True)
        for n in notes:
            console.print(Text("    " + t("rec.note", text=translate(n))))
    if r.segments:
        console.print(Text(t("rec.per_segment"), style="bold"))
        for s in r.segments:
            console.print(Text(f"  {segment_line(s, r.min_speedup)}"))
    for x in r.crossovers:
        console.print(Text(t("rec.crossover", text=translate(x))))
    if r.verdict == "off":
        for why in r.reasons:
            console.print(Text(t("rec.why", text=translate(why))))
    for n in r.notes:
        console.print(Text(t("rec.note", text=translate(n))))
