"""Calibrate, sweep and predict a GPU-shaped scripted server: is the law right past the knee?

Shared by ``benchmarks/predict_gpu.py`` (prints it) and ``tests/integration/test_gpu_scripted.py``
(asserts it). The servers (``testing.scripted_server`` with a measured GPU curve, ``predict.gpu_curve``)
run in a process of their own over real HTTP; each config's drafts per step come from the replay of
the real drafters (``scripted_drafts.replay_traces``), per run the server serves. The curve is an
explicit argument (the repository's is ``tests/data/gpu/h200-llama3-8b-costs.json``; a wheel holds none).

``run_gpu_check``:
1. ``calibrate`` planned for the validation's concurrency range and largest k
   (``calibrate.plan_calibration``), on one server per config, as a user would run it;
2. a sweep of configs the calibration never ran (other k) at the validation concurrencies;
3. per cell predicted (from the profile alone) vs measured (compare's speedup) and vs the server's
   own truth (its step law through the same closed loop, noise-free: ``truth_speedup``); per config
   the crossover (``sweep.analysis.crossover``, margin ``MARGIN``) from each; with ``straight_line``
   also the straight-line law's predictions from the same runs (``fit_profile(gpu_terms=False)``).

``run_schedule_check`` (on a finished ``run_gpu_check``): one method family at several k, recommended
from the calibration alone (a ``num_speculative_tokens_per_batch_size`` schedule), its cells added to
the same sweep, and per band the recommended k against the measured best.

Boundary: orchestration beside ``calibrate`` (runs servers through ``sweep``, fits with ``predict``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_calibration, run_calibration
from specgauge.config import MIN_SPEEDUP, resolve_spec
from specgauge.predict import CellSpec, predict_cells
from specgauge.predict.gpu_curve import GpuCurve, GpuServerCosts, gpu_step_function
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.replay import WorkloadReplay, prior_requests
from specgauge.predict.schedule import simulate_schedule, timeline
from specgauge.testing.scripted_drafts import Traces, replay_traces
from specgauge.testing.server_process import ServerProcess
from specgauge.predict.types import CellPrediction
from specgauge.recommend import RecommendSettings, recommend
from specgauge.recommend.curves import SpeedupCurves, speedup_curves
from specgauge.recommend.models import Option, Recommendation
from specgauge.recommend.sources import options_from_predictions
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.analysis import crossover
from specgauge.sweep.grid import config_label, grid_method
from specgauge.sweep.runner import SweepResult

MARGIN = MIN_SPEEDUP
Log = Callable[..., Any]


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


@dataclass
class GpuSetup:
    """What every step of the check shares: the server's truth, the workload and the validation grid."""

    out: Path
    curve: Path
    costs: GpuServerCosts
    workload: Path
    replay: WorkloadReplay
    num_prompts: int
    concurrencies: tuple[int, ...]
    margin: float
    draft_model: str  #: the ``--method`` text of the shipped draft model
    #: run the servers on a virtual clock (``testing.virtual_bench``: records synthesised from the step law,
    #: no HTTP, no sleep — the same verdict on any machine) instead of real scripted servers over HTTP
    virtual: bool = False

    def virtual_servers(self) -> Any:
        """Fresh virtual servers of this setup's truth (one per config, kept up across their runs)."""
        from specgauge.testing.virtual_bench import gpu_servers

        return gpu_servers(self.workload, self.curve, self.costs, self.num_prompts, replays={self.num_prompts: self.replay})

    def method_text(self, m: str) -> str:
        return self.draft_model if m == "draft_model" else m


@dataclass
class GpuRun:
    """A finished ``run_gpu_check``."""

    setup: GpuSetup
    profile: StepCostProfile
    calibration_checks: list[dict[str, Any]]
    configs: dict[str, dict[str, Any] | None]  #: the swept configs by label ("off" included)
    sweep: SweepResult
    predictions: list[CellPrediction]
    cells: list[dict[str, Any]]
    crossovers: dict[str, dict[str, Any]]
    recommendation: Recommendation
    curves: SpeedupCurves
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"profile": self.profile.params, "calibration_checks": self.calibration_checks, "cells": self.cells,
                "crossovers": self.crossovers, "recommendation": self.recommendation.model_dump(mode="json"),
                "curves": self.curves.model_dump(mode="json"), "timings": self.timings,
                "predictions": [p.model_dump(mode="json") for p in self.predictions]}


