"""Fit the step-cost law from bench output directories (``fit_profile``): a pipeline of named stages.

1. ``_load_runs``: the runs (a sweep directory stands for its finished cells) and the replay of the
   workload they sent;
2. ``_collect_rows``: each run's regression rows (``observe``: one per request's decode window, one
   per TTFT on an idle server), its requests' replayed traces checked against its live counts
   (``fit_traces``);
3. ``_columns``: the law's parameters the runs can tell apart, and what they cannot;
4. ``_fit_shapes``: the law is linear in its parameters, so each verification shape is one
   non-negative least-squares problem (``lsq``), rows unweighted in seconds (a decode window's error is
   mostly the jitter of its two end timestamps, the same for a long window as for a short one); one
   robust pass drops rows far off the first fit (a request hit by a stall on a shared machine); the
   GPU terms (``fit_knee``) tried on each;
5. ``_choose_shape``: both shapes compared on the rows both kept, the smaller residual wins;
6. ``_final_fit``: the chosen shape's law (with its GPU terms when they earned their place);
7. ``_bootstrap``: refits on requests resampled within each run, kept in the profile as the uncertainty;
8. ``_profile``: residuals, the measured range, notes and provenance (``fit_summary``).

The typed intermediates (``Calibration``, ``ShapeFit``, ``FinalFit``) carry what one stage hands the next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import specgauge.predict.fit_summary as fit_summary
from specgauge.i18n import en
from specgauge.predict.fit_knee import Extension, extend
from specgauge.predict.fit_traces import best_traces
from specgauge.predict.law import CORE, SHAPES, drafter_params, is_model_method, method_kind
from specgauge.predict.lsq import ELL, design, resample, robust_fit, run_groups, solve, trim_rows
from specgauge.predict.rows import Rows, build_rows
from specgauge.predict.runs import RunData, load_run
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellSpec, ProfileError


@dataclass
class Calibration:
    """What the fit works on, filled by ``_load_runs`` → ``_collect_rows`` → ``_columns``."""

    runs: list[RunData]
    replay: Any  #: the workload's ``WorkloadReplay`` (None: nothing to check the live counts against)
    notes: list[str]
    rows: list[Rows] = field(default_factory=list)  #: runs with at least one usable request
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  #: run -> replay check
    names: list[str] = field(default_factory=list)  #: the straight line's parameters, ``ell`` last
    ks_of: dict[str, list[int]] = field(default_factory=dict)  #: method -> the k it was measured at
    concs: list[int] = field(default_factory=list)


@dataclass
class ShapeFit:
    """The straight line under one verification shape, and the GPU terms tried on it."""

    X: np.ndarray
    y: np.ndarray
    w: np.ndarray
    steps: np.ndarray
    coef: np.ndarray
    keep: np.ndarray  #: rows its robust pass kept
    ssr: float = 0.0  #: on the rows every shape kept
    ssr_ext: float = 0.0  #: the same with its GPU terms, where they earned their parameters
    ext: Extension | None = None


@dataclass
class FinalFit:
    """The chosen shape's law: parameters, the rows it kept, its prediction per row, its bootstrap refit."""

    shape: str
    confidence: float | None  #: share of resamples in which the chosen shape fits better (None: not resampled)
    names: list[str]
    coef: np.ndarray
    params: dict[str, float]
    keep: np.ndarray
    pred: np.ndarray
    refit: Callable[[np.ndarray], np.ndarray]


def _workload_of(runs: Sequence[RunData], dirs: Sequence[Path]) -> list[Path] | None:
    from specgauge.paths import resolve_portable

    for rd, d in zip(runs, dirs, strict=True):
        wl = [resolve_portable(str(p), d) for p in (rd.run.get("config") or {}).get("workload") or []]
        if wl and all(p.is_file() for p in wl):
            return wl
    return None


