"""Console rendering (rich). Data in, tables out; nothing here computes a figure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specgauge.i18n import en as tr_en
from specgauge.i18n import get_lang
from specgauge.i18n import t as tr
from specgauge.i18n import translate
from specgauge.i18n.workload_text import DATA_KEYS
from specgauge.workload.profile import Dist, WorkloadProfile

if TYPE_CHECKING:
    from specgauge.simulate.cost_model import SpeedupPrediction
    from specgauge.simulate.run import SegmentResult, SimulateResult


def _data(text: str) -> str:
    """Labels the profile stores in English (temperature bands, count sources, tokenizer origin), in the
    current language."""
    if get_lang() == "en":
        return text
    for key in DATA_KEYS:
        text = text.replace(tr_en(key), tr(key))
    return text


def _note(text: str) -> str:
    """A note stored in English, in the current language, escaped for rich markup."""
    return escape(_data(translate(text)))


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
    t = Table(title=tr("profile.title.lengths"), title_justify="left")
    for col in ("segment", "requests", "logged", "prompt", "output", "max_tokens"):
        t.add_column(tr(f"profile.col.{col}"), justify="left" if col == "segment" else "right")
    for name, s in rows:
        if name == "overall":
            t.add_section()
        t.add_row(tr("profile.overall") if name == "overall" else name, str(s.requests), str(s.with_logged_response), _dist(s.prompt_tokens), _dist(s.output_tokens),
                  _dist(s.max_tokens), style="bold" if name == "overall" else None)
    console.print(t)
    m = Table(title=tr("profile.title.mix"), title_justify="left")
    heads = {"segment": "segment", "tools": "tools", "tool calls": "tool_calls", "RAG ctx": "rag", "copy overlap": "copy",
             "Hangul": "hangul", "languages": "languages"}
    for col in ("segment", "T=0", "top_p<1", "tools", "tool calls", "RAG ctx", "copy overlap", "Hangul", "languages"):
        m.add_column(tr(f"profile.col.{heads[col]}") if col in heads else col,
                     justify="left" if col in ("segment", "languages") else "right")
    for name, s in rows:
        if name == "overall":
            m.add_section()
        m.add_row(
            tr("profile.overall") if name == "overall" else name, _pct(s.temperature_mix.get("0 (greedy)", 0.0)), _pct(s.top_p_mix.get("< 1", 0.0)), _pct(s.tools_share),
            _pct(s.tool_call_share), _pct(s.context_share), _pct(s.copy_overlap), _pct(s.hangul_share),
            " ".join(f"{k}:{v}" for k, v in s.languages.items()), style="bold" if name == "overall" else None,
        )
    console.print(m)
    bands = ", ".join(f"T {b}: {_pct(v)}" for b, v in p.overall.temperature_mix.items())
    console.print(tr("profile.temp_mix", bands=_data(bands)), highlight=False)
    src = ", ".join(f"{k} {v}" for k, v in p.token_sources.items())
    tc = p.token_counting
    who = tc.tokenizer if tc is not None else p.tokenizer
    label = tr("profile.exact") if p.exact_tokens else tr("profile.approx")
    console.print(tr("profile.counts", label=label, src=_data(src), who=_data(who)), highlight=False, markup=False)
    o = p.overall
    if o.tool_calls_openai or o.tool_calls_text or o.tools_share:
        console.print(tr("profile.tool_calls", offer=_pct(o.tools_share), call=_pct(o.tool_call_share),
                         when=_pct(o.tool_call_share_when_offered), openai=o.tool_calls_openai,
                         openai_ok=o.tool_calls_openai_parsed, text=o.tool_calls_text,
                         parsed=o.tool_calls_text_parsed), highlight=False, markup=False)
    if p.skipped_invalid:
        console.print(f"[yellow]{tr('profile.skipped', n=p.skipped_invalid)}[/yellow]")
    for note in p.overall.notes:
        console.print(f"[yellow]{tr('console.note')}[/yellow] {_note(note)}", highlight=False)


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def _prediction(seg: SegmentResult, method: str, k: int, batch: int) -> SpeedupPrediction | None:
    return next((p for p in seg.predictions if p.method == method and p.k == k and p.batch == batch), None)


def _shown(v: float | None, mark: str) -> str:
    return "–" if v is None else f"{mark}{v:.2f}x"


def _predicted(seg: SegmentResult, method: str, k: int, batch: int, mark: str) -> str:
    p = _prediction(seg, method, k, batch)
    return _shown(None if p is None else p.predicted_speedup, mark)


def _banded(seg: SegmentResult, method: str, k: int, batch: int, mark: str) -> str:
    """The speedup with its band when a calibrated law predicted it (^: extrapolated)."""
    p = _prediction(seg, method, k, batch)
    if p is None or p.predicted_speedup is None:
        return "–"
    text = _shown(p.predicted_speedup, mark)
    if p.low is not None and p.high is not None:
        text += f" ({p.low:.2f}–{p.high:.2f})"
    return text + ("^" if p.extrapolated else "")


def render_simulation(r: SimulateResult, console: Console, detail: bool = False) -> None:
    from specgauge.simulate.cost_model import UNCALIBRATED

    # without a fitted law (--cost-profile) the speedup is the guessed cost model's: shown as a guess ("~"),
    # in a column that says so, never as a figure beside the measured acceptance
    guessed = all(p.source == UNCALIBRATED for p in r.overall.predictions)
    speedup_col = "simulate.col.guess" if guessed else "simulate.col.speedup"
    mark = "~" if guessed else ""
    # a hidden-state head's teacher-forced figure, beside the replayed one (absent for every other method)
    tf = any(s.teacher_forced_acceptance_rate is not None for s in r.overall.summaries)
    console.print(_overall_table(r, guessed, speedup_col, mark, tf))
    if tf:
        console.print(f"[yellow]{tr('console.note')}[/yellow] {escape(tr('simulate.tf_note'))}", highlight=False)
    console.print(_segment_table(r, guessed, speedup_col, mark))
    if detail:
        console.print(_detail_table(r, speedup_col, mark))
    _simulation_notes(r, console)


def _overall_table(r: SimulateResult, guessed: bool, speedup_col: str, mark: str, tf: bool) -> Table:
    """Every method × k over all requests, the speedup per batch size (the best k in bold green)."""
    t = Table(title=tr("simulate.title_guess" if guessed else "simulate.title", n=r.requests_replayed), title_justify="left")
    cols = [tr("simulate.col.method"), "k", tr("simulate.col.acc_rate"), *([tr("simulate.col.tf_acc")] if tf else []),
            "MAL", tr("simulate.col.per_position"), tr("simulate.col.tok_step"), tr("simulate.col.req_acc")]
    cols += [tr(speedup_col, b=b) for b in r.batch_sizes]
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i in (0, 5 if tf else 4) else "right")
    for s in r.overall.summaries:
        best = r.overall.best_k.get(s.method) == s.k
        ra = s.request_acceptance_rate
        t.add_row(
            s.method, str(s.k), _pct(s.acceptance_rate), *([_pct(s.teacher_forced_acceptance_rate)] if tf else []),
            _f(s.mean_acceptance_length),
            " ".join(_f(x, "{:.2f}") for x in s.per_position_rate), _f(s.tokens_per_step),
            "–" if ra.n == 0 else f"{_pct(ra.p10)}/{_pct(ra.p50)}/{_pct(ra.p90)}",
            *[_banded(r.overall, s.method, s.k, b, mark) for b in r.batch_sizes],
            style="bold green" if best else None,
        )
    return t


def _segment_table(r: SimulateResult, guessed: bool, speedup_col: str, mark: str) -> Table:
    """Each segment's best k per method at the first batch size, then the overall row."""
    b0 = r.batch_sizes[0]
    seg = Table(title=tr("simulate.title.segments_guess" if guessed else "simulate.title.segments", b=b0), title_justify="left")
    for i, c in enumerate([tr("profile.col.segment"), tr("simulate.col.method"), tr("simulate.col.best_k"),
                           tr("profile.col.requests"), tr("simulate.col.acc_rate"), "MAL", tr("simulate.col.tok_step"),
                           tr(speedup_col, b=b0)]):
        seg.add_column(c, justify="left" if i < 2 else "right")
    for name, sr in [*r.segments.items(), ("overall", r.overall)]:
        if name == "overall":
            seg.add_section()
            name = tr("profile.overall")
        for m in r.methods:
            k = sr.best_k.get(m)
            s = next((x for x in sr.summaries if x.method == m and x.k == k), None)
            if s is None:
                seg.add_row(name, m, "–", "0", "–", "–", "–", "–")
                continue
            seg.add_row(name, m, str(k), str(s.requests), _pct(s.acceptance_rate), _f(s.mean_acceptance_length),
                        _f(s.tokens_per_step), _predicted(sr, m, s.k, b0, mark))
    return seg