def make_setup(out: Path, *, curve: Path, costs: GpuServerCosts, num_prompts: int = 128, max_tokens: int = 32,
               concurrencies: Sequence[int] = (8, 32, 64), margin: float = MARGIN, virtual: bool = False) -> GpuSetup:
    """The workload (``num_prompts`` logged sample requests cut to ``max_tokens``), its replay, the server's truth."""
    from specgauge.models import draft_dir

    wl = cut_logged(out / "workload.jsonl", num_prompts, max_tokens)
    return GpuSetup(out=out, curve=curve, costs=costs, workload=wl, replay=WorkloadReplay([wl], None, num_prompts),
                    num_prompts=num_prompts, concurrencies=tuple(sorted(concurrencies)), margin=margin,
                    draft_model=f"draft_model:{draft_dir()}", virtual=virtual)


def calibrate_gpu(s: GpuSetup, methods: Sequence[str], predict_k: int, calibrate_prompts: int, bootstrap: int,
                  log: Log = print) -> Any:
    """``calibrate`` as a user runs it, planned for 1..max(concurrencies) and k up to ``predict_k``, on one
    scripted server per config (its runs in the order calibrate sends them); returns calibrate's result."""
    cal_methods = [s.method_text(m) for m in methods]
    ks: dict[str, int | list[int]] = {"ngram": 4, "suffix": 4, "draft_model": [2]}
    span = [1, max(s.concurrencies)]
    plan = plan_calibration(cal_methods, ks, span, predict_k, calibrate_prompts)
    log(f"== calibrate (planned for concurrency 1-{max(s.concurrencies)}, k up to {predict_k}): "
        + ", ".join(f"{c.label}@{c.concurrency}" for c, _ in plan))
    order = sorted(plan, key=lambda t: (t[1] or 0, t[0].concurrency))  # by request count, then concurrency
    traces: dict[str, Traces] = {}
    for label in dict.fromkeys(c.label for c, _ in plan):
        spec = next(c.speculative_config for c, _ in plan if c.label == label)
        if spec:
            traces[label] = replay_traces(s.replay, spec, sum(1 for c, _ in order if c.label == label))
    configs = {c.label: c.speculative_config for c, _ in plan}
    cfg = CalibrateConfig(workload=[s.workload], out_dir=s.out / "calibration", methods=cal_methods, ks=ks,
                          predict_concurrency=span, predict_k=predict_k, num_prompts=calibrate_prompts, bootstrap=bootstrap,
                          warmup=0)
    if s.virtual:  # the same plan, its runs synthesised on a virtual clock, then calibrate --from-runs
        dirs = s.virtual_servers().grid(s.out / "calibration" / "runs", order)
        return run_calibration(cfg.model_copy(update={"from_runs": list(dirs.values())}), replay=s.replay)
    with ServerProcess([s.workload], configs, gpu_curve=s.curve, gpu_costs=s.costs, traces=traces,
                       work_dir=s.out / "cal-traces") as sp:
        cfg.target = ServerTarget.from_urls(sp.urls)
        return run_calibration(cfg, replay=s.replay)


def scripted_target(s: GpuSetup, runs: int = 3, configs: Sequence[dict[str, Any]] = ()) -> ServerTarget:
    """GPU-shaped scripted servers started per config by a command template, so that any cell a
    calibration plans — synthetic points and the identifying ones it proposes — has a server. Each
    config's drafts for up to ``runs`` runs over the same requests come from the replay: ``configs``'
    computed here once (one replay, its caches shared; a file the servers read), any other config's
    replayed by its server as it starts (``--replay-runs``)."""
    import shlex
    import sys

    q = shlex.quote
    traces = ""
    if configs:
        tf = s.out / f"traces-{len(list(s.out.glob('traces-*.json')))}.json"
        tf.write_text(json.dumps({json.dumps(c, sort_keys=True): replay_traces(s.replay, c, runs) for c in configs}), encoding="utf-8")
        traces = f"--traces {q(str(tf))} "
    return ServerTarget.from_command(
        f"{q(sys.executable)} -m specgauge.testing.scripted_server --workload {q(str(s.workload))} --law {{}} "
        f"--gpu-curve {q(str(s.curve))} --gpu-costs {q(s.costs.model_dump_json())} --replay-runs {runs} {traces}"
        f"--num-prompts {s.num_prompts} --port {{port}} --speculative-config {{spec}}", health_timeout_s=300)


