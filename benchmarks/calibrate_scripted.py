"""How close calibration comes on the scripted known-law servers over real HTTP, on real sleeps.

The tests hold calibrate → fit → predict to exact figures on a virtual clock (``testing.virtual_bench``)
and keep only what timing cannot flip over HTTP; the figures on real sleeps live here, printed with both
sides and their ratio, repeated (``--repeats``, median and worst printed). Two parts:

1. ``law`` (``tests/integration/test_calibrate_scripted.py``'s server): a CPU-shaped scripted server with
   a known law, calibrated (off, n-gram k=4, suffix k=4 at concurrency 1 and 4); each parameter fitted
   vs the law, the relative RMSE, the in-sample errors, and n-gram k=2 / k=8 at concurrency 2 and 8
   predicted vs what compare measures on fresh servers.
2. ``gpu`` (``test_calibrate_gpu_synthetic.py``'s server, the H200 curve ×2 with a 1 ms/request suffix
   proposer on the host): issue 41's Done-when line — n-gram and the draft model at k = 8 and concurrency 64
   predicted from a calibration with synthetic points (n-gram k=4 and the draft model k=2 at concurrency 4
   and 16, synthetic acceptance length 2, asked 64) vs measured at 64. Paired: each repeat runs the whole
   plan once, then fits it twice from the same runs — without the points at the asked concurrency (the
   plan before they were added) and with them — so the noise of the runs falls on both sides alike; one
   sweep at 64 per repeat is the measurement for both.

    python benchmarks/calibrate_scripted.py [--part law|gpu|both] [--repeats 3] [--virtual]

``--virtual``: the same on the virtual clock (the tests' figures, the same every run). Wall-clock timing
on whatever else the machine does; the benchmark reports, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_live, run_calibration  # noqa: E402
from specgauge.predict import CellSpec, predict_cells  # noqa: E402
from specgauge.predict.gpu_curve import GpuServerCosts  # noqa: E402
from specgauge.sweep import ServerTarget, run_grid  # noqa: E402
from specgauge.sweep.grid import config_label, grid_method  # noqa: E402
from specgauge.testing.gpu_check import cut_logged, make_setup, scripted_target  # noqa: E402
from specgauge.testing.scripted_server import ScriptedServer  # noqa: E402
from specgauge.testing.virtual_bench import law_servers  # noqa: E402

CURVE = ROOT / "tests" / "data" / "gpu" / "h200-llama3-8b-costs.json"
LAW = {"a": 0.010, "r": 0.0012, "b": 0.0012, "c": 4e-7, "p": 4e-6, "q": 0.0015,
       "host[ngram]": 0.0015, "host[suffix]": 0.0025, "host_step[ngram]": 0.002, "g": 0.002, "gd": 0.0008}
COSTS = GpuServerCosts(scale=2.0, host_par={"ngram": 2e-5, "suffix": 1e-3})
ASK = 64


def _spec(method: str, k: int) -> tuple[str, dict[str, Any]]:
    s = grid_method(method, k)
    return config_label(s), s


def _law_target(stack: ExitStack, wl: Path, specs: dict[str, dict[str, Any] | None]) -> ServerTarget:
    """Real scripted servers (threads of this process, as ``test_sweep_predicted``'s), one per config."""
    return ServerTarget.from_urls({lb: stack.enter_context(ScriptedServer([wl], LAW, "flattened", sp)).base_url
                                   for lb, sp in specs.items()})


def law_once(out: Path, virtual: bool) -> dict[str, Any]:
    """One calibration of the CPU-shaped law server and its unseen cells: fitted vs law, predicted vs measured."""
    wl = cut_logged(out / "logged.jsonl", 16, 24)
    calib = dict([("off", None), _spec("ngram", 4), _spec("suffix", 4)])
    cfg = CalibrateConfig(workload=[wl], out_dir=out / "cal", methods=["ngram", "suffix"], concurrencies=[1, 4], num_prompts=16,
                          bootstrap=100, warmup=0)
    unseen = dict([("off", None), _spec("ngram", 2), _spec("ngram", 8)])
    cells = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in unseen.items() for c in (2, 8)]
    if virtual:
        dirs = law_servers(wl, LAW).grid(out / "cal" / "runs", plan_live(cfg, False))
        res = run_calibration(cfg.model_copy(update={"from_runs": list(dirs.values())}))
        val = law_servers(wl, LAW).grid(out / "val", [(c, 16) for c in cells])
    else:
        with ExitStack() as stack:
            cfg.target = _law_target(stack, wl, calib)
            res = run_calibration(cfg)
        with ExitStack() as stack:
            grid = run_grid(cells, _law_target(stack, wl, unseen), [wl], out / "val", num_prompts=16, warmup=0)
        val = {(c.label, c.concurrency): grid.cell_dir(c.label, c.concurrency) for c in cells}
    prof = res.profile
    preds = predict_cells(prof, [wl], [c for c in cells if c.speculative_config], num_prompts=16)
    unseen_rows = {}
    for p in preds:
        m, _, _ = measure_cell(val[("off", p.concurrency)], val[(p.label, p.concurrency)])
        unseen_rows[f"{p.label}@{p.concurrency}"] = (p.speedup, m)
    return {"params": {k: prof.params.get(k, 0.0) for k in LAW}, "relative_rmse": prof.residuals["relative_rmse"],
            "in_sample": {f"{c.label}@{c.concurrency}": (c.predicted, c.measured) for c in res.checks}, "unseen": unseen_rows}


