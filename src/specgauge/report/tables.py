"""Flat CSV rows of results (one row per segment × method × k [× batch])."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any

from specgauge.simulate.run import SimulateResult


def simulation_rows(r: SimulateResult) -> list[dict[str, Any]]:
    rows = []
    for name, sr in [("(all)", r.overall), *r.segments.items()]:
        for s in sr.summaries:
            row: dict[str, Any] = {
                "segment": name, "method": s.method, "k": s.k, "requests": s.requests, "output_tokens": s.output_tokens,
                "steps": s.steps, "drafts": s.drafts, "draft_tokens": s.draft_tokens, "accepted_tokens": s.accepted_tokens,
                "acceptance_rate": s.acceptance_rate, "mean_acceptance_length": s.mean_acceptance_length,
                "tokens_per_step": s.tokens_per_step, "request_acceptance_p50": s.request_acceptance_rate.p50,
                "best_k": sr.best_k.get(s.method) == s.k, "exact": s.exact,
            }
            if s.bounds_kind is not None:  # the acceptance lies in acceptance_rate_bounds: guaranteed or the replay's extremes
                row["bounds_kind"] = s.bounds_kind
            if s.teacher_forced_acceptance_rate is not None:  # a hidden-state head: training tools' optimistic figure
                row["teacher_forced_acceptance_rate"] = s.teacher_forced_acceptance_rate
            for i, v in enumerate(s.per_position_rate):
                row[f"pos{i}_acceptance"] = v
            for p in sr.predictions:
                if p.method == s.method and p.k == s.k:
                    row[f"predicted_speedup_b{p.batch}"] = p.predicted_speedup
            rows.append(row)
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path | IO[str]) -> None:
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    f = open(out, "w", newline="", encoding="utf-8") if isinstance(out, Path) else out
    try:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    finally:
        if isinstance(out, Path):
            f.close()
