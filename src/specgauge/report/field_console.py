"""Console lines of the field-failure checks (``docs/field-failures.md``): a bench run's structured
outputs, stalls and acceptance against its replay; compare's per-segment table of the same, baseline
against candidate. Stored figures in, text out, in the current language; nothing computed here."""

from __future__ import annotations

from typing import Any

from specgauge.i18n import t, translate
from specgauge.stats.rates import RateComparison


def _kinds(block: dict[str, Any]) -> str:
    parts = []
    for kind, v in (block.get("kinds") or {}).items():
        parts.append(f"{t('field.kind.' + kind)} {v.get('invalid', 0)}/{v.get('judged', 0)}")
    return ", ".join(parts)


def bench_lines(g: dict[str, Any]) -> list[str]:
    """What a bench summary's ``specgauge`` block says about the field checks (empty: nothing to say)."""
    out: list[str] = []
    so = g.get("structured_outputs")
    if so:
        out.append(t("field.bench.outputs", k=so.get("invalid", 0), n=so.get("judged", 0), kinds=_kinds(so)))
        for ex in (so.get("examples") or [])[:1]:
            rid, _, err = str(ex).partition(": ")
            out.append(t("field.bench.first", id=rid, error=translate(err)))
    out += profile_lines((g.get("replay_check") or {}).get("profile"))
    st = g.get("stalls")
    if st and st.get("requests"):
        ref = st.get("tpot_ref_ms")
        out.append(t("field.bench.stalls", k=st.get("stalled", 0), n=st["requests"], thr=f"{st['threshold_ms']:.0f}",
                     ref="n/a" if ref is None else f"{ref:.1f}", p95=_ms(st.get("longest_gap_p95_ms")),
                     mx=_ms(st.get("longest_gap_max_ms"))))
        for row in (st.get("stalls") or [])[:3]:
            out.append(stall_line(row))
    return out


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def _rate(a: int, d: int) -> float | None:
    return a / d if d else None


def band_label(b: dict[str, Any]) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)

    return f"{k(b['lo'])}+" if b.get("hi") is None else f"{k(b['lo'])}–{k(b['hi'])}"


def profile_lines(prof: dict[str, Any] | None) -> list[str]:
    """A replay check's acceptance profile: per prompt-length band and per position, live / replayed."""
    if not prof or not prof.get("requests"):
        return []
    bands = ", ".join(t("field.band", band=band_label(b), live=_pct(_rate(b["server_accepted"], b["server_draft_tokens"])),
                        rep=_pct(_rate(b["replay_accepted"], b["replay_draft_tokens"])), n=b["requests"])
                      for b in prof.get("bands") or [])
    out = [t("field.bench.bands", bands=bands)]
    pos = " ".join(f"{_pct(p.get('server'))}/{_pct(p.get('replay'))}" for p in prof.get("positions") or [])
    if pos:
        out.append(t("field.bench.positions", pos=pos))
    col = prof.get("collapse")
    if col:
        out.append(t("field.bench.collapse", text=translate(col["summary"])))
    return out


def ttft_lines(split: Any) -> list[str]:
    """compare's TTFT split (``stats.ttft.TtftSplit``), one or two lines."""
    if split is None or split.measured_delta_ms is None:
        return []
    if split.queue_delta_ms is None or split.prefill_delta_ms is None:
        return [t("field.ttft.only", d=f"{split.measured_delta_ms:+.1f}", n=split.pairs, why=translate(split.reason or ""))]
    out = [t("field.ttft.split", d=f"{split.measured_delta_ms:+.1f}", n=split.pairs, q=f"{split.queue_delta_ms:+.1f}",
             p=f"{split.prefill_delta_ms:+.1f}", r=f"{split.rest_delta_ms:+.1f}")]
    if split.predicted_prefill_delta_ms is not None:
        out.append(t("field.ttft.predicted", p=f"{split.predicted_prefill_delta_ms:+.1f}", basis=translate(split.predicted_basis or "")))
    if split.finding:
        out.append(t(f"field.ttft.finding.{split.finding}"))
    return out


def _ms(v: Any) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def stall_line(row: dict[str, Any]) -> str:
    """One stall: request, gap, what ended it."""
    ended = row.get("ended_by")
    return t("field.bench.stall", id=row["id"], gap=f"{row['gap_ms']:.0f}",
             x="n/a" if row.get("times_tpot") is None else f"{row['times_tpot']:g}",
             text=t("field.unknown") if ended is None else repr(ended))


def rate_cells(r: RateComparison | None) -> tuple[str, str, str]:
    """(baseline k/n, candidate k/n, p) of one rate comparison, for a table row."""
    if r is None:
        return "", "", ""

    def side(k: int, n: int) -> str:
        return f"{k}/{n} ({100 * k / n:.1f} %)" if n else "n/a"

    p = "n/a" if r.p_value is None else f"{r.p_value:.2g}"
    return side(r.baseline_k, r.baseline_n), side(r.candidate_k, r.candidate_n), p


def _compare_rows(r: Any) -> list[tuple[str, str, RateComparison]]:
    """(group, check, comparison) of a ``ComparisonResult``: segments first, then overall."""
    rows: list[tuple[str, str, RateComparison]] = []
    groups = [*r.segments.values(), r.overall] if r.overall is not None else list(r.segments.values())
    for g in groups:
        name = t("compare.overall") if g.group == "overall" else g.group
        for check, rc in (("field.check.outputs", g.outputs), ("field.check.stalls", g.stalls.rate if g.stalls else None)):
            if rc is not None:
                rows.append((name, t(check), rc))
    return rows


def render_compare(r: Any, console: Any) -> None:
    """compare's table of the field checks (structured outputs, stalls), nothing when no run has any."""
    from rich.markup import escape
    from rich.table import Table

    rows = _compare_rows(r)
    if not rows:
        for line in ttft_lines(getattr(r, "ttft", None)):
            console.print(escape(line), highlight=False)
        return
    tb = Table(title=t("field.h.compare"), title_justify="left")
    for i, c in enumerate((t("field.c.group"), t("field.c.check"), t("field.c.baseline"), t("field.c.candidate"), t("field.c.p"))):
        tb.add_column(c, justify="left" if i < 2 else "right")
    for name, check, rc in rows:
        tb.add_row(escape(name), escape(check), *rate_cells(rc))
    console.print(tb)
    if r.overall is not None and r.overall.outputs is not None:
        for ex in r.overall.outputs.examples[:3]:
            rid, _, err = ex.partition(": ")
            console.print(escape(t("field.bench.first", id=rid, error=translate(err))), highlight=False)
    for line in ttft_lines(getattr(r, "ttft", None)):
        console.print(escape(line), highlight=False)
    st = r.overall.stalls if r.overall is not None else None
    if st is not None and st.stalls:
        console.print(escape(t("field.compare.stalls", thr=f"{st.threshold_ms:.0f}",
                               ref="n/a" if st.tpot_ref_ms is None else f"{st.tpot_ref_ms:.1f}")), highlight=False)
        for row in st.stalls[:5]:
            console.print(escape(stall_line(row.model_dump())), highlight=False)