def gpu_once(out: Path, virtual: bool) -> dict[str, Any]:
    """One repeat of the Done-when check: one sweep at 64, one calibration plan run once and fitted twice."""
    s = make_setup(out, curve=CURVE, costs=COSTS, num_prompts=128, max_tokens=32, concurrencies=(ASK,), virtual=virtual)
    dm = s.draft_model
    cfg = CalibrateConfig(workload=[s.workload], out_dir=out / "cal", methods=["ngram", dm], ks={"ngram": 4, "draft_model": 2},
                          concurrencies=[4, 16], num_prompts=8, bootstrap=30, warmup=0, synthetic_acceptance=2.0,
                          ask_concurrency=[ASK], predict_k=8)
    plan = plan_live(cfg, False)
    cells = [CellSpec(label=config_label(sp), speculative_config=sp, concurrency=ASK) for sp in (grid_method("ngram", 8), grid_method(dm, 8))]
    off = CellSpec(label="off", speculative_config=None, concurrency=ASK)
    t0 = time.monotonic()
    if virtual:
        dirs = s.virtual_servers().grid(out / "cal" / "runs", plan)
        sw = s.virtual_servers().grid(out / "sweep", [(off, s.num_prompts)] + [(c, s.num_prompts) for c in cells])
    else:
        cfg.target = scripted_target(s, configs=[c.speculative_config for c, _ in plan if c.speculative_config])
        live = run_calibration(cfg, replay=s.replay)
        dirs = {(Path(d).parent.name, int(Path(d).name[1:])): Path(d) for d in live.run_dirs}
        grid = run_grid([off, *cells], scripted_target(s, configs=[c.speculative_config for c in cells]), [s.workload],
                        out / "sweep", num_prompts=s.num_prompts, warmup=0)
        sw = {(c.label, ASK): grid.cell_dir(c.label, ASK) for c in (off, *cells)}
    runs_s = time.monotonic() - t0
    measured = {}
    for c in cells:
        m, _, _ = measure_cell(sw[("off", ASK)], sw[(c.label, ASK)])
        measured[c.label] = m
    sides = {"without points at 64": [d for (lb, conc), d in dirs.items() if conc != ASK], "with points at 64": list(dirs.values())}
    out_rows: dict[str, Any] = {"measured": measured, "runs_s": runs_s}
    for side, ds in sides.items():
        res = run_calibration(cfg.model_copy(update={"from_runs": ds, "target": None, "out_dir": out / side.replace(" ", "-")}),
                              replay=s.replay)
        preds = predict_cells(res.profile, [s.workload], cells, num_prompts=s.num_prompts, reused_server=True, replay=s.replay)
        out_rows[side] = {p.label: {"predicted": p.speedup, "unidentified": p.unidentified} for p in preds}
        out_rows[side]["knee"] = res.profile.params.get("knee")
    return out_rows


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def report_law(reps: list[dict[str, Any]]) -> None:
    print("\n== law: fitted vs the server's law (median over repeats; worst)")
    print(f"{'param':<18}{'law':>12}{'fitted (median)':>18}{'ratio':>8}{'worst':>9}")
    for k, v in LAW.items():
        got = [r["params"][k] for r in reps]
        ratios = [g / v for g in got]
        worst = max(ratios, key=lambda x: abs(x - 1))
        print(f"{k:<18}{v:>12.3g}{statistics.median(got):>18.4g}{statistics.median(ratios):>8.3f}{worst:>9.3f}")
    print(f"relative RMSE: median {statistics.median(r['relative_rmse'] for r in reps):.4f}, worst {max(r['relative_rmse'] for r in reps):.4f}")
    for part in ("in_sample", "unseen"):
        print(f"-- {part}: predicted / measured")
        for cell in reps[0][part]:
            pm = [r[part][cell] for r in reps if r[part][cell][0] and r[part][cell][1]]
            errs = [p / m - 1 for p, m in pm]
            print(f"   {cell:<14} predicted {statistics.median(p for p, _ in pm):.4f} measured {statistics.median(m for _, m in pm):.4f}"
                  f"  error median {_pct(statistics.median(errs))} worst {_pct(max(errs, key=abs))}")


