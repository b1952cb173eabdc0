"""Calibrated prediction on a GPU-shaped server: calibrate as a user would, predict unseen cells, measure them.

The server (``specgauge.testing.scripted_server`` with ``--gpu-curve``) answers over real HTTP with the
workload's logged outputs and times each step on a measured H200 curve (``predict.gpu_curve``: the
forward flat to a knee, then linear; attention per cached token; an n-gram / suffix proposer on the
host overlapping the device step), stretched by ``--scale`` so a Python server on a shared 2-core
host keeps its deadlines. Its drafts per step come from the replay of the real drafters.

1. ``calibrate`` with ``predict_concurrency`` = the validation's range and ``predict_k`` = its largest
   k (``calibrate.plan_calibration``: baseline at low / middle / high concurrency, each method at its
   k at middle / high, and at the largest k at high).
2. A sweep of the validation configs (not calibrated: other k) at the validation concurrencies, each
   config on one server (concurrencies ascending, as ``specgauge sweep`` runs them).
3. Per cell: predicted (``predict_cells`` from the profile alone) vs measured (compare's speedup),
   and both against the server's own noise-free truth (``gpu_check.truth_speedup``: its step law
   through the same closed loop); per config: the crossover concurrency (``sweep.analysis.crossover``,
   margin 1.05×) from the predictions, the measurements and the truth.
4. The schedule: ``recommend`` for n-gram at ``--schedule-ks`` from the calibration alone (a
   ``num_speculative_tokens_per_batch_size`` schedule), those cells swept, and per band the
   recommended k beside the measured best (``gpu_check.run_schedule_check``).

    python benchmarks/predict.py --gpu-curve tests/data/gpu/h200-llama3-8b-costs.json [--quick]
    python benchmarks/predict_gpu.py [--curve PATH] [--scale 2] [--num-prompts 128] [--max-tokens 32] [--virtual]

Timing is wall clock on whatever else the machine does; the benchmark reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from specgauge.testing.gpu_check import GpuRun, ScheduleCheck, run_gpu_check, run_schedule_check

#: the H200 curve this repository carries (a test truth; a wheel holds none)
CURVE = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpu" / "h200-llama3-8b-costs.json"


def print_result(res: GpuRun) -> None:
    rows = res.cells
    print(f"\n{'cell':<18}{'C':>4}  {'tok/fwd':>7}  {'predicted [band]':<24}{'measured [95% CI]':<24}{'error':>8}  "
          f"{'truth':>6} {'meas-truth':>10}  range   straight line (error)")
    for r in rows:
        band = f"{r['predicted']:.3f} [{r['predicted_low'] or 0:.3f}, {r['predicted_high'] or 0:.3f}]"
        ci = f"{r['measured']:.3f} [{r['measured_low'] or 0:.3f}, {r['measured_high'] or 0:.3f}]"
        rng = "beyond" if r["extrapolated"] else "inside"
        print(f"{r['label']:<18}{r['concurrency']:>4}  {r['tokens_per_forward'] or 0:>7.0f}  {band:<24}{ci:<24}"
              f"{100 * r['error']:>7.1f}%  {r['truth']:>6.3f} {100 * (r['measured'] / r['truth'] - 1):>9.1f}%  {rng}  "
              + (f"{r['straight_line']:.3f} ({100 * (r['straight_line'] / r['measured'] - 1):+.1f}%)" if r.get("straight_line") else ""))
    if rows:
        errs = [abs(r["error"]) for r in rows]
        print(f"\nmedian |error| {100 * statistics.median(errs):.1f}% (goal <= 5%); max {100 * max(errs):.1f}% (goal <= 10%); "
              f"within 5%: {sum(e <= 0.05 for e in errs)}/{len(errs)}")
        law = [abs(r["predicted"] / r["truth"] - 1) for r in rows]
        meas = [abs(r["measured"] / r["truth"] - 1) for r in rows]
        print(f"against the server's noise-free truth: prediction median {100 * statistics.median(law):.2f}% max {100 * max(law):.2f}%; "
              f"measurement median {100 * statistics.median(meas):.2f}% max {100 * max(meas):.2f}%")
        near = min(rows, key=lambda r: abs(r["truth"] - res.setup.margin))
        print(f"nearest truth to the {res.setup.margin:g}x margin: {near['label']} at {near['concurrency']}, "
              f"{near['truth']:.3f} ({100 * (near['truth'] / res.setup.margin - 1):+.1f}%)")
    line = [abs(r["straight_line"] / r["measured"] - 1) for r in rows if r.get("straight_line")]
    if line:
        print(f"straight-line law from the same runs: median |error| {100 * statistics.median(line):.1f}%, max {100 * max(line):.1f}%")
    print(f"recommend (from the calibration alone): {res.recommendation.headline}")
    for label, x in res.crossovers.items():
        print(f"crossover {label} (margin {res.setup.margin:g}x): predicted {x['predicted']['status']} {x['predicted']['between']}, "
              f"measured {x['measured']['status']} {x['measured']['between']}, truth {x['truth']['status']} {x['truth']['between']} "
              f"-> {'equal' if x['equal'] else 'DIFFERENT'}")


def print_schedule(chk: ScheduleCheck) -> None:
    print(f"\n== {chk.family}: recommended k per band (from the calibration alone) beside the measured best")
    print(f"predicted: {chk.predicted.headline}")
    print(f"measured:  {chk.measured.headline}")
    labels = sorted({lb for b in chk.bands for lb in b.measured}, key=lambda lb: int(lb.rsplit("k", 1)[-1]) if lb[-1].isdigit() else 0)
    print(f"{'C':>4} {'batches':>9}  {'recommended':<12}{'measured best':<14}{'ok':<4}" + "".join(f"{lb:>22}" for lb in labels))
    for b in chk.bands:
        ms = "".join(f"{(f'{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]' if v[0] is not None and v[1] is not None and v[2] is not None else '-'):>22}"
                     for v in (b.measured.get(lb, (None, None, None)) for lb in labels))
        rng = f"{b.batch_range[0]}-{b.batch_range[1]}"
        print(f"{b.concurrency:>4} {rng:>9}  {b.recommended:<12}{b.measured_best:<14}{'yes' if b.ok else 'NO':<4}{ms}")
    print(f"schedule: {json.dumps(chk.predicted.schedule)}; bands agreeing: {sum(b.ok for b in chk.bands)}/{len(chk.bands)}")
    for n in chk.predicted.notes:
        print("note:", n)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curve", type=Path, default=CURVE)
    ap.add_argument("--scale", type=float, default=2.0, help="time stretch of every step (a busy host needs more)")
    ap.add_argument("--num-prompts", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", default="8,32,64", help="validation concurrencies")
    ap.add_argument("--margin", type=float, default=None, help="the crossover's and recommendation's margin (default 1.05)")
    ap.add_argument("--schedule-ks", default="1,2,4,8", help="n-gram k for the schedule check ('' skips it)")
    ap.add_argument("--quick", action="store_true", help="validation at concurrency 8 and 64 only, bootstrap 30")
    ap.add_argument("--virtual", action="store_true",
                    help="the servers on a virtual clock (testing.virtual_bench: runs synthesised from the step law, no HTTP; "
                         "the figures test_gpu_scripted asserts, the same every run)")
    ap.add_argument("--out", type=Path, default=Path("results/benchmark-predict-gpu"))
    a = ap.parse_args(argv)
    concs = tuple(int(x) for x in a.concurrency.split(",") if x)
    n = a.num_prompts
    if a.quick:
        concs = (8, 64)
    t0 = time.monotonic()
    res = run_gpu_check(a.out, curve=a.curve, scale=a.scale, num_prompts=n, max_tokens=a.max_tokens, concurrencies=concs,
                        bootstrap=30 if a.quick else 100, straight_line=True, virtual=a.virtual,
                        **({"margin": a.margin} if a.margin is not None else {}))
    print_result(res)
    dump = res.summary()
    curves = res.curves
    ks = [int(x) for x in a.schedule_ks.split(",") if x]
    if ks:
        chk = run_schedule_check(res, "ngram", ks)
        print_schedule(chk)
        dump["schedule_check"] = chk.summary()
        curves = chk.curves
    (a.out / "predict_gpu.json").write_text(json.dumps(dump, indent=1, default=str))
    import plotly.offline

    from specgauge.report.speedup_plot import speedup_vs_batch_html

    page = (f"<!doctype html><html><head><meta charset='utf-8'><script>{plotly.offline.get_plotlyjs()}</script></head>"
            f"<body>{speedup_vs_batch_html(curves)}</body></html>")
    (a.out / "speedup_vs_batch.html").write_text(page, encoding="utf-8")
    print(f"total {time.monotonic() - t0:.0f} s; results in {a.out / 'predict_gpu.json'}")


if __name__ == "__main__":
    main()
