"""Measured figures of a sweep: every finished cell against the baseline at the same concurrency.

Per cell (from its bench directory): output throughput, TTFT / TPOT / E2E p50 and p95, failure rate,
acceptance from the server's own counters (``summary.json``; the per-request counts when there are
no counters). Against the baseline cell at the same concurrency, with
``specgauge.stats.compare.compare_records`` (pairs by request id — every cell sent the same requests):
the speedup estimate and its 95 % bootstrap CI, overall and per segment, the E2E p95 delta, and output
equivalence over the greedy (temperature-0) pairs.

Across cells: the throughput / p95-latency Pareto front, and per configuration the crossover
concurrency where its speedup falls below the threshold (see ``Crossover``). With predictions
(``specgauge.predict``), each cell also carries the predicted figures and the error of the predicted
speedup against the measured one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.errors import UserError
from specgauge.paths import resolve_portable
from specgauge.predict.types import CellPrediction
from specgauge.records import RequestRecord, ResultsFile
from specgauge.stats.compare import CompareConfig, compare_records
from specgauge.stats.equivalence import greedy_equivalence
from specgauge.stats.latency import tpot
from specgauge.sweep.grid import method_and_k
from specgauge.sweep.models import (
    CellResult,
    CellRun,
    Crossover,
    ParetoPoint,
    PredictionInfo,
    SegmentSpeedup,
    SweepAnalysis,
    SweepManifest,
)

_CYCLE = re.compile(r"~r\d+$")  #: bench suffixes repeated requests' ids with ~rN


# ---------------------------------------------------------------------------- one cell


def _pct(vals: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(vals, float), q)) if len(vals) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _load_cell(out_dir: Path, rec: CellRun) -> tuple[list[RequestRecord], dict[str, Any]]:
    cdir = out_dir / rec.dir
    try:
        records = ResultsFile(cdir / "results.jsonl").existing()
        summary = json.loads((cdir / "summary.json").read_text(encoding="utf-8")) if (cdir / "summary.json").exists() else {}
    except (OSError, ValueError) as e:
        raise UserError(f"{rec.dir}: cannot read the cell's results: {e}") from None
    return records, summary


def measure(rec: CellRun, records: Sequence[RequestRecord], summary: dict[str, Any]) -> CellResult:
    """The figures of one cell that need no baseline."""
    method, k = method_and_k(rec.speculative_config)
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_s * 1000 for r in ok if r.ttft_s is not None]
    e2e = [r.e2e_s * 1000 for r in ok if r.e2e_s is not None]
    tp = [t * 1000 for r in ok if (t := tpot(r)) is not None]
    c = CellResult(
        label=rec.label, method=method, k=k, concurrency=rec.concurrency, status=rec.status,
        speculative_config=rec.speculative_config, requests=len(records), completed=len(ok), failed=len(records) - len(ok),
        failure_rate=(len(records) - len(ok)) / len(records) if records else None,
        duration_s=_num(summary.get("duration")), throughput_tok_s=_num(summary.get("output_throughput")),
        request_throughput=_num(summary.get("request_throughput")),
        ttft_p50_ms=_pct(ttft, 50), ttft_p95_ms=_pct(ttft, 95), tpot_p50_ms=_pct(tp, 50), tpot_p95_ms=_pct(tp, 95),
        e2e_p50_ms=_pct(e2e, 50), e2e_p95_ms=_pct(e2e, 95),
    )
    if c.throughput_tok_s is None and ok:  # no summary: from the records' own span
        t0 = min(r.started_at for r in records)
        dur = max(r.started_at + r.elapsed_s for r in records) - t0
        c.throughput_tok_s = sum(r.output_tokens or 0 for r in ok) / dur if dur > 0 else None
    acc = ((summary.get("specgauge") or {}).get("acceptance") or {})
    for key in ("counters", "per_request_total"):
        src = acc.get(key) or {}
        if src.get("available") and src.get("draft_tokens"):
            c.acceptance_rate = _num(src.get("acceptance_rate"))
            c.mean_acceptance_length = _num(src.get("mean_acceptance_length"))
            c.acceptance_source = src.get("source") or key
            break
    else:
        from specgauge.stats.compare import AcceptanceStats

        a = AcceptanceStats.of(records)
        if a.available and a.draft_tokens:
            c.acceptance_rate, c.mean_acceptance_length, c.acceptance_source = a.acceptance_rate, a.mean_acceptance_length, a.source
    if method is not None and c.acceptance_rate is None and ok:
        c.notes.append("the server reported no speculative counts for this cell")
    return c


def against_baseline(c: CellResult, base: Sequence[RequestRecord], cand: Sequence[RequestRecord],
                     durations: tuple[float | None, float | None], temperatures: dict[str, float | None] | None,
                     cfg: CompareConfig) -> None:
    """Speedup (overall and per segment), E2E p95 delta and greedy equivalence against the baseline."""
    overall, per_seg = compare_records(base, cand, cfg, durations)
    c.speedup = overall.speedup
    c.throughput_ratio = overall.measured_throughput_ratio
    m = overall.metric("e2e_p95")
    c.e2e_p95_delta_ms = m.delta_ms if m is not None else None
    c.segments = [SegmentSpeedup(segment=name, pairs=g.pairs, speedup=g.speedup) for name, g in per_seg.items()]
    c.notes += overall.notes
    if temperatures is None:
        return
    bmap = {r.id: r for r in base if r.ok}
    greedy = [(bmap[r.id], r) for r in cand if r.ok and r.id in bmap and temperatures.get(_CYCLE.sub("", r.id)) == 0]
    if greedy:
        eq = greedy_equivalence(greedy)
        c.greedy_pairs, c.greedy_matches, c.greedy_match_rate = eq.pairs, eq.matches, eq.match_rate
        if eq.matches < eq.pairs:
            c.notes.append(f"{eq.pairs - eq.matches} of {eq.pairs} greedy outputs differ from the baseline's "
                           "(speculation must not change a temperature-0 output)")


# ---------------------------------------------------------------------------- across cells


def pareto_front(cells: Sequence[CellResult]) -> list[ParetoPoint]:
    """Cells no other cell beats on both output throughput (higher) and E2E p95 (lower)."""
    pts = [c for c in cells if c.throughput_tok_s is not None and c.e2e_p95_ms is not None]
    front = []
    for c in pts:
        dominated = any(
            o is not c and o.throughput_tok_s >= c.throughput_tok_s and o.e2e_p95_ms <= c.e2e_p95_ms  # type: ignore[operator]
            and (o.throughput_tok_s > c.throughput_tok_s or o.e2e_p95_ms < c.e2e_p95_ms)  # type: ignore[operator]
            for o in pts
        )
        if not dominated:
            front.append(ParetoPoint(label=c.label, concurrency=c.concurrency, throughput_tok_s=c.throughput_tok_s,  # type: ignore[arg-type]
                                     e2e_p95_ms=c.e2e_p95_ms))  # type: ignore[arg-type]
    return sorted(front, key=lambda p: p.throughput_tok_s)


def _fmt_c(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.05 else f"{x:.1f}"


def crossover(label: str, points: Sequence[tuple[int, float, float | None, float | None]], threshold: float) -> Crossover:
    """``points``: (concurrency, speedup estimate, CI low, CI high), any order. See ``Crossover``."""
    pts = sorted(p for p in points if math.isfinite(p[1]))
    if not pts:
        return Crossover(label=label, threshold=threshold, status="no_data",
                         text=f"{label}: no measured speedup (no finished cell with a baseline at the same concurrency)")
    cs = [p[0] for p in pts]
    pays = [p[1] >= threshold for p in pts]
    up_to = None
    for c, _, lo, _ in pts:
        if lo is None or lo <= threshold:
            break
        up_to = c
    stops_by = next((c for c, _, _, hi in pts if hi is not None and hi < threshold), None)
    cx: float | None = None
    between: list[int] | None = None
    for i in range(len(pts) - 1):
        (c0, e0, _, _), (c1, e1, _, _) = pts[i], pts[i + 1]
        if (e0 >= threshold) != (e1 >= threshold):
            f = (e0 - threshold) / (e0 - e1)
            cx = 2 ** (math.log2(c0) + f * (math.log2(c1) - math.log2(c0)))
            between = [c0, c1]
            break
    t = f"{threshold:g}×"
    span = f"{cs[0]}–{cs[-1]}" if len(cs) > 1 else f"{cs[0]}"
    changes = sum(pays[i] != pays[i + 1] for i in range(len(pays) - 1))
    if all(pays):
        status, text = "pays_throughout", f"{label}: speedup ≥ {t} at every measured concurrency ({span})"
    elif not any(pays):
        status, text = "never_pays", f"{label}: speedup below {t} at every measured concurrency ({span})"
    elif changes == 1 and pays[0]:
        assert cx is not None and between is not None
        status = "stops_paying"
        text = f"{label}: stops paying at concurrency ≈ {_fmt_c(cx)} (its speedup crosses {t} between {between[0]} and {between[1]})"
    elif changes == 1:
        assert cx is not None and between is not None
        status = "starts_paying"
        text = f"{label}: below {t} at low concurrency, above it from ≈ {_fmt_c(cx)} (between {between[0]} and {between[1]})"
    else:
        assert between is not None
        status = "mixed"
        text = f"{label}: speedup crosses {t} more than once (first between {between[0]} and {between[1]}); the estimates are noisy"
    if up_to is not None:
        text += f"; the 95 % CI clears {t} up to concurrency {up_to}"
    if stops_by is not None:
        text += f"; the CI lies below {t} from concurrency {stops_by}"
    return Crossover(label=label, threshold=threshold, status=status, concurrency=cx, between=between,
                     clearly_pays_up_to=up_to, clearly_stops_by=stops_by, text=text)


def _temperatures(m: SweepManifest, out_dir: Path) -> tuple[dict[str, float | None] | None, str | None]:
    from specgauge.workload.loaders import LoadOptions, load_workload

    paths = [resolve_portable(p, out_dir) for p in m.settings.workload]
    missing = [p for p in paths if not p.exists()]
    if missing:
        return None, f"workload {missing[0]} not found: temperatures unknown, greedy output equivalence not checked"
    try:
        items = load_workload(paths, LoadOptions(skip_invalid=True))
    except UserError as e:
        return None, f"workload not readable ({e}): greedy output equivalence not checked"
    return {it.request.id: it.request.temperature for it in items}, None


def attach_predictions(analysis: SweepAnalysis, predictions: Sequence[CellPrediction]) -> None:
    """Predicted beside measured: each cell's prediction and the error of its predicted speedup."""
    by_key = {(p.label, p.concurrency): p for p in predictions}
    for c in analysis.cells:
        p = by_key.get(c.key)
        if p is None:
            continue
        c.predicted = p
        s = c.speedup
        if p.speedup is not None and s is not None and s.estimate:
            c.prediction_error = p.speedup / s.estimate - 1.0
            if s.low is not None and s.high is not None:
                c.prediction_in_ci = s.low <= p.speedup <= s.high