@dataclass
class VirtualGrid:
    """A sweep on virtual servers: its cells' run directories (what ``measured_rows`` reads of a ``SweepResult``)."""

    out_dir: Path
    dirs: dict[tuple[str, int], Path]
    earlier: dict[tuple[str, int], Path] = field(default_factory=dict)  #: the cells of the sweep it adds to

    def cell_dir(self, label: str, concurrency: int) -> Path:
        return {**self.earlier, **self.dirs}[(label, concurrency)]


def sweep_gpu(s: GpuSetup, configs: dict[str, dict[str, Any] | None], resume: Any = False, log: Log = print) -> SweepResult:
    """Bench ``configs`` at the validation concurrencies into ``OUT/sweep`` (``resume``: add them to the
    cells already there; on virtual servers, the ``VirtualGrid`` to add to), one scripted server per
    config, concurrencies ascending as ``sweep`` runs them."""
    cells = [CellSpec(label=lb, speculative_config=sp, concurrency=c) for lb, sp in configs.items() for c in sorted(s.concurrencies)]
    traces = {lb: replay_traces(s.replay, sp, len(s.concurrencies)) for lb, sp in configs.items() if sp}
    log(f"== sweep: {len(cells)} cells ({', '.join(configs)} at {', '.join(map(str, sorted(s.concurrencies)))}), "
        f"{s.num_prompts} prompts each" + (" (virtual clock)" if s.virtual else ""))
    if s.virtual:
        dirs = s.virtual_servers().grid(s.out / "sweep", [(c, s.num_prompts) for c in cells])
        earlier = {**resume.earlier, **resume.dirs} if isinstance(resume, VirtualGrid) else {}
        return VirtualGrid(s.out / "sweep", dirs, earlier)  # type: ignore[return-value]
    with ServerProcess([s.workload], configs, gpu_curve=s.curve, gpu_costs=s.costs, traces=traces,
                       work_dir=s.out / f"traces-{len(list((s.out).glob('traces-*')))}") as sp:
        return run_grid(cells, ServerTarget.from_urls(sp.urls), [s.workload], s.out / "sweep", num_prompts=s.num_prompts,
                        warmup=0, resume=resume)


def truth_speedup(s: GpuSetup, spec: dict[str, Any] | None, concurrency: int, run: int = 0, ell: float = 0.0) -> float:
    """The speedup the scripted server's own step law gives a cell, noise-free: compare's statistic
    (Σ tokens / Σ E2E against the baseline's) of the same drafts through the same closed loop
    (``predict.schedule``), each step timed on the curve. ``run``: the server's earlier runs over the
    same requests (what a suffix cache holds); ``ell``: the HTTP round trip."""
    curve = GpuCurve.load(s.curve)

    def rate(sp: dict[str, Any] | None, prior: list[int]) -> float:
        method, k, _ = resolve_spec(sp)
        fn = gpu_step_function(curve, s.costs, method, k)
        durations: list[float] = []

        def step(*row: int) -> float:
            durations.append(fn(*row))
            return durations[-1]

        sched = simulate_schedule(s.replay.planned(sp, prior), concurrency, step, ell, method, k)
        _, _, e2e = timeline(sched, np.asarray(durations), ell)
        return float(sched.output_tokens.sum() / e2e.sum())

    return rate(spec, prior_requests(len(s.replay.requests), 0, run)) / rate(None, [])


def measured_rows(s: GpuSetup, grid: SweepResult, cells: Sequence[CellSpec], preds: Sequence[CellPrediction],
                  line: Sequence[CellPrediction] | None = None, ell: float = 0.0) -> list[dict[str, Any]]:
    """Per speculative cell: predicted (band), measured (95 % CI), the error, the server's truth."""
    rows = []
    order: dict[str, list[int]] = {}
    for c in cells:
        order.setdefault(c.label, []).append(c.concurrency)
    for i, (cell, p) in enumerate(zip(cells, preds, strict=True)):
        m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
        if m is None or p.speedup is None:
            continue
        run = sorted(set(order[cell.label])).index(cell.concurrency)
        rows.append({"label": cell.label, "concurrency": cell.concurrency, "predicted": p.speedup,
                     "predicted_low": p.speedup_low, "predicted_high": p.speedup_high, "measured": m,
                     "measured_low": lo, "measured_high": hi, "error": p.speedup / m - 1,
                     "truth": truth_speedup(s, cell.speculative_config, cell.concurrency, run, ell),
                     "tokens_per_forward": p.tokens_per_forward, "extrapolated": p.extrapolated,
                     "beyond_range": p.beyond_range, "straight_line": line[i].speedup if line is not None else None})
    return rows


