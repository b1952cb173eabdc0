"""Calibrate, sweep and predict a GPU-shaped scripted server: is the law right past the knee?

Shared by ``benchmarks/predict_gpu.py`` (prints it) and ``tests/integration/test_gpu_scripted.py``
(asserts it). The servers (``predict.scripted_server`` with a measured GPU curve, ``predict.gpu_curve``)
run in a process of their own over real HTTP; each config's drafts per step come from the replay of
the real drafters (``scripted_server.replay_traces``), per run the server serves.

1. ``calibrate`` planned for the validation's concurrency range and largest k
   (``calibrate.plan_calibration``), on one server per config, as a user would run it;
2. a sweep of configs the calibration never ran (other k) at the validation concurrencies;
3. per cell predicted (from the profile alone) vs measured (compare's speedup); per config the
   crossover (``sweep.analysis.crossover``, margin ``MARGIN``) from each; with ``straight_line`` also
   the straight-line law's predictions from the same runs (``fit_profile(gpu_terms=False)``).

Boundary: orchestration beside ``calibrate`` (runs servers through ``sweep``, fits with ``predict``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_calibration, run_calibration
from specgauge.config import MIN_SPEEDUP
from specgauge.predict import CellSpec, predict_cells
from specgauge.predict.gpu_curve import GpuServerCosts
from specgauge.predict.replay import WorkloadReplay
from specgauge.predict.scripted_server import Traces, replay_traces
from specgauge.predict.server_process import ServerProcess
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.analysis import crossover
from specgauge.sweep.grid import config_label, grid_method

CURVE = Path(__file__).resolve().parents[2] / "tests" / "data" / "gpu" / "h200-llama3-8b-costs.json"
MARGIN = MIN_SPEEDUP


def cut_logged(out: Path, n: int, max_tokens: int, min_output: int = 8,
               keep: Callable[[dict[str, Any]], bool] = lambda request: True,
               drop_arrival_time: bool = False) -> Path:
    """The first ``n`` logged sample requests that ``keep`` accepts and that have >= ``min_output``
    output tokens, with ``max_tokens`` lowered and each logged output cut to match (replay stays exact)."""
    from specgauge.workload.samples import sample_logged_path

    rows = []
    with open(sample_logged_path(), encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            r = d["request"]
            if len(d["response"]["output_token_ids"]) < min_output or not keep(r):
                continue
            r["max_tokens"] = max_tokens
            if drop_arrival_time:
                r.pop("arrival_time", None)
            d["response"]["output_token_ids"] = d["response"]["output_token_ids"][:max_tokens]
            d["response"]["text"] = ""
            rows.append(json.dumps(d))
            if len(rows) == n:
                break
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def run_gpu_check(out: Path, *, curve: Path = CURVE, scale: float = 2.0, num_prompts: int = 128, max_tokens: int = 32,
                  calibrate_prompts: int = 8, methods: tuple[str, ...] = ("ngram", "suffix", "draft_model"),
                  validate: dict[str, int] | None = None, concurrencies: tuple[int, ...] = (8, 32, 64),
                  predict_k: int = 8, costs: GpuServerCosts | None = None, bootstrap: int = 100,
                  straight_line: bool = False, margin: float = MARGIN, log: Any = print) -> dict[str, Any]:
    """The whole check (see the module docstring); returns the profile, the cells and the crossovers."""
    from specgauge.models import draft_dir

    costs = costs or GpuServerCosts(scale=scale)
    validate = validate or {"ngram": 2, "suffix": 2, "draft_model": 4}
    wl = cut_logged(out / "workload.jsonl", num_prompts, max_tokens)
    replay = WorkloadReplay([wl], None, num_prompts)
    dm = f"draft_model:{draft_dir()}"
    cal_methods = [dm if m == "draft_model" else m for m in methods]
    ks: dict[str, int | list[int]] = {"ngram": 4, "suffix": 4, "draft_model": [2]}
    plan = plan_calibration(cal_methods, ks, [1, max(concurrencies)], predict_k, calibrate_prompts)
    t0 = time.monotonic()
    log(f"== calibrate (planned for concurrency 1-{max(concurrencies)}, k up to {predict_k}): "
        + ", ".join(f"{c.label}@{c.concurrency}" for c, _ in plan))
    # one server per config, as a user's: its runs in the order calibrate sends them (by request count, then concurrency)
    order = sorted(plan, key=lambda t: (t[1] or 0, t[0].concurrency))
    n_runs: dict[str, Traces] = {}
    for label in dict.fromkeys(c.label for c, _ in plan):
        spec = next(c.speculative_config for c, _ in plan if c.label == label)
        if spec:
            n_runs[label] = replay_traces(replay, spec, sum(1 for c, _ in order if c.label == label))
    configs = {c.label: c.speculative_config for c, _ in plan}
    with ServerProcess([wl], configs, gpu_curve=curve, gpu_costs=costs, traces=n_runs, work_dir=out / "cal-traces") as sp:
        cal = run_calibration(CalibrateConfig(workload=[wl], out_dir=out / "calibration", methods=cal_methods, ks=ks,
                                              predict_concurrency=[1, max(concurrencies)], predict_k=predict_k,
                                              num_prompts=calibrate_prompts, bootstrap=bootstrap,
                                              target=ServerTarget.from_urls(sp.urls), warmup=0), replay=replay)
    prof = cal.profile
    timings = {"calibration_s": time.monotonic() - t0}
    log(f"calibration took {timings['calibration_s']:.0f} s; shape {prof.shape}")
    log("params (ms): " + ", ".join(f"{k}={v * 1e3:.4g}" if k != "knee" else f"knee={v:.0f} tokens" for k, v in prof.params.items()))
    for note in prof.notes:
        log("note:", note)

    t1 = time.monotonic()
    vcfg: dict[str, dict[str, Any] | None] = {"off": None}
    for m in methods:
        s = grid_method(dm if m == "draft_model" else m, validate[m])
        vcfg[config_label(s)] = s
    cells = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in vcfg.items() for c in sorted(concurrencies)]
    vtraces = {lb: replay_traces(replay, s, len(concurrencies)) for lb, s in vcfg.items() if s}
    log(f"== sweep: {len(cells)} cells ({', '.join(vcfg)} at {', '.join(map(str, concurrencies))}), {num_prompts} prompts each")
    with ServerProcess([wl], vcfg, gpu_curve=curve, gpu_costs=costs, traces=vtraces, work_dir=out / "val-traces") as sp:
        grid = run_grid(cells, ServerTarget.from_urls(sp.urls), [wl], out / "sweep", num_prompts=num_prompts, warmup=0)
    spec_cells = [c for c in cells if c.speculative_config]
    preds = predict_cells(prof, [wl], spec_cells, num_prompts=num_prompts, reused_server=True, replay=replay)
    timings["sweep_s"] = time.monotonic() - t1
    log(f"sweep took {timings['sweep_s']:.0f} s")
    line = None
    if straight_line:  # the same runs, the law without the GPU terms
        from specgauge.predict import fit_profile

        lp = fit_profile([Path(d) for d in cal.run_dirs], workload=[wl], bootstrap=0, gpu_terms=False, replay=replay)
        line = predict_cells(lp, [wl], spec_cells, num_prompts=num_prompts, reused_server=True, replay=replay)
    rows = []
    for i, (cell, p) in enumerate(zip(spec_cells, preds, strict=True)):
        m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
        if m is None or p.speedup is None:
            continue
        rows.append({"label": cell.label, "concurrency": cell.concurrency, "predicted": p.speedup,
                     "predicted_low": p.speedup_low, "predicted_high": p.speedup_high, "measured": m,
                     "measured_low": lo, "measured_high": hi, "error": p.speedup / m - 1,
                     "tokens_per_forward": p.tokens_per_forward, "extrapolated": p.extrapolated,
                     "beyond_range": p.beyond_range,
                     "straight_line": line[i].speedup if line is not None else None})
    xo = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        pr = crossover(label, [(r["concurrency"], r["predicted"], r["predicted_low"], r["predicted_high"]) for r in mine], margin)
        me = crossover(label, [(r["concurrency"], r["measured"], r["measured_low"], r["measured_high"]) for r in mine], margin)
        xo[label] = {"predicted": pr.model_dump(mode="json"), "measured": me.model_dump(mode="json"),
                     "equal": (pr.status, pr.between) == (me.status, me.between)}
    from specgauge.recommend import recommend
    from specgauge.recommend.sources import options_from_predictions

    opts, notes = options_from_predictions(preds)
    for o in opts:
        o.speculative_config = vcfg.get(o.label)
    from specgauge.recommend import RecommendSettings

    rec = recommend(opts, sorted(concurrencies), source="prediction", source_name="cost_profile.json", notes=notes,
                    settings=RecommendSettings(min_speedup=margin))
    from specgauge.recommend.curves import speedup_curves

    curves = speedup_curves(preds, {(r["label"], r["concurrency"]): (r["measured"], r["measured_low"], r["measured_high"])
                                    for r in rows}, margin, rec.schedule)
    return {"curves": curves, "profile": prof, "calibration_checks": [c.model_dump() for c in cal.checks], "cells": rows, "crossovers": xo,
            "recommendation": rec, "timings": timings, "predictions": preds}