def analyze(out_dir: Path, manifest: SweepManifest, *, min_speedup: float = 1.0,
            predictions: Sequence[CellPrediction] | None = None, prediction: PredictionInfo | None = None,
            compare: CompareConfig | None = None) -> SweepAnalysis:
    """Measured figures for every finished cell, Pareto front, crossovers, predictions beside."""
    cfg = compare or CompareConfig()
    base_label = next((c.label for c in manifest.cells if c.speculative_config is None), None)
    labels = list(dict.fromkeys(c.label for c in manifest.cells))
    concs = sorted({c.concurrency for c in manifest.cells})
    a = SweepAnalysis(baseline=base_label or "", min_speedup=min_speedup, concurrencies=concs, labels=labels,
                      prediction=prediction or PredictionInfo())
    if base_label is None:
        a.notes.append("no configuration without speculation in the sweep: speedups cannot be measured")
    temps, why = _temperatures(manifest, out_dir)
    if why:
        a.notes.append(why)
    loaded: dict[tuple[str, int], tuple[list[RequestRecord], dict[str, Any]]] = {}
    for rec in manifest.cells:
        if rec.status == "done":
            loaded[rec.key] = _load_cell(out_dir, rec)
    segments: set[str] = set()
    for rec in manifest.cells:
        if rec.key not in loaded:
            method, k = method_and_k(rec.speculative_config)
            cell = CellResult(label=rec.label, method=method, k=k, concurrency=rec.concurrency, status=rec.status,
                              speculative_config=rec.speculative_config)
            why = rec.skipped_reason or rec.error
            if why:
                cell.notes.append(why)
            a.cells.append(cell)
            continue
        records, summary = loaded[rec.key]
        segments.update(r.segment for r in records)
        cell = measure(rec, records, summary)
        base = loaded.get((base_label, rec.concurrency)) if base_label else None
        if rec.label != base_label:
            if base is None:
                cell.notes.append(f"no finished baseline ({base_label}) at concurrency {rec.concurrency}: no speedup")
            else:
                against_baseline(cell, base[0], records, (_num(base[1].get("duration")), _num(summary.get("duration"))), temps, cfg)
        a.cells.append(cell)
    a.segments = sorted(segments)
    done = [c for c in a.cells if c.status == "done"]
    front = pareto_front(done)
    on = {(p.label, p.concurrency) for p in front}
    for c in a.cells:
        c.on_pareto = c.key in on
    a.pareto = front
    for label in labels:
        if label == base_label:
            continue
        pts = [(c.concurrency, c.speedup.estimate, c.speedup.low, c.speedup.high) for c in a.cells
               if c.label == label and c.speedup is not None and c.speedup.estimate is not None]
        a.crossovers.append(crossover(label, pts, min_speedup))  # type: ignore[arg-type]
    if predictions:
        attach_predictions(a, predictions)
    return a
