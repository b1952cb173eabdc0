"""Structured outputs of a run: how many requests asked for tool calls or JSON, how many answers broke
their request's schema (``RequestRecord.output_check``, written by the load generator and the canary
proxy with ``specgauge.structured``), per kind; and baseline against candidate (``stats.rates``).

A request counts once it was judged (``valid`` True or False): an ``auto`` tool choice answered in
text and a request whose schema is no JSON Schema are not judged. Failed requests are not here (the
failure rate has them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgauge.records import RequestRecord
from specgauge.stats.rates import RateComparison, compare_rates

MAX_EXAMPLES = 5


def judged(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Successful records whose structured output was judged valid or invalid."""
    return [r for r in records if r.ok and r.output_check is not None and r.output_check.valid is not None]


def invalid(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in judged(records) if r.output_check is not None and r.output_check.valid is False]


def examples(records: Sequence[RequestRecord], n: int = MAX_EXAMPLES) -> list[str]:
    return [f"{r.id}: {r.output_check.error}" for r in invalid(records)[:n] if r.output_check is not None]


def outputs_summary(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """``summary.json``'s ``specgauge.structured_outputs``: judged and invalid per kind, the first
    problems; None when no request asked for a structured output."""
    asked = [r for r in records if r.output_check is not None]
    if not asked:
        return None
    out: dict[str, Any] = {"asked": len(asked), "judged": len(judged(records)), "invalid": len(invalid(records)),
                           "kinds": {}, "examples": examples(records)}
    for kind in ("tool_call", "json"):
        rs = [r for r in records if r.output_check is not None and r.output_check.kind == kind]
        if rs:
            out["kinds"][kind] = {"asked": len(rs), "judged": len(judged(rs)), "invalid": len(invalid(rs))}
    return out


def compare_outputs(baseline: Sequence[RequestRecord], candidate: Sequence[RequestRecord]) -> RateComparison | None:
    """Invalid structured outputs, baseline against candidate; None when neither side judged any."""
    jb, jc = judged(baseline), judged(candidate)
    if not jb and not jc:
        return None
    return compare_rates(len(invalid(jb)), len(jb), len(invalid(jc)), len(jc), examples(candidate))