def expand_run_dirs(paths: Sequence[Path]) -> tuple[list[Path], dict[str, CellSpec]]:
    """Bench output directories, with a sweep directory (``sweep.json``) standing for its finished cells and a
    bench run over a list of concurrencies for its ``c1``, ``c4``, … sub-directories."""
    dirs: list[Path] = []
    cells: dict[str, CellSpec] = {}
    for p in map(Path, paths):
        manifest = p / "sweep.json"
        if manifest.is_file() and not (p / "results.jsonl").exists():
            try:
                m = json.loads(manifest.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ProfileError(f"{manifest}: not JSON ({e})") from None
            for c in m.get("cells", []):
                if c.get("status") == "done":
                    d = p / c["dir"]
                    dirs.append(d)
                    cells[str(d)] = CellSpec(label=c["label"], speculative_config=c.get("speculative_config"),
                                             concurrency=int(c["concurrency"]))
        elif not (p / "results.jsonl").exists() and (per_c := _concurrency_dirs(p)):
            dirs += per_c  # bench --max-concurrency 1,4: one sub-directory per value
        else:
            dirs.append(p)
    return dirs, cells


def _concurrency_dirs(p: Path) -> list[Path]:
    """``c1``, ``c4``, … of a bench run over a list of concurrencies, in concurrency order."""
    found = [d for d in p.glob("c*") if re.fullmatch(r"c\d+", d.name) and (d / "results.jsonl").is_file()]
    return sorted(found, key=lambda d: int(d.name[1:]))


def fit_profile(
    run_dirs: Sequence[Path],
    *,
    cells: Mapping[str, CellSpec] | None = None,
    workload: Sequence[Path] | None = None,
    tokenizer: Any = None,
    shape: str = "auto",
    bootstrap: int = 200,
    seed: int = 0,
    trim: float = 5.0,
    sampled_ids: Set[str] | None = None,
    gpu_terms: bool = True,
    replay: Any = None,
) -> StepCostProfile:
    """Fit the step-cost law of the server the runs measured.

    ``run_dirs``: bench output directories, each a closed-loop run of one server config at one
    concurrency (described by its ``cell.json``, or ``cells[dir name]``), or sweep directories
    (their finished cells). ``workload``: the workload the
    runs sent, with logged outputs, for the replay check and exact per-step drafts (default: the one
    named in run.json, when it exists here). ``shape``: ``auto`` (fit both, keep the better),
    ``flattened`` or ``padded``. ``sampled_ids``: the request ids sent at T > 0 (default: the workload's).
    ``gpu_terms``: try the knee and the overlapping host proposer (``fit_knee``; kept only when the rows
    ask for them); False: the straight line only. ``replay``: a ``WorkloadReplay`` of ``workload`` to
    share, planned for the runs' largest number of requests (default: one is made here).
    """
    cal = _load_runs(run_dirs, cells, workload, tokenizer, shape, replay)
    _collect_rows(cal, sampled_ids)
    _columns(cal)
    fits, both = _fit_shapes(cal, shape, trim, gpu_terms)
    chosen, confidence = _choose_shape(cal, fits, both, shape, bootstrap, seed)
    final = _final_fit(cal, fits[chosen], chosen, confidence, trim)
    return _profile(cal, fits, final, _bootstrap(cal.rows, final, bootstrap, seed))


def _load_runs(run_dirs: Sequence[Path], cells: Mapping[str, CellSpec] | None, workload: Sequence[Path] | None,
               tokenizer: Any, shape: str, replay: Any) -> Calibration:
    """Stage 1: the runs, and the replay of the workload they sent (given, or made here)."""
    if not run_dirs:
        raise ProfileError("no calibration runs given")
    if shape not in ("auto", *SHAPES):
        raise ProfileError(f"shape {shape!r}: expected auto, flattened or padded")
    dirs, from_sweeps = expand_run_dirs(run_dirs)
    if not dirs:
        raise ProfileError(f"no finished bench run in {', '.join(map(str, run_dirs))}")
    runs = [load_run(d, (cells or {}).get(d.name) or from_sweeps.get(str(d))) for d in dirs]
    notes: list[str] = []
    wl = list(workload) if workload else _workload_of(runs, dirs)
    if replay is None and wl is not None:
        from specgauge.predict.replay import WorkloadReplay

        n = max(int((rd.run.get("config") or {}).get("num_prompts") or 0) for rd in runs) or None
        try:
            replay = WorkloadReplay(wl, tokenizer, n)
        except ProfileError as e:
            notes.append(en("predict.n.no_replay", error=e))
    elif replay is None:
        notes.append(en("predict.n.no_workload"))
    return Calibration(runs, replay, notes)


def _collect_rows(cal: Calibration, sampled_ids: Set[str] | None) -> None:
    """Stage 2: each run's rows, its requests' replayed traces and their check (runs without a usable
    request give none, and a note)."""
    replay = cal.replay
    for rd in cal.runs:
        traces = None
        rates = synthetic_rates(rd.cell.speculative_config)
        if rates:  # the server drew its acceptance: the steps come from its own per-step counts, not the replay
            cal.checks[rd.name] = {"synthetic_acceptance_rates": rates}
        elif replay is not None and rd.method is not None:
            traces, cal.checks[rd.name] = best_traces(replay, rd, cal.runs)
        sampled = sampled_ids if sampled_ids is not None else replay.sampled_ids() if replay is not None else frozenset()
        rows, _ = build_rows(rd, traces, sampled,
                             replay.live(rd.cell.speculative_config) if replay is not None and not rates else None)
        cal.notes += _row_notes(rd.name, rows)
        if rows.y:
            cal.rows.append(rows)
    if not cal.rows:
        raise ProfileError("no calibration run had a request usable for the fit: " + "; ".join(cal.notes))


def synthetic_rates(spec: dict[str, Any] | None) -> list[float]:
    """The per-position unconditional acceptance rates of a synthetic config ([] for any other)."""
    from specgauge.config import resolve_spec

    cfg = resolve_spec(spec)[2]
    return cfg.synthetic_rates() if cfg is not None else []


def _row_notes(name: str, rows: Rows) -> list[str]:
    if not rows.y:
        return [en("predict.n.no_rows", name=name, why=", ".join(f"{k}: {v}" for k, v in rows.skipped.items()) or en("predict.n.empty"))]
    notes = []
    if rows.skipped:
        notes.append(en("predict.n.left_out", name=name, n=sum(rows.skipped.values()),
                        why=", ".join(f"{k} ({v})" for k, v in rows.skipped.items())))
    notes += [en("predict.n.of_run", name=name, text=n) for n in rows.notes]
    if rows.drafted_source.get("request mean"):
        notes.append(en("predict.n.mean_drafts", name=name, n=rows.drafted_source["request mean"]))
    return notes


def _columns(cal: Calibration) -> None:
    """Stage 3: the straight line's parameters (``drafter_params`` per method measured), and notes on
    what the runs cannot tell apart."""
    runs, notes = cal.runs, cal.notes
    methods = sorted({rd.method for rd in runs if rd.method is not None})
    ks_of = cal.ks_of = {m: sorted({rd.k for rd in runs if rd.method == m}) for m in methods}
    names = cal.names = [*CORE, *(p for m in methods for p in drafter_params(m, ks_of[m])), ELL]
    for m in methods:
        if is_model_method(m) and f"draft_fixed[{method_kind(m)}]" not in names:  # drafter_params' rule
            notes.append(en("predict.n.one_k", method=m, k=ks_of[m][0], k2=2 * ks_of[m][0]))
    n_ttft = sum(k == "ttft" for r in cal.rows for k in r.kind)
    if n_ttft == 0:
        notes.append(en("predict.n.no_idle"))
    concs = cal.concs = sorted({rd.cell.concurrency for rd in runs})
    if all(c == concs[0] for c in concs):
        notes.append(en("predict.n.one_conc", c=concs[0]))


def _fit_shapes(cal: Calibration, shape: str, trim: float, gpu_terms: bool) -> tuple[dict[str, ShapeFit], np.ndarray]:
    """Stage 4: the straight line per verification shape (robust NNLS), its residual on the rows every
    shape kept (returned: that mask), and the GPU terms per shape — on a curve with a knee the straight
    line of the wrong shape can mimic it (padded puts B·(1+k) tokens through every drafting step), so
    the shapes are compared with them."""
    fits: dict[str, ShapeFit] = {}
    for sh in SHAPES if shape == "auto" else (shape,):
        X, y, w, st = design(cal.rows, sh, cal.names)
        coef, keep = robust_fit(X, y, w, trim)
        fits[sh] = ShapeFit(X=X, y=y, w=w, steps=st, coef=coef, keep=keep)
    both = np.logical_and.reduce([f.keep for f in fits.values()])
    for f in fits.values():
        r = (f.y - f.X @ f.coef) * f.w
        f.ssr = float((r[both] ** 2).sum())
    if gpu_terms:
        for s, f in fits.items():
            f.ext = extend(cal.rows, s, cal.names, f.coef, solve, f.keep)
    for f in fits.values():
        pred = f.ext.predict(f.ext.coef) if f.ext is not None else f.X @ f.coef
        f.ssr_ext = float((((f.y - pred) * f.w)[both] ** 2).sum())
    return fits, both


def _choose_shape(cal: Calibration, fits: dict[str, ShapeFit], both: np.ndarray, shape: str, bootstrap: int,
                  seed: int) -> tuple[str, float | None]:
    """Stage 5: the verification shape, and how often resamples agree (None: not resampled)."""
    notes = cal.notes
    chosen = min(fits, key=lambda s: fits[s].ssr)
    confidence = None
    by_ext = min(fits, key=lambda s: fits[s].ssr_ext)
    compared = shape == "auto" and len(fits) == 2
    if fits[by_ext].ext is not None:  # the best fit has a knee / overlapping host: shapes judged with them
        chosen = by_ext
        if compared:
            res_txt = ", ".join(f"{s} {fits[s].ssr_ext:.3g}" for s in fits)
            notes.append(en("predict.n.shape_ext", shape=chosen, res=res_txt))
    elif compared:
        a, b = fits["flattened"].ssr, fits["padded"].ssr
        if abs(a - b) <= 1e-9 * max(a, b, 1e-30):
            chosen = "flattened"
            notes.append(en("predict.n.shape_same"))
        else:
            confidence = _shape_confidence(fits, chosen, both, cal.rows, max(bootstrap, 50), seed)
            if confidence < 0.9 and chosen != "flattened":
                notes.append(en("predict.n.padded_weak", conf=f"{confidence:.0%}"))
                chosen = "flattened"
            elif confidence < 0.9:
                notes.append(en("predict.n.flat_weak", conf=f"{confidence:.0%}"))
    return chosen, confidence


def _shape_confidence(fits: dict[str, ShapeFit], chosen: str, keep: np.ndarray, rows: Sequence[Rows],
                      resamples: int, seed: int) -> float:
    """Share of request resamples (within each run) in which ``chosen`` fits with the smaller residual."""
    rng = np.random.default_rng(seed + 1)
    groups = run_groups(rows, keep)
    other = next(s for s in fits if s != chosen)
    wins = 0
    for _ in range(resamples):
        idx = resample(rng, groups)
        ssr = {}
        for s in (chosen, other):
            f = fits[s]
            c = solve(f.X[idx], f.y[idx], f.w[idx])
            ssr[s] = float((((f.y[idx] - f.X[idx] @ c) * f.w[idx]) ** 2).sum())
        wins += ssr[chosen] <= ssr[other]
    return wins / resamples


def _final_fit(cal: Calibration, f: ShapeFit, shape: str, confidence: float | None, trim: float) -> FinalFit:
    """Stage 6: the chosen shape's law. The shape was chosen on the rows the straight line kept; the
    extended law's own robust pass takes back the rows past a knee that the straight line could not fit."""
    names, coef, keep = cal.names, f.coef, f.keep
    params = {n: float(v) for n, v in zip(names, coef, strict=True)}
    refit: Callable[[np.ndarray], np.ndarray] = lambda idx: solve(f.X[idx], f.y[idx], f.w[idx])  # noqa: E731
    pred = f.X @ coef
    ext = f.ext
    if ext is not None:  # the GPU regime's knee / overlapping host proposer earned their parameters
        names, coef, refit = ext.names, ext.coef, ext.refit
        pred = ext.predict(coef)
        keep = trim_rows(f.y - pred, trim, len(coef))
        if not keep.all():
            coef = refit(np.flatnonzero(keep))
            ext.coef = coef
            pred = ext.predict(coef)
        params = ext.params()
        cal.notes += ext.notes
    return FinalFit(shape=shape, confidence=confidence, names=names, coef=coef, params=params, keep=keep, pred=pred,
                    refit=refit)


def _bootstrap(rows: Sequence[Rows], final: FinalFit, bootstrap: int, seed: int) -> list[list[float]]:
    """Stage 7: the law refitted on requests resampled within each run (its kept rows)."""
    boot: list[list[float]] = []
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        groups = run_groups(rows, final.keep)
        for _ in range(bootstrap):
            boot.append([float(v) for v in final.refit(resample(rng, groups))])
    return boot


def _profile(cal: Calibration, fits: dict[str, ShapeFit], final: FinalFit, boot: list[list[float]]) -> StepCostProfile:
    """Stage 8: the profile — residuals, the measured range, the other shape's fit, notes, provenance."""
    f = fits[final.shape]
    residuals = fit_summary.residuals(cal.rows, final.pred, f.y, f.steps, final.keep)
    residuals["shapes"] = {s: round(fits[s].ssr, 12) for s in fits}
    if final.confidence is not None:
        residuals["shape_confidence"] = round(final.confidence, 3)  #: share of resamples in which the chosen shape fits better
    alternatives = {s: {"params": {n: float(v) for n, v in zip(cal.names, fits[s].coef, strict=True)},
                        "weighted_ssr": fits[s].ssr} for s in fits if s != final.shape}
    cal.notes += fit_summary.acceptance_notes(cal.runs, cal.checks)
    refused = fit_summary.refused_requests(cal.runs)
    if refused:
        cal.notes.append(en("predict.n.refused_cal", n=len(refused["ids"]), why=refused["why"]))
    measured = fit_summary.measured_range(cal.rows, final.shape, cal.concs, cal.ks_of)
    measured.hidden_host_bound = fit_summary.hidden_host_bound(cal.rows, final.shape, final.names, final.params)
    prov = fit_summary.provenance(cal.runs, cal.checks, refused)
    return StepCostProfile(params=final.params, shape=final.shape, alternatives=alternatives, param_names=final.names,
                           bootstrap=boot, residuals=residuals, measured=measured, replay_checks=cal.checks,
                           provenance=prov, notes=cal.notes)
