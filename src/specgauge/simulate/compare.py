"""Two simulate results side by side: acceptance and predicted speedup per (segment, method, k).

Simulate JSON carries aggregates only (no per-request rows), so there is no interval here; the verdict
on such a pair (``stats.verdict.decide_simulations``) is always INCONCLUSIVE."""

from __future__ import annotations

from specgauge.simulate.run import SegmentResult, SimulateResult
from specgauge.stats.compare import SimulationDelta


def compare_simulations(baseline: SimulateResult, candidate: SimulateResult) -> list[SimulationDelta]:
    """Rows for every (segment, method, k) present in both results ("overall" first)."""
    out: list[SimulationDelta] = []
    groups = [("overall", baseline.overall, candidate.overall)]
    groups += [(s, baseline.segments[s], candidate.segments[s]) for s in baseline.segments if s in candidate.segments]
    batch = next((b for b in baseline.batch_sizes if b in candidate.batch_sizes), None)
    for name, sb, sc in groups:
        cmap = {(x.method, x.k): x for x in sc.summaries}
        for xb in sb.summaries:
            xc = cmap.get((xb.method, xb.k))
            if xc is None:
                continue

            def pred(seg: SegmentResult, m: str = xb.method, k: int = xb.k) -> float | None:
                return next((p.predicted_speedup for p in seg.predictions if p.method == m and p.k == k and p.batch == batch), None)

            out.append(SimulationDelta(
                segment=name, method=xb.method, k=xb.k,
                baseline_acceptance_rate=xb.acceptance_rate, candidate_acceptance_rate=xc.acceptance_rate,
                baseline_mal=xb.mean_acceptance_length, candidate_mal=xc.mean_acceptance_length, batch=batch,
                baseline_predicted_speedup=pred(sb), candidate_predicted_speedup=pred(sc),
            ))
    return out
