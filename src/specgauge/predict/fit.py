"""Fit the step-cost law from bench output directories (``fit_profile``).

Rows come from ``observe`` (one per request's decode window, one per TTFT on an idle server). The law
is linear in its parameters, so each verification shape is one non-negative least-squares problem
(``scipy.optimize.nnls``), rows unweighted in seconds: a decode window's error is mostly the jitter
of its two end timestamps, the same for a long window as for a short one. One robust pass drops rows far off the first fit (a request hit by a stall on a shared
machine), then both shapes are compared on the rows both kept and the smaller residual wins.
Uncertainty: refits on requests resampled within each run (bootstrap), kept in the profile.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from specgauge import __version__
from specgauge.predict.fit_knee import extend
from specgauge.predict.law import CORE, SHAPES, StepTable, drafter_params, is_model_method, method_kind
from specgauge.predict.observe import Rows, RunData, build_rows, load_run, replay_check
from specgauge.predict.profile import MeasuredRange, StepCostProfile
from specgauge.predict.types import CellSpec, ProfileError

ELL = "ell"


def _design(rows: Sequence[Rows], shape: str, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X (rows × names), y, weights, steps — one row per request window / idle TTFT."""
    X, y, w, st = [], [], [], []
    ell_col = names.index(ELL)
    for r in rows:
        for kind, yy, s, tab in zip(r.kind, r.y, r.steps, r.tables, strict=True):
            x = tab.features(shape, names).sum(axis=0)
            if kind == "ttft":
                x[ell_col] = 1.0
            X.append(x)
            y.append(yy)
            w.append(1.0)
            st.append(s)
    return np.asarray(X, dtype=float), np.asarray(y), np.asarray(w), np.asarray(st, dtype=float)


