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
    return out


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
        for check, rc in (("field.check.outputs", g.outputs), ("field.check.stalls", getattr(g, "stalls", None))):
            if rc is not None:
                rows.append((name, t(check), getattr(rc, "rate", rc)))
    return rows


def render_compare(r: Any, console: Any) -> None:
    """compare's table of the field checks (structured outputs, stalls), nothing when no run has any."""
    from rich.markup import escape
    from rich.table import Table

    rows = _compare_rows(r)
    if not rows:
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
