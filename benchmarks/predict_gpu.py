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

from specgauge.gpu_scripted import CURVE, run_gpu_check


def print_result(res: dict[str, Any]) -> None:
    rows = res["cells"]
    print(f"\n{'cell':<18}{'C':>4}  {'tok/fwd':>7}  {'predicted [band]':<24}{'measured [95% CI]':<24}{'error':>8}  "
          f"range   straight line (error)")
    for r in rows:
        band = f"{r['predicted']:.3f} [{r['predicted_low'] or 0:.3f}, {r['predicted_high'] or 0:.3f}]"
        ci = f"{r['measured']:.3f} [{r['measured_low'] or 0:.3f}, {r['measured_high'] or 0:.3f}]"
        rng = "beyond" if r["extrapolated"] else "inside"
        print(f"{r['label']:<18}{r['concurrency']:>4}  {r['tokens_per_forward'] or 0:>7.0f}  {band:<24}{ci:<24}"
              f"{100 * r['error']:>7.1f}%  {rng}  "
              + (f"{r['straight_line']:.3f} ({100 * (r['straight_line'] / r['measured'] - 1):+.1f}%)" if r.get("straight_line") else ""))
    if rows:
        errs = [abs(r["error"]) for r in rows]
        print(f"\nmedian |error| {100 * statistics.median(errs):.1f}% (goal <= 5%); max {100 * max(errs):.1f}% (goal <= 10%); "
              f"within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")
    line = [abs(r["straight_line"] / r["measured"] - 1) for r in rows if r.get("straight_line")]
    if line:
        print(f"straight-line law from the same runs: median |error| {100 * statistics.median(line):.1f}%, max {100 * max(line):.1f}%")
    rec = res["recommendation"]
    print(f"recommend (from the calibration alone): {rec.headline}")
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
                        bootstrap=30 if a.quick else 100, straight_line=True)
    print_result(res)
    dump = {**res, "profile": res["profile"].params, "recommendation": res["recommendation"].model_dump(mode="json"),
            "predictions": [p.model_dump(mode="json") for p in res["predictions"]]}
    dump["curves"] = res["curves"].model_dump(mode="json")
    (a.out / "predict_gpu.json").write_text(json.dumps(dump, indent=1, default=str))
    import plotly.offline

    from specgauge.report.speedup_plot import speedup_vs_batch_html

    page = (f"<!doctype html><html><head><meta charset='utf-8'><script>{plotly.offline.get_plotlyjs()}</script></head>"
            f"<body>{speedup_vs_batch_html(res['curves'])}</body></html>")
    (a.out / "speedup_vs_batch.html").write_text(page, encoding="utf-8")
    print(f"total {time.monotonic() - t0:.0f} s; results in {a.out / 'predict_gpu.json'}")


if __name__ == "__main__":
    main()