def solve(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted non-negative least squares with column scaling (the columns differ by 10^6)."""
    Xw = X * w[:, None]
    scale = np.linalg.norm(Xw, axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(Xw / scale, y * w, maxiter=50 * X.shape[1])
    return coef / scale


def _robust_fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, trim: float) -> tuple[np.ndarray, np.ndarray]:
    coef = solve(X, y, w)
    res = (y - X @ coef) * w
    mad = 1.4826 * float(np.median(np.abs(res - np.median(res))))
    keep = np.ones(len(y), dtype=bool)
    if mad > 0:
        keep = np.abs(res) <= trim * mad
        if keep.sum() >= max(len(coef) + 1, int(0.8 * len(y))):
            coef = solve(X[keep], y[keep], w[keep])
        else:
            keep[:] = True
    return coef, keep


def _sanitize(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """A config fit for a results file: a draft model's directory by its name only."""
    if not spec:
        return spec
    out = dict(spec)
    if isinstance(out.get("model"), str) and ("/" in out["model"] or "\\" in out["model"]):
        out["model"] = Path(out["model"]).name
    return out


def _workload_of(runs: Sequence[RunData], dirs: Sequence[Path]) -> list[Path] | None:
    from specgauge.paths import resolve_portable

    for rd, d in zip(runs, dirs, strict=True):
        wl = [resolve_portable(str(p), d) for p in (rd.run.get("config") or {}).get("workload") or []]
        if wl and all(p.is_file() for p in wl):
            return wl
    return None


def expand_run_dirs(paths: Sequence[Path]) -> tuple[list[Path], dict[str, CellSpec]]:
    """Bench output directories, with a sweep directory (``sweep.json``) standing for its finished cells."""
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
        else:
            dirs.append(p)
    return dirs, cells


def _best_traces(replay: Any, rd: RunData, runs: Sequence[RunData]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Replay traces for one run, and their check against its live counts. A stateful drafter (suffix)
    remembers what its server saw before — warm-ups, and earlier runs when one server served several
    concurrencies (as a sweep does) — so the candidates are 0..n earlier runs, with or without the
    sampled requests' earlier outputs. The winner reproduces the most requests exactly, less one request
    per request's worth of acceptance gap (requests × |live − replayed acceptance|): a candidate that
    gets one more greedy request right but misses the run's acceptance by 30 points (sampled outputs
    that did not repeat, because other drafts drew other random numbers) is the wrong server state.
    Ties (a cache that stopped learning after two runs replays the same after three) go to the count
    the runs' send times give, which is exact when one server served every run of the config."""
    from specgauge.drafters.base import is_stateful
    from specgauge.predict.replay import prior_requests

    live = _engine_order_traces(replay, rd, runs)
    if live is not None:
        return live
    cfg = rd.run.get("config") or {}
    warm = int(cfg.get("warmup") or 0)
    n = len(replay.requests)
    same = sum(1 for r in runs if r.cell.label == rd.cell.label)
    mine = _first_send(rd)
    chrono = sum(1 for r in runs if r.cell.label == rd.cell.label and _first_send(r) < mine)
    best: tuple[dict[str, Any], dict[str, Any]] | None = None
    best_key: tuple[float, int] | None = None
    for earlier in range(same if rd.method is not None and is_stateful(rd.method) else 1):
        prior = prior_requests(n, warm, earlier)
        for repeat in (False, True) if prior else (False,):
            traces = replay.by_id(rd.cell.speculative_config, prior, repeat)
            chk = replay_check(rd.records, traces)
            if earlier:
                chk["earlier_runs_on_this_server"] = earlier
            if repeat:
                chk["sampled_outputs_repeat"] = True
            key = (_trace_score(chk), -abs(earlier - chrono))
            if best_key is None or key > best_key:
                best, best_key = (traces, chk), key
    assert best is not None
    return best


def _engine_order_traces(replay: Any, rd: RunData, runs: Sequence[RunData]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Suffix runs of the embedded engine, which reports each request's place in its schedule: the cache is
    replayed from the live records (warm-ups and every run this server served before) in the engine's own
    call order (``stats.suffix_schedule``), so the server state is known, not guessed. None elsewhere."""
    if rd.method != "suffix":
        return None
    from specgauge.predict.replay import resolve_spec
    from specgauge.predict.schedule import PlannedRequest
    from specgauge.stats.record_fields import token_ids
    from specgauge.stats.replay_check import max_model_len_of_server
    from specgauge.stats.suffix_schedule import schedule_of, schedule_traces, scheduled_requests

    same = [r for r in runs if r.cell.label == rd.cell.label]
    sched, _ = scheduled_requests([x for r in same for x in r.records], [w for r in same for w in r.run.get("warmups") or []])
    if sched is None:  # not one server for all of them: this run alone
        same = [rd]
        sched, _ = scheduled_requests(rd.records, rd.run.get("warmups") or [])
    _, k, cfg = resolve_spec(rd.cell.speculative_config)
    if sched is None or cfg is None:
        return None
    opts = {n: v for n, v in cfg.model_dump().items() if n.startswith("suffix_decoding_") and v is not None}
    traces = schedule_traces(sched, opts, k, max_model_len_of_server(rd.run.get("server") or {}))
    if traces is None:
        return None
    greedy = {r.id: r.greedy for r in replay.requests}
    planned: dict[str, Any] = {}
    for rec in rd.records:
        sc, ids = schedule_of(rec.extra), token_ids(rec.extra)
        if rec.ok and sc is not None and ids is not None and sc[1] in traces:
            tr = traces[sc[1]]
            planned[rec.id] = PlannedRequest(rec.id, len(ids[0]), len(ids[1]), tr.drafted, tr.accepted, greedy.get(rec.id, True))
    chk = replay_check(rd.records, planned)
    chk["replayed_from"] = "the live outputs, in the engine's own call order"
    first = min((sc[1] for x in rd.records if (sc := schedule_of(x.extra)) is not None), default=0)
    earlier = sum(1 for r in same if r is not rd and any((sc := schedule_of(x.extra)) is not None and sc[1] < first
                                                          for x in r.records))
    if earlier:
        chk["earlier_runs_on_this_server"] = earlier
    return planned, chk


def _first_send(rd: RunData) -> float:
    return min((r.started_at for r in rd.records), default=0.0)


def _trace_score(chk: Mapping[str, Any]) -> float:
    gap = chk.get("gap")
    return float(chk["identical_requests"]) - float(chk.get("requests") or 0) * (abs(gap) if gap is not None else 0.0)


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
    if replay is not None:
        pass
    elif wl is not None:
        from specgauge.predict.replay import WorkloadReplay

        n = max(int((rd.run.get("config") or {}).get("num_prompts") or 0) for rd in runs) or None
        try:
            replay = WorkloadReplay(wl, tokenizer, n)
        except ProfileError as e:
            notes.append(f"no replay check: {e}")
    else:
        notes.append("no workload with logged outputs given: replayed acceptance not checked against the live counters")
    all_rows: list[Rows] = []
    checks: dict[str, dict[str, Any]] = {}
    for rd in runs:
        traces = None
        if replay is not None and rd.method is not None:
            traces, checks[rd.name] = _best_traces(replay, rd, runs)
        sampled = sampled_ids if sampled_ids is not None else replay.sampled_ids() if replay is not None else frozenset()
        rows, _ = build_rows(rd, traces, sampled,
                             replay.live(rd.cell.speculative_config) if replay is not None else None)
        if not rows.y:
            notes.append(f"{rd.name}: no usable request ({', '.join(f'{k}: {v}' for k, v in rows.skipped.items()) or 'empty'})")
            continue
        if rows.skipped:
            notes.append(f"{rd.name}: left out {sum(rows.skipped.values())} request(s): "
                         + ", ".join(f"{k} ({v})" for k, v in rows.skipped.items()))
        notes += [f"{rd.name}: {n}" for n in rows.notes]
        if rows.drafted_source.get("request mean"):
            notes.append(f"{rd.name}: {rows.drafted_source['request mean']} request(s) without per-step drafts: "
                         "their mean drafted tokens per step used (the padded shape's max is then approximate)")
        all_rows.append(rows)
    if not all_rows:
        raise ProfileError("no calibration run had a request usable for the fit: " + "; ".join(notes))
    methods = sorted({rd.method for rd in runs if rd.method is not None})
    ks_of = {m: sorted({rd.k for rd in runs if rd.method == m}) for m in methods}
    names = [*CORE, *(p for m in methods for p in drafter_params(m, ks_of[m])), ELL]
    for m in methods:
        if is_model_method(m) and f"draft_fixed[{method_kind(m)}]" not in names:  # drafter_params' rule
            notes.append(f"{m} measured at k = {ks_of[m][0]} only: its cost per drafting step that does not grow with k "
                         "cannot be told from its cost per draft position, so all of it is taken as per position (other "
                         f"k then predict too cheap below {ks_of[m][0]} and too dear above it); calibrate it at two k "
                         f"(--k {m}={ks_of[m][0]},{m}={2 * ks_of[m][0]})")
    n_ttft = sum(k == "ttft" for r in all_rows for k in r.kind)
    if n_ttft == 0:
        notes.append("no request found the server idle (calibrate at concurrency 1 too): HTTP round trip not measured")
    concs = sorted({rd.cell.concurrency for rd in runs})
    if all(c == concs[0] for c in concs):
        notes.append(f"every run used concurrency {concs[0]}: the batch-size terms rest on ramp-up and tail only")

    fits: dict[str, dict[str, Any]] = {}
    for sh in SHAPES if shape == "auto" else (shape,):
        X, y, w, st = _design(all_rows, sh, names)
        coef, keep = _robust_fit(X, y, w, trim)
        fits[sh] = {"coef": coef, "keep": keep, "X": X, "y": y, "w": w, "steps": st}
    both = np.logical_and.reduce([f["keep"] for f in fits.values()])
    for f in fits.values():
        r = (f["y"] - f["X"] @ f["coef"]) * f["w"]
        f["ssr"] = float((r[both] ** 2).sum())
    chosen = min(fits, key=lambda s: fits[s]["ssr"])
    confidence = None
    # the GPU terms per shape: on a curve with a knee the straight line of the wrong shape can mimic it
    # (padded puts B·(1+k) tokens through every drafting step), so the shapes are compared with them
    exts = {s: extend(all_rows, s, names, f["coef"], solve, f["keep"]) for s, f in fits.items()} if gpu_terms else {}
    for s, f in fits.items():
        e = exts.get(s)
        pred_s = e.predict(e.coef) if e is not None else f["X"] @ f["coef"]
        f["ssr_ext"] = float((((f["y"] - pred_s) * f["w"])[both] ** 2).sum())
    by_ext = min(fits, key=lambda s: fits[s]["ssr_ext"])
    if exts.get(by_ext) is not None:  # the best fit has a knee / overlapping host: shapes judged with them
        chosen = by_ext
        if shape == "auto" and len(fits) == 2:
            res_txt = ", ".join(f"{s} {fits[s]['ssr_ext']:.3g}" for s in fits)
            notes.append(f"verification shape {chosen} chosen with the knee / host-overlap terms fitted for each shape "
                         f"(residual {res_txt} s²)")
    elif shape == "auto" and len(fits) == 2:
        a, b = fits["flattened"]["ssr"], fits["padded"]["ssr"]
        if abs(a - b) <= 1e-9 * max(a, b, 1e-30):
            chosen = "flattened"
            notes.append("no run told the verification shapes apart (no step with unequal proposals): flattened assumed")
        else:
            confidence = _shape_confidence(fits, chosen, both, all_rows, max(bootstrap, 50), seed)
            if confidence < 0.9 and chosen != "flattened":
                notes.append(f"the fit prefers the padded shape in only {confidence:.0%} of resamples: not told apart from "
                             "noise, so flattened (vLLM's) is kept")
                chosen = "flattened"
            elif confidence < 0.9:
                notes.append(f"flattened verification fits better in {confidence:.0%} of resamples only: the shapes are "
                             "not clearly told apart")
    f = fits[chosen]
    coef, keep, X, y, w, st = f["coef"], f["keep"], f["X"], f["y"], f["w"], f["steps"]
    params = {n: float(v) for n, v in zip(names, coef, strict=True)}
    lin_names = list(names)
    refit: Any = lambda idx: solve(X[idx], y[idx], w[idx])  # noqa: E731
    pred = X @ coef
    # chosen on the rows the straight line kept; the extended law's own robust pass below takes back
    # the rows past a knee that the straight line could not fit
    ext = exts.get(chosen)
    if ext is not None:  # the GPU regime's knee / overlapping host proposer earned their parameters
        names, coef, refit = ext.names, ext.coef, ext.refit
        pred = ext.predict(coef)
        keep = _trim(y - pred, trim, len(coef))
        if not keep.all():
            coef = refit(np.flatnonzero(keep))
            ext.coef = coef
            pred = ext.predict(coef)
        params = ext.params()
        notes += ext.notes

    # bootstrap: resample requests within each run, refit on the kept rows
    boot: list[list[float]] = []
    if bootstrap > 0:
        rng = np.random.default_rng(seed)
        run_of = np.concatenate([np.full(len(r.y), i) for i, r in enumerate(all_rows)])
        groups = [np.flatnonzero((run_of == i) & keep) for i in range(len(all_rows))]
        for _ in range(bootstrap):
            idx = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups if len(g)])
            boot.append([float(v) for v in refit(idx)])

    residuals = _residuals(all_rows, pred, y, st, keep)
    residuals["shapes"] = {s: round(fits[s]["ssr"], 12) for s in fits}
    if confidence is not None:
        residuals["shape_confidence"] = round(confidence, 3)  #: share of resamples in which the chosen shape fits better
    tables = [t for r in all_rows for k, t in zip(r.kind, r.tables, strict=True) if k == "decode"]
    allt = StepTable.concat(tables) if tables else None
    measured = MeasuredRange(
        max_tokens_per_forward=float(allt.n_forward(chosen).max()) if allt is not None and len(allt) else 0.0,
        max_forward_tokens=float((allt.n_forward(chosen) + allt.prefill_tokens).max()) if allt is not None and len(allt) else 0.0,
        max_batch=float(allt.batch.max()) if allt is not None and len(allt) else 0.0,
        concurrencies=concs,
        methods=ks_of,
    )
    alternatives = {s: {"params": {n: float(v) for n, v in zip(lin_names, fits[s]["coef"], strict=True)},
                        "weighted_ssr": fits[s]["ssr"]} for s in fits if s != chosen}
    for rd in runs:
        chk = checks.get(rd.name, {})
        gap = chk.get("gap")
        if gap is None or abs(gap) <= 0.02:
            continue
        why = (f"; {chk['sampled_requests']} of its {chk['requests']} requests were sampled (T > 0): their live outputs "
               "differ from the log, so acceptance agrees only on average over many requests") if chk.get("sampled_requests") else ""
        if chk.get("greedy_differ"):
            why += (f"; {chk['greedy_differ']} greedy request(s) drafted or came out differently than replayed: the server "
                    "does not do what its config and the log say (another drafter setting, or changed outputs)")
        notes.append(f"{rd.name}: the server's acceptance ({chk['live_acceptance']:.1%}) differs from the replay "
                     f"({chk['replayed_acceptance']:.1%}){why}")
    refused = _refused(runs)
    if refused:
        notes.append(f"{len(refused['ids'])} request(s) failed in every calibration run ({refused['why']}): predictions "
                     "leave them out, as compare does")
    server = runs[0].run.get("server") or {}
    prov = {
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
    return StepCostProfile(params=params, shape=chosen, alternatives=alternatives, param_names=names, bootstrap=boot,
                           residuals=residuals, measured=measured, replay_checks=checks, provenance=prov, notes=notes)


def _refused(runs: Sequence[RunData]) -> dict[str, Any] | None:
    """Ids that failed in every run that sent them, and the commonest reason (``None``: there are none)."""
    from collections import Counter

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


def _shape_confidence(fits: dict[str, dict[str, Any]], chosen: str, keep: np.ndarray, rows: Sequence[Rows],
                      resamples: int, seed: int) -> float:
    """Share of request resamples (within each run) in which ``chosen`` fits with the smaller residual."""
    rng = np.random.default_rng(seed + 1)
    run_of = np.concatenate([np.full(len(r.y), i) for i, r in enumerate(rows)])
    groups = [np.flatnonzero((run_of == i) & keep) for i in range(len(rows))]
    other = next(s for s in fits if s != chosen)
    wins = 0
    for _ in range(resamples):
        idx = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups if len(g)])
        ssr = {}
        for s in (chosen, other):
            f = fits[s]
            c = solve(f["X"][idx], f["y"][idx], f["w"][idx])
            ssr[s] = float((((f["y"][idx] - f["X"][idx] @ c) * f["w"][idx]) ** 2).sum())
        wins += ssr[chosen] <= ssr[other]
    return wins / resamples


def _trim(res: np.ndarray, trim: float, params: int) -> np.ndarray:
    """Rows within ``trim`` MADs of the fit (all of them when that would drop more than 20 %)."""
    mad = 1.4826 * float(np.median(np.abs(res - np.median(res))))
    keep = np.ones(len(res), dtype=bool)
    if mad > 0:
        keep = np.abs(res) <= trim * mad
        if keep.sum() < max(params + 1, int(0.8 * len(res))):
            keep[:] = True
    return keep


def _residuals(rows: Sequence[Rows], pred: np.ndarray, y: np.ndarray, steps: np.ndarray,
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
