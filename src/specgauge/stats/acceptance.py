"""Acceptance of draft tokens: per request, per segment, per run, and against the server's counters.

Definitions (vLLM's): acceptance rate = accepted / drafted tokens; mean acceptance length (MAL)
= 1 + accepted / drafts; per-position acceptance[i] = drafts whose token i was accepted / drafts.
Totals are token-weighted; the per-request distribution is reported too, because long completions
dominate a token-weighted figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specgauge.distributions import DEFAULT_PERCENTILES, describe, finite_or_none
from specgauge.i18n import en
from specgauge.records import RequestRecord, SpecCounts


def counts_json(s: SpecCounts | None, reason: str = "") -> dict[str, Any]:
    if s is None:
        return {"available": False, "reason": reason or en("acc.r.not_exposed")}
    return {
        "available": True,
        "source": s.source,
        "drafts": s.drafts,
        "draft_tokens": s.draft_tokens,
        "accepted_tokens": s.accepted_tokens,
        "acceptance_rate": finite_or_none(s.acceptance_rate),
        "mean_acceptance_length": finite_or_none(s.mean_acceptance_length),
        "per_position_acceptance_rate": s.per_position_rate,
        "accepted_per_pos": s.accepted_per_pos,
    }


def acceptance_summary(records: Sequence[RequestRecord], percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """Sum of the server's per-request counts over successful requests, and their distribution."""
    ok = [r for r in records if r.ok]
    specs = [r.spec for r in ok if r.spec is not None]
    if not specs:
        why = en("stats.r.no_success") if not ok else en("acc.r.no_per_request")
        return {"per_request_total": counts_json(None, why)}
    total = SpecCounts.total(specs)
    rates = [s.acceptance_rate for s in specs if s.draft_tokens]
    mals = [s.mean_acceptance_length for s in specs if s.drafts]
    return {
        "per_request_total": counts_json(total),
        "requests_with_counts": len(specs),
        "requests_without_counts": len(ok) - len(specs),
        "acceptance_rate_per_request": describe(rates, percentiles, en("acc.r.no_drafted")).to_json(),
        "mean_acceptance_length_per_request": describe(mals, percentiles, en("acc.r.no_drafts")).to_json(),
    }


def agreement(per_request: SpecCounts | None, counters: SpecCounts | None) -> dict[str, Any]:
    """Field-by-field equality of per-request sums and the /metrics diff (fields both expose)."""
    if per_request is None or counters is None:
        return {"compared": False, "reason": en("acc.r.need_both")}
    fields: dict[str, Any] = {}
    for f in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos"):
        a, b = getattr(per_request, f), getattr(counters, f)
        if a is not None and b is not None:
            fields[f] = {"per_request": a, "counters": b, "equal": a == b}
    return {"compared": bool(fields), "equal": all(v["equal"] for v in fields.values()) if fields else None, "fields": fields}
