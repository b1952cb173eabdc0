"""Calibrated prediction on a GPU-shaped server: calibrate as a user would, predict unseen cells, measure them.

The server (``specgauge.predict.scripted_server`` with ``--gpu-curve``) answers over real HTTP with the
workload's logged outputs and times each step on a measured H200 curve (``predict.gpu_curve``: the
forward flat to a knee, then linear; attention per cached token; an n-gram / suffix proposer on the
host overlapping the device step), stretched by ``--scale`` so a Python server on a shared 2-core
host keeps its deadlines. Its drafts per step come from the replay of the real drafters.

1. ``calibrate`` with ``predict_concurrency`` = the validation's range and ``predict_k`` = its largest
   k (``calibrate.plan_calibration``: baseline at low / middle / high concurrency, each method at its
   k at middle / high, and at the largest k at high).
2. A sweep of the validation configs (not calibrated: other k) at the validation concurrencies, each
   config on one server (concurrencies ascending, as ``specgauge sweep`` runs them).
3. Per cell: predicted (``predict_cells`` from the profile alone) vs measured (compare's speedup);
   per config: the crossover concurrency (``sweep.analysis.crossover``, margin 1.05×) from the
   predictions and from the measurements.

    python benchmarks/predict.py --gpu-curve tests/data/gpu/h200-llama3-8b-costs.json [--quick]
    python benchmarks/predict_gpu.py [--curve PATH] [--scale 2] [--num-prompts 128] [--max-tokens 32]

Timing is wall clock on whatever else the machine does; the benchmark reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_calibration, run_calibration
from specgauge.predict import CellSpec, predict_cells
from specgauge.predict.gpu_curve import GpuServerCosts
from specgauge.predict.replay import WorkloadReplay
from specgauge.predict.scripted_server import ServerProcess, Traces, replay_traces
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.analysis import crossover
from specgauge.sweep.grid import config_label, grid_method

CURVE = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpu" / "h200-llama3-8b-costs.json"
MARGIN = 1.05


def cut_logged(out: Path, n: int, max_tokens: int, min_output: int = 8) -> Path:
    """The first ``n`` logged sample requests with ≥ ``min_output`` output tokens, cut to ``max_tokens``."""
    from specgauge.workload.samples import sample_logged_path

    rows = []
    for line in sample_logged_path().read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        if len(d["response"]["output_token_ids"]) < min_output:
            continue
        d["request"]["max_tokens"] = max_tokens
        d["response"]["output_token_ids"] = d["response"]["output_token_ids"][:max_tokens]
        d["response"]["text"] = ""
        rows.append(json.dumps(d))
        if len(rows) == n:
            break
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def traces_for(replay: WorkloadReplay, cells: list[tuple[CellSpec, int | None]], n_all: int) -> dict[str, Traces]:
    """Per config: its server's runs in order (one per cell, concurrencies ascending)."""
    out: dict[str, Traces] = {}
    for label in dict.fromkeys(c.label for c, _ in cells):
        mine = [c for c, _ in cells if c.label == label]
        if mine[0].speculative_config:
            out[label] = replay_traces(replay, mine[0].speculative_config, len(mine))
    return out


def run_gpu_check(out: Path, *, curve: Path = CURVE, scale: float = 2.0, num_prompts: int = 128, max_tokens: int = 32,
                  calibrate_prompts: int = 8, methods: tuple[str, ...] = ("ngram", "suffix", "draft_model"),
                  validate: dict[str, int] | None = None, concurrencies: tuple[int, ...] = (8, 32, 64),
                  predict_k: int = 8, costs: GpuServerCosts | None = None, bootstrap: int = 100,
                  log: Any = print) -> dict[str, Any]:
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
                                              target=ServerTarget.from_urls(sp.urls), warmup=0))
    prof = cal.profile
    log(f"calibration took {time.monotonic() - t0:.0f} s; shape {prof.shape}")
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
    log(f"sweep took {time.monotonic() - t1:.0f} s")
    rows = []
    for cell, p in zip(spec_cells, preds, strict=True):
        m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
        if m is None or p.speedup is None:
            continue
        rows.append({"label": cell.label, "concurrency": cell.concurrency, "predicted": p.speedup,
                     "predicted_low": p.speedup_low, "predicted_high": p.speedup_high, "measured": m,
                     "measured_low": lo, "measured_high": hi, "error": p.speedup / m - 1,
                     "tokens_per_forward": p.tokens_per_forward, "extrapolated": p.extrapolated,
                     "beyond_range": p.beyond_range})
    xo = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        pr = crossover(label, [(r["concurrency"], r["predicted"], r["predicted_low"], r["predicted_high"]) for r in mine], MARGIN)
        me = crossover(label, [(r["concurrency"], r["measured"], r["measured_low"], r["measured_high"]) for r in mine], MARGIN)
        xo[label] = {"predicted": pr.model_dump(mode="json"), "measured": me.model_dump(mode="json"),
                     "equal": (pr.status, pr.between) == (me.status, me.between)}
    return {"profile": prof, "calibration_checks": [c.model_dump() for c in cal.checks], "cells": rows, "crossovers": xo}


def print_result(res: dict[str, Any]) -> None:
    rows = res["cells"]
    print(f"\n{'cell':<18}{'C':>4}  {'tok/fwd':>7}  {'predicted [band]':<24}{'measured [95% CI]':<24}{'error':>8}  range")
    for r in rows:
        band = f"{r['predicted']:.3f} [{r['predicted_low'] or 0:.3f}, {r['predicted_high'] or 0:.3f}]"
        ci = f"{r['measured']:.3f} [{r['measured_low'] or 0:.3f}, {r['measured_high'] or 0:.3f}]"
        rng = "beyond" if r["extrapolated"] else "inside"
        print(f"{r['label']:<18}{r['concurrency']:>4}  {r['tokens_per_forward'] or 0:>7.0f}  {band:<24}{ci:<24}"
              f"{100 * r['error']:>7.1f}%  {rng}")
    if rows:
        errs = [abs(r["error"]) for r in rows]
        print(f"\nmedian |error| {100 * statistics.median(errs):.1f}% (goal <= 5%); max {100 * max(errs):.1f}% (goal <= 10%); "
              f"within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")
    for label, x in res["crossovers"].items():
        print(f"crossover {label}: predicted {x['predicted']['status']} {x['predicted']['between']}, measured "
              f"{x['measured']['status']} {x['measured']['between']} -> {'equal' if x['equal'] else 'DIFFERENT'}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curve", type=Path, default=CURVE)
    ap.add_argument("--scale", type=float, default=2.0, help="time stretch of every step (a busy host needs more)")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", default="8,32,64", help="validation concurrencies")
    ap.add_argument("--quick", action="store_true", help="validation at concurrency 8 and 64 only, bootstrap 30")
    ap.add_argument("--out", type=Path, default=Path("results/benchmark-predict-gpu"))
    a = ap.parse_args(argv)
    concs = tuple(int(x) for x in a.concurrency.split(",") if x)
    n = a.num_prompts
    if a.quick:
        concs = (8, 64)
    t0 = time.monotonic()
    res = run_gpu_check(a.out, curve=a.curve, scale=a.scale, num_prompts=n, max_tokens=a.max_tokens, concurrencies=concs,
                        bootstrap=30 if a.quick else 100)
    print_result(res)
    dump = {**res, "profile": res["profile"].params}
    (a.out / "predict_gpu.json").write_text(json.dumps(dump, indent=1, default=str))
    print(f"total {time.monotonic() - t0:.0f} s; results in {a.out / 'predict_gpu.json'}")


if __name__ == "__main__":
    main()