def report_gpu(reps: list[dict[str, Any]]) -> None:
    print(f"\n== gpu: k = 8 at concurrency {ASK}, predicted from synthetic points vs measured (median over {len(reps)} repeats)")
    sides = ("without points at 64", "with points at 64")
    for label in reps[0]["measured"]:
        meas = [r["measured"][label] for r in reps]
        print(f"{label}: measured median {statistics.median(meas):.4f} (runs {', '.join(f'{m:.4f}' for m in meas)})")
        for side in sides:
            pred = [r[side][label]["predicted"] for r in reps]
            errs = [p / m - 1 for p, m in zip(pred, meas, strict=True)]
            unid = sorted({t for r in reps for t in r[side][label]["unidentified"]})
            print(f"   {side:<22} predicted median {statistics.median(pred):.4f}  ratio median {statistics.median(pred) / statistics.median(meas):.4f}"
                  f"  errors {', '.join(_pct(e) for e in errs)} (median {_pct(statistics.median(errs))})  unidentified {unid or '-'}")
    for side in sides:
        print(f"knee {side}: {[r[side]['knee'] for r in reps]}")
    secs = ", ".join(f"{r['runs_s']:.0f} s" for r in reps)
    print(f"runs per repeat: {secs}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("law", "gpu", "both"), default="both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--virtual", action="store_true", help="on the virtual clock (the tests' deterministic figures)")
    ap.add_argument("--out", type=Path, default=Path("results/benchmark-calibrate-scripted"))
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    dump: dict[str, Any] = {"virtual": a.virtual}
    for part, once, report in (("law", law_once, report_law), ("gpu", gpu_once, report_gpu)):
        if a.part not in (part, "both"):
            continue
        reps = []
        for i in range(a.repeats):
            reps.append(once(a.out / part / f"r{i}", a.virtual))
            print(f"{part} repeat {i + 1}/{a.repeats} done ({time.monotonic() - t0:.0f} s)", flush=True)
        report(reps)
        dump[part] = reps
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "calibrate_scripted.json").write_text(json.dumps(dump, indent=1, default=str), encoding="utf-8")
    print(f"total {time.monotonic() - t0:.0f} s; {'virtual clock' if a.virtual else 'real HTTP, real sleeps'}; "
          f"results in {a.out / 'calibrate_scripted.json'}")


if __name__ == "__main__":
    main()