def _detail_table(r: SimulateResult, speedup_col: str, mark: str) -> Table:
    """Every segment × method × k row (``--detail``)."""
    b0 = r.batch_sizes[0]
    d = Table(title=tr("simulate.title.detail"), title_justify="left")
    for c in [tr("profile.col.segment"), tr("simulate.col.method"), "k", tr("simulate.col.acc_rate"), "MAL",
              tr("simulate.col.per_position_short"), tr(speedup_col, b=b0)]:
        d.add_column(c)
    for name, sr in r.segments.items():
        for s in sr.summaries:
            d.add_row(name, s.method, str(s.k), _pct(s.acceptance_rate), _f(s.mean_acceptance_length),
                      " ".join(_f(x) for x in s.per_position_rate), _predicted(sr, s.method, s.k, b0, mark))
    return d


def _simulation_notes(r: SimulateResult, console: Console) -> None:
    """Whether the figures are exact, what was skipped, the notes, and what the logs cannot tell."""
    bounded = any(not s.exact for s in r.overall.summaries)  # a note below gives those figures' bounds
    label = (tr("simulate.exact_bounded") if bounded else tr("simulate.exact")) if r.exact \
        else tr("simulate.approx", tok=_data(r.tokenizer))
    console.print(label, highlight=False, markup=False)
    for k, v in r.skipped.items():
        console.print(f"[yellow]{escape(tr('simulate.skipped', n=v, why=k))}[/yellow]")
    for note in r.notes:
        console.print(f"[yellow]{tr('console.note')}[/yellow] {_note(note)}", highlight=False)
    for s in r.overall.summaries:  # what the logs cannot tell (counts and tokens past each cut), at the best k
        if (s.open_tail_requests or s.inexact_requests) and r.overall.best_k.get(s.method) == s.k:
            console.print(f"[yellow]{tr('console.note')}[/yellow] {escape(s.method)} k={s.k}: {_note(s.notes[-1])}", highlight=False)