def crossovers(rows: Sequence[dict[str, Any]], margin: float) -> dict[str, dict[str, Any]]:
    """Per config: the crossover read off the predictions, off the measurements and off the truth."""
    out = {}
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        x = {side: crossover(label, [(r["concurrency"], r[side], r.get(f"{side}_low"), r.get(f"{side}_high")) for r in mine], margin)
             for side in ("predicted", "measured", "truth")}
        out[label] = {side: v.model_dump(mode="json") for side, v in x.items()}
        out[label]["equal"] = (x["predicted"].status, x["predicted"].between) == (x["measured"].status, x["measured"].between)
    return out


def recommend_predicted(preds: Sequence[CellPrediction], configs: dict[str, dict[str, Any] | None],
                        concurrencies: Sequence[int], margin: float) -> Recommendation:
    """``recommend`` from predictions alone (what ``specgauge recommend --cost-profile`` does)."""
    opts, notes = options_from_predictions(preds)
    for o in opts:
        o.speculative_config = configs.get(o.label)
    return recommend(opts, sorted(concurrencies), source="prediction", source_name="cost_profile.json", notes=notes,
                     settings=RecommendSettings(min_speedup=margin))


def run_gpu_check(out: Path, *, curve: Path, scale: float = 2.0, num_prompts: int = 128, max_tokens: int = 32,
                  calibrate_prompts: int = 8, methods: tuple[str, ...] = ("ngram", "suffix", "draft_model"),
                  validate: dict[str, int] | None = None, concurrencies: tuple[int, ...] = (8, 32, 64),
                  predict_k: int = 8, costs: GpuServerCosts | None = None, bootstrap: int = 100,
                  straight_line: bool = False, margin: float = MARGIN, virtual: bool = False, log: Log = print) -> GpuRun:
    """The whole check (see the module docstring); ``virtual``: on a virtual clock (``GpuSetup.virtual``)."""
    s = make_setup(out, curve=curve, costs=costs or GpuServerCosts(scale=scale), num_prompts=num_prompts, max_tokens=max_tokens,
                   concurrencies=concurrencies, margin=margin, virtual=virtual)
    wl = s.workload
    t0 = time.monotonic()
    cal = calibrate_gpu(s, methods, predict_k, calibrate_prompts, bootstrap, log)
    prof = cal.profile
    timings = {"calibration_s": time.monotonic() - t0}
    log(f"calibration took {timings['calibration_s']:.0f} s; shape {prof.shape}")
    log("params (ms): " + ", ".join(f"{k}={v * 1e3:.4g}" if k != "knee" else f"knee={v:.0f} tokens" for k, v in prof.params.items()))
    for note in prof.notes:
        log("note:", note)
    t1 = time.monotonic()
    validate = validate or {"ngram": 2, "suffix": 2, "draft_model": 4}
    configs: dict[str, dict[str, Any] | None] = {"off": None}
    for m in methods:
        spec = grid_method(s.method_text(m), validate[m])
        configs[config_label(spec)] = spec
    grid = sweep_gpu(s, configs, log=log)
    spec_cells = [CellSpec(label=lb, speculative_config=sp, concurrency=c) for lb, sp in configs.items() if sp for c in s.concurrencies]
    preds = predict_cells(prof, [wl], spec_cells, num_prompts=num_prompts, reused_server=True, replay=s.replay)
    timings["sweep_s"] = time.monotonic() - t1
    log(f"sweep took {timings['sweep_s']:.0f} s")
    line = None
    if straight_line:  # the same runs, the law without the GPU terms
        from specgauge.predict import fit_profile

        lp = fit_profile([Path(d) for d in cal.run_dirs], workload=[wl], bootstrap=0, gpu_terms=False, replay=s.replay)
        line = predict_cells(lp, [wl], spec_cells, num_prompts=num_prompts, reused_server=True, replay=s.replay)
    # the truth's HTTP round trip: the virtual client's own, or over real HTTP the fitted one
    from specgauge.testing.virtual_bench import ELL

    rows = measured_rows(s, grid, spec_cells, preds, line, ELL if s.virtual else float(prof.params.get("ell", 0.0)))
    rec = recommend_predicted(preds, configs, s.concurrencies, margin)
    curves = speedup_curves(preds, {(r["label"], r["concurrency"]): (r["measured"], r["measured_low"], r["measured_high"])
                                    for r in rows}, margin, rec.schedule)
    return GpuRun(setup=s, profile=prof, calibration_checks=[c.model_dump() for c in cal.checks], configs=configs, sweep=grid,
                  predictions=preds, cells=rows, crossovers=crossovers(rows, margin), recommendation=rec, curves=curves,
                  timings=timings)


