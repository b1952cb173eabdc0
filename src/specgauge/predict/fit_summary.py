"""What a fit of the step-cost law says about itself (``fit``'s last stage): residuals per row and
run, the range the calibration measured, notes on runs whose acceptance the replay did not reproduce,
requests that failed everywhere, and provenance — no machine paths.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgauge import __version__
from specgauge.i18n import en
from specgauge.predict.law import KNEE, StepTable, is_model_method, method_kind, param_vector, step_durations
from specgauge.predict.rows import Rows
from specgauge.predict.runs import RunData
from specgauge.predict.profile import HostBound, MeasuredRange


def measured_range(rows: Sequence[Rows], shape: str, concs: list[int], ks_of: dict[str, list[int]]) -> MeasuredRange:
    tables = [t for r in rows for k, t in zip(r.kind, r.tables, strict=True) if k == "decode"]
    allt = StepTable.concat(tables) if tables else None
    some = allt is not None and len(allt) > 0
    return MeasuredRange(
        max_tokens_per_forward=float(allt.n_forward(shape).max()) if some else 0.0,
        max_forward_tokens=float((allt.n_forward(shape) + allt.prefill_tokens).max()) if some else 0.0,
        max_batch=float(allt.batch.max()) if some else 0.0,
        concurrencies=concs,
        methods=ks_of,
    )


def hidden_host_bound(rows: Sequence[Rows], shape: str, names: Sequence[str], params: Mapping[str, float]) -> dict[str, HostBound]:
    """Per model-free method whose overlapping host proposer the fit did not find (no ``host_par[m]``):
    the largest cost per request per step that stays hidden in every calibrated decode step of it —
    min over those steps of (the law's step time) / (batch). Larger and some step would have shown it
    (``law``: ``T = max(L, host_par · B + host_par0)``; the worst case at a larger batch has host_par0 = 0)."""
    theta = param_vector(dict(params), list(names))
    knee = params.get(KNEE)
    per: dict[str, float] = {}
    top: dict[str, float] = {}
    for r in rows:
        for kind, tab in zip(r.kind, r.tables, strict=True):
            m = method_kind(tab.method)
            if kind != "decode" or m is None or is_model_method(m) or f"host_par[{m}]" in params or not len(tab):
                continue
            busy = tab.batch > 0
            if not busy.any():
                continue
            dur = step_durations(tab, shape, list(names), theta, knee)
            per[m] = min(per.get(m, float("inf")), float((dur[busy] / tab.batch[busy]).min()))
            top[m] = max(top.get(m, 0.0), float(tab.batch.max()))
    return {m: HostBound(per_request=h, max_batch=top[m]) for m, h in per.items()}


def acceptance_notes(runs: Sequence[RunData], checks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A note per run whose live acceptance differs from its replay by more than 2 points, and why."""
    notes = []
    for rd in runs:
        chk = checks.get(rd.name, {})
        gap = chk.get("gap")
        if gap is None or abs(gap) <= 0.02:
            continue
        parts = [en("predict.n.acc_differs", name=rd.name, live=f"{chk['live_acceptance']:.1%}", rep=f"{chk['replayed_acceptance']:.1%}")]
        if chk.get("sampled_requests"):
            parts.append(en("predict.n.acc_sampled", k=chk["sampled_requests"], n=chk["requests"]))
        if chk.get("greedy_differ"):
            parts.append(en("predict.n.acc_greedy", k=chk["greedy_differ"]))
        notes.append("; ".join(parts))  # the clauses of one note (catalogue "notes.list")
    return notes


def provenance(runs: Sequence[RunData], checks: Mapping[str, Mapping[str, Any]], refused: dict[str, Any] | None) -> dict[str, Any]:
    server = runs[0].run.get("server") or {}
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "specgauge_version": __version__,
        "server": {k: v for k, v in server.items() if k not in ("base_url",)},
        "dialect": runs[0].run.get("dialect"),
        "model": server.get("model"),
        "runs": [{"run": rd.name, "label": rd.cell.label, "speculative_config": _sanitize(rd.cell.speculative_config),
                  "concurrency": rd.cell.concurrency, "requests": len(rd.records)} for rd in runs],
        "max_batch": next((rd.max_batch for rd in runs if rd.max_batch), None),
        #: the server repeated its sampled (T > 0) outputs across runs: a stateful drafter's cache then
        #: holds them (decided by which replay reproduced the calibration runs)
        "sampled_outputs_repeat": any(c.get("sampled_outputs_repeat") for c in checks.values()),
        #: requests the server failed every time it got them (e.g. tool calls a server without a tool parser
        #: refuses with HTTP 400): predictions leave them out, as compare's pairing does
        "refused_requests": refused,
    }


def _sanitize(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """A config fit for a results file: a draft model's directory by its name only."""
    if not spec:
        return spec
    out = dict(spec)
    if isinstance(out.get("model"), str) and ("/" in out["model"] or "\\" in out["model"]):
        out["model"] = Path(out["model"]).name
    return out


def refused_requests(runs: Sequence[RunData]) -> dict[str, Any] | None:
    """Ids that failed in every run that sent them, and the commonest reason (``None``: there are none)."""
    sent: Counter[str] = Counter()
    failed: dict[str, list[str]] = {}
    for rd in runs:
        for rec in rd.records:
            sent[rec.id] += 1
            if not rec.ok:
                failed.setdefault(rec.id, []).append(
                    f"HTTP {rec.http_status}" if rec.http_status else (rec.failure.value if rec.failure else "failed"))
    ids = sorted(i for i, w in failed.items() if len(w) == sent[i])
    if not ids:
        return None
    why = Counter(w for i in ids for w in failed[i]).most_common(1)[0][0]
    return {"ids": ids, "why": why}


def residuals(rows: Sequence[Rows], pred: np.ndarray, y: np.ndarray, steps: np.ndarray,
               keep: np.ndarray) -> dict[str, Any]:
    kinds = np.asarray([k for r in rows for k in r.kind])
    dec = (kinds == "decode") & keep
    out: dict[str, Any] = {"rows": len(y), "rows_dropped_as_outliers": int((~keep).sum()),
                           "ttft_rows": int((kinds == "ttft").sum())}
    if dec.any():
        err = (y[dec] - pred[dec]) / steps[dec]
        mean_step = float(np.mean(y[dec] / steps[dec]))
        rmse = float(np.sqrt(np.mean(err**2)))
        out.update(step_rmse_ms=round(rmse * 1e3, 4), mean_step_ms=round(mean_step * 1e3, 4),
                   relative_rmse=round(rmse / mean_step, 4) if mean_step > 0 else None)
    per: dict[str, Any] = {}
    i = 0
    for r in rows:
        n = len(r.y)
        sl = slice(i, i + n)
        m = dec[sl]
        if m.any():
            measured = float(y[sl][m].sum())  # 0 when every kept row's chunks arrived in one burst
            per[r.run] = {"decode_time_predicted_over_measured": round(float(pred[sl][m].sum()) / measured, 4) if measured > 0 else None,
                          "rows": int(m.sum())}
        i += n
    out["per_run"] = per
    return out