# ---------------------------------------------------------------------------- the schedule, per band


@dataclass
class BandCheck:
    """One band: the k recommended from the calibration alone against what the sweep measured there."""

    concurrency: int
    batch_range: list[int]
    recommended: str  #: a label, or "off"
    measured_best: str  #: the label ``choose`` picks from the measured CIs, or "off"
    acceptable: list[str]  #: measured labels that cannot be told from the best (CIs overlap) and clear the margin
    ok: bool
    measured: dict[str, tuple[float | None, float | None, float | None]]  #: label -> (estimate, low, high)


@dataclass
class ScheduleCheck:
    family: str
    predicted: Recommendation  #: from the calibration alone
    measured: Recommendation  #: the same rule on the sweep's CIs
    bands: list[BandCheck]
    curves: SpeedupCurves
    sweep_dir: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(b.ok for b in self.bands)

    def summary(self) -> dict[str, Any]:
        return {"family": self.family, "predicted": self.predicted.model_dump(mode="json"),
                "measured": self.measured.model_dump(mode="json"), "bands": [b.__dict__ for b in self.bands],
                "curves": self.curves.model_dump(mode="json"), "timings": self.timings, "ok": self.ok}


def _band_checks(pred: Recommendation, meas: Recommendation, opts: Sequence[Option]) -> list[BandCheck]:
    """Per band: is the recommended choice the measured best, or one the measurement cannot tell from it?"""
    out = []
    for pb, mb in zip(pred.method_bands or pred.bands, meas.method_bands or meas.bands, strict=True):
        here = [o for o in opts if o.concurrency == mb.concurrency]
        clear = [o for o in here if o.low is not None and o.low > meas.min_speedup]
        acceptable: list[str] = []
        if clear:  # the leader and every clearing option whose CI reaches its CI
            best = max(clear, key=lambda o: o.estimate or 0.0)
            acceptable = sorted(o.label for o in clear if o.high is not None and best.low is not None and o.high >= best.low)
        out.append(BandCheck(concurrency=mb.concurrency, batch_range=list(mb.batch_range), recommended=pb.choice,
                             measured_best=mb.choice, acceptable=acceptable,
                             ok=pb.choice in acceptable if clear else pb.choice == "off",
                             measured={o.label: (o.estimate, o.low, o.high) for o in here}))
    return out


def run_schedule_check(run: GpuRun, family: str = "ngram", ks: Sequence[int] = (1, 2, 4, 8), log: Log = print) -> ScheduleCheck:
    """``recommend`` for one method family at ``ks`` from the calibration alone, then the sweep of those
    cells (added to ``run``'s sweep; the ones it has are reused) and the same rule on the measured CIs."""
    s = run.setup
    t0 = time.monotonic()
    configs = {config_label(sp): sp for sp in (grid_method(s.method_text(family), k) for k in ks)}
    cells = [CellSpec(label=lb, speculative_config=sp, concurrency=c) for lb, sp in configs.items() for c in s.concurrencies]
    preds = predict_cells(run.profile, [s.workload], cells, num_prompts=s.num_prompts, reused_server=True, replay=s.replay)
    pred = recommend_predicted(preds, configs, s.concurrencies, s.margin)
    log(f"recommend ({family}, k {', '.join(map(str, ks))}, from the calibration alone): {pred.headline}")
    new = {lb: sp for lb, sp in configs.items() if lb not in run.configs}
    grid = sweep_gpu(s, new, resume=run.sweep if s.virtual else True, log=log) if new else run.sweep
    opts: list[Option] = []
    for cell in cells:
        m, lo, hi = measure_cell(grid.cell_dir("off", cell.concurrency), grid.cell_dir(cell.label, cell.concurrency))
        method, k, _ = resolve_spec(cell.speculative_config)
        opts.append(Option(label=cell.label, method=method, k=k, concurrency=cell.concurrency, estimate=m, low=lo, high=hi,
                           speculative_config=cell.speculative_config))
    meas = recommend(opts, sorted(s.concurrencies), source="sweep", source_name=grid.out_dir.name,
                     settings=RecommendSettings(min_speedup=s.margin))
    curves = speedup_curves(preds, {(o.label, o.concurrency): (o.estimate, o.low, o.high) for o in opts}, s.margin, pred.schedule)
    return ScheduleCheck(family=family, predicted=pred, measured=meas, bands=_band_checks(pred, meas, opts), curves=curves,
                         sweep_dir=grid.out_dir, timings={"schedule_s": time.monotonic() - t0})
