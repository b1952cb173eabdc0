"""``specgauge calibrate``: fit a server's step-cost law, from existing bench runs or from a short live grid.

Live: a baseline and one speculative config per method (n-gram, suffix, a draft model), each at two
or three concurrencies, few prompts each, benched by the sweep's grid runner
(``specgauge.sweep.run_grid``: one server per config — the embedded engine, a command template or
running URLs). Then ``fit_profile`` on the run directories, and predicted beside measured for the
calibration cells themselves (an in-sample check: a law that cannot even reproduce its own runs
says so here). Writes ``cost_profile.json`` into the output directory.

Boundary: orchestration beside ``bench`` and ``demo`` — it runs servers through ``specgauge.sweep``
and fits with ``specgauge.predict``; ``predict`` itself only reads run directories, so neither of
those packages imports the other's side back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from specgauge.calibrate_points import ProposedPoint, default_forward, family, plan_synthetic, propose_points, requests_at
from specgauge.predict.fit import expand_run_dirs, fit_profile, synthetic_rates
from specgauge.predict.runs import load_run, write_cell
from specgauge.predict.predict import predict_cells
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellPrediction, CellSpec, ProfileError

PROFILE_FILE = "cost_profile.json"
#: a draft model at two k: one k cannot tell its cost per drafting step from its cost per draft position
#: (benchmarks/predict.py: k=1 then predicted 10-14 % too fast; with k=2 and 4, 30 of 30 cells within 20 %)
DEFAULT_KS: dict[str, int | list[int]] = {"ngram": 4, "suffix": 4, "draft_model": [2, 4]}


class CalibrateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    workload: list[Path] = Field(min_length=1)
    out_dir: Path = Path("specgauge-calibration")
    #: fit these existing bench/sweep directories instead of running anything
    from_runs: list[Path] = Field(default_factory=list)
    #: ``ngram``, ``suffix``, ``draft_model:DIR`` (``draft_model`` alone: the shipped draft on the embedded engine)
    methods: list[str] = Field(default_factory=lambda: ["ngram", "suffix", "draft_model"])
    #: proposal length(s) per method; a draft model measured at two k also gets its k-independent cost
    ks: dict[str, int | list[int]] = Field(default_factory=lambda: copy.deepcopy(DEFAULT_KS))
    concurrencies: list[int] = Field(default_factory=lambda: [1, 4], min_length=1)
    num_prompts: int | None = Field(default=32, ge=1)
    shape: str = "auto"
    bootstrap: int = Field(default=200, ge=0)
    seed: int = 0
    warmup: int = Field(default=1, ge=0)
    resume: bool = False
    time_budget_s: float | None = Field(default=None, gt=0)
    target: Any = None  #: a ``specgauge.sweep.ServerTarget`` (None: the embedded engine)
    #: > 0: measure paired (``specgauge.sweep.paired``: a baseline server kept up beside each candidate,
    #: this many baseline/candidate pairs per cell, back to back), so the machine's drift falls on both
    #: sides; 0: one server per config in turn (``run_grid``)
    paired_repeats: int = Field(default=0, ge=0)
    #: plan the runs to cover these client concurrencies (``plan_calibration``; replaces ``concurrencies``):
    #: a GPU's step cost has a knee, and a law fitted where every step sits on the plateau cannot see it
    predict_concurrency: list[int] | None = None
    #: the largest proposal length to be predicted (default: the largest in ``ks``): run at the largest
    #: concurrency so that tokens per forward reach past the largest predicted cell
    predict_k: int | None = Field(default=None, ge=1)
    #: synthetic acceptance (vLLM >= 0.20, the scripted test server): besides the plain runs, one run per
    #: method and calibration concurrency whose server accepts drafts at this mean acceptance length, at a k
    #: whose forward reaches ``synthetic_forward`` tokens (``calibrate_points.plan_synthetic``)
    synthetic_acceptance: float | None = Field(default=None, ge=1.0)
    #: tokens per forward the synthetic runs reach (default: 1.25 × the largest asked concurrency × (1 + k))
    synthetic_forward: int | None = Field(default=None, ge=2)
    #: concurrencies the profile will be asked about, when the runs are ``concurrencies`` (with
    #: ``predict_concurrency`` the runs are planned for it and it is asked too): each method is predicted
    #: there, and a term of the law the runs could not see is named with the run that identifies it
    ask_concurrency: list[int] | None = None
    #: run those identifying points (one round) and fit again
    identify: bool = False


class CellCheck(BaseModel):
    """Predicted beside measured for one calibration cell (compare's speedup vs the baseline)."""

    label: str
    concurrency: int
    predicted: float | None
    predicted_low: float | None = None
    predicted_high: float | None = None
    measured: float | None = None
    measured_low: float | None = None
    measured_high: float | None = None
    error: float | None = None  #: predicted / measured − 1


class CalibrationResult(BaseModel):
    profile: StepCostProfile
    profile_path: Path
    run_dirs: list[str]
    checks: list[CellCheck]
    #: runs that would identify a term the calibration could not see, at the concurrencies asked about
    proposed: list[ProposedPoint] = Field(default_factory=list)
    #: the points ``identify`` ran (the profile is fitted with them)
    identified: list[ProposedPoint] = Field(default_factory=list)


def calibration_cells(methods: Sequence[str], ks: Mapping[str, int | list[int]], concurrencies: Sequence[int],
                      embedded: bool = True) -> list[CellSpec]:
    """off + one config per method, at each concurrency (labels as the sweep's)."""
    from specgauge.sweep.grid import (
        BASELINE,
        ServerConfig,
        build_configs,
        cells_for,
        config_label,
        grid_method,
    )

    configs = [ServerConfig(label=BASELINE)]
    for m in methods:
        name = m.split(":")[0]
        name = {"draft": "draft_model"}.get(name, name)
        text = m
        if name == "draft_model" and ":" not in m:
            if not embedded:
                raise ProfileError("--method draft_model: name the draft model's directory (draft_model:DIR) for your server")
            from specgauge.models import draft_dir

            text = f"draft_model:{draft_dir()}"
        want = ks.get(name, DEFAULT_KS.get(name, 4))
        for k in sorted(set(want)) if isinstance(want, list) else [want]:
            spec = grid_method(text, k)
            configs.append(ServerConfig(label=config_label(spec), speculative_config=spec))
    return cells_for(build_configs(configs), concurrencies)


def plan_calibration(methods: Sequence[str], ks: Mapping[str, int | list[int]], predict_concurrency: Sequence[int],
                     predict_k: int | None = None, num_prompts: int | None = 32,
                     embedded: bool = True) -> list[tuple[CellSpec, int | None]]:
    """Calibration cells covering the range to be predicted, each with its number of requests.

    With concurrencies lo..hi to predict: the baseline at lo, a geometric middle and hi (baseline runs
    are cheap and pin the forward's cost at every batch size); each method's configured k at the middle
    and hi; and each method at the largest k to be predicted at hi, so that the forward's tokens
    (B·(1 + drafted)) reach past the largest predicted cell. A run at concurrency C sends at least 2·C
    requests (a closed loop reaches batch C and holds it); every run of a stateful drafter's config
    (suffix: its cache remembers earlier runs) sends the same number, so each run's cache state is the
    replay's."""
    from specgauge.drafters.base import is_stateful

    cs = sorted({int(c) for c in predict_concurrency})
    if not cs or cs[0] < 1:
        raise ProfileError("--predict-concurrency: give concurrencies >= 1, e.g. 1-64")
    lo, hi = cs[0], cs[-1]
    mid = 2 ** round((np.log2(lo) + np.log2(hi)) / 2) if hi >= 4 * lo else hi
    base_cs = sorted({lo, mid, hi})
    spec_cs = sorted({mid, hi})
    cells = calibration_cells(methods, ks, [hi], embedded)
    kmax_want = predict_k
    out: list[tuple[CellSpec, int | None]] = []
    seen: set[str] = set()

    def n_for(c: int) -> int | None:
        return requests_at(num_prompts, c) if c > lo else num_prompts

    for cell in cells:
        if cell.speculative_config is None:
            out += [(CellSpec(label=cell.label, speculative_config=None, concurrency=c), n_for(c)) for c in base_cs]
            continue
        seen.add(cell.label)
        out += [(CellSpec(label=cell.label, speculative_config=cell.speculative_config, concurrency=c), n_for(c)) for c in spec_cs]
    by_family: dict[str, tuple[CellSpec, int]] = {}
    for cell, _ in out:
        if cell.speculative_config:
            fam = json.dumps({k: v for k, v in cell.speculative_config.items() if k != "num_speculative_tokens"}, sort_keys=True)
            k = int(cell.speculative_config.get("num_speculative_tokens") or 0)
            if fam not in by_family or k > by_family[fam][1]:
                by_family[fam] = (cell, k)
    for cell, k in by_family.values():
        want = kmax_want or k
        if want > k:
            from specgauge.sweep.grid import config_label

            spec = {**cell.speculative_config, "num_speculative_tokens": want}  # type: ignore[dict-item]
            out.append((CellSpec(label=config_label(spec), speculative_config=spec, concurrency=hi), n_for(hi)))
    # a stateful drafter's runs all send the same requests
    for i, (cell, n) in enumerate(out):
        method = (cell.speculative_config or {}).get("method")
        if method and is_stateful(str(method)) and n is not None:
            out[i] = (cell, max(m for c, m in out if c.label == cell.label and m is not None))
    return out


def measure_cell(baseline_dir: Path, cell_dir: Path, resamples: int = 2000) -> tuple[float | None, float | None, float | None]:
    """compare's paired speedup of a cell against the baseline at the same concurrency: (estimate, low, high)."""
    from specgauge.records import ResultsFile
    from specgauge.stats.compare import CompareConfig, compare_records

    b = ResultsFile(Path(baseline_dir) / "results.jsonl").existing()
    c = ResultsFile(Path(cell_dir) / "results.jsonl").existing()
    overall, _ = compare_records(b, c, CompareConfig(resamples=resamples))
    s = overall.speedup
    return s.estimate, s.low, s.high


def check_cells(profile: StepCostProfile, workload: Sequence[Path], cells: Sequence[CellSpec], dirs: dict[tuple[str, int], Path],
                num_prompts: int | None, tokenizer: Any = None, warmup: int = 0,
                reused_server: bool = True, replay: Any = None) -> tuple[list[CellCheck], list[CellPrediction]]:
    """Predict the speculative cells and measure them against the baseline cell of the same concurrency.
    A stateful drafter's cache state is the one the fit found each run's server in."""
    # a synthetic cell's acceptance was drawn by its server: the replay does not predict it (its cost rows count)
    spec_cells = [c for c in cells if c.speculative_config and not synthetic_rates(c.speculative_config)]
    earlier = {}
    for c in spec_cells:
        d = dirs.get((c.label, c.concurrency))
        for run, chk in profile.replay_checks.items():
            if d is not None and (run == d.name or run == f"{d.parent.name}/{d.name}"):
                earlier[(c.label, c.concurrency)] = int(chk.get("earlier_runs_on_this_server", 0))
    if replay is not None and len(replay.requests) != (num_prompts or len(replay.requests)):
        replay = None  # planned for another number of requests
    preds = predict_cells(profile, workload, spec_cells, tokenizer=tokenizer, num_prompts=num_prompts, warmup=warmup,
                          reused_server=reused_server, earlier_runs=earlier, replay=replay)
    base = {c.concurrency: dirs.get((c.label, c.concurrency)) for c in cells if not c.speculative_config}
    out = []
    for cell, p in zip(spec_cells, preds, strict=True):
        m = lo = hi = None
        d, bd = dirs.get((cell.label, cell.concurrency)), base.get(cell.concurrency)
        if d is not None and bd is not None:
            m, lo, hi = measure_cell(bd, d)
        err = p.speedup / m - 1 if p.speedup is not None and m else None
        out.append(CellCheck(label=cell.label, concurrency=cell.concurrency, predicted=p.speedup, predicted_low=p.speedup_low,
                             predicted_high=p.speedup_high, measured=m, measured_low=lo, measured_high=hi, error=err))
    return out, preds


def run_calibration(cfg: CalibrateConfig, console: Any = None, tokenizer: Any = None, replay: Any = None) -> CalibrationResult:
    """``replay``: a ``predict.replay.WorkloadReplay`` of the workload to share (its traces are cached),
    planned for the largest number of requests a run sends."""
    out = Path(cfg.out_dir)
    if cfg.from_runs:
        from specgauge.bench.foreign import refuse_calibration

        refuse_calibration(cfg.from_runs)  # another tool's result: say what it lacks
        dirs, cell_of = expand_run_dirs(cfg.from_runs)
        profile = fit_profile(cfg.from_runs, workload=cfg.workload, tokenizer=tokenizer, shape=cfg.shape,
                              bootstrap=cfg.bootstrap, seed=cfg.seed, replay=replay)
        cells = []
        keyed: dict[tuple[str, int], Path] = {}
        for d in dirs:
            rd = load_run(d, cell_of.get(str(d)))
            cells.append(rd.cell)
            keyed[(rd.cell.label, rd.cell.concurrency)] = d
        nump = max((int((load_run(d, cell_of.get(str(d))).run.get("config") or {}).get("num_prompts") or 0) for d in dirs),
                   default=0) or None
    elif cfg.paired_repeats:
        return _run_paired_calibration(cfg, tokenizer)
    else:
        from specgauge.sweep import ServerTarget

        target = cfg.target or ServerTarget.embedded()
        planned = plan_live(cfg, target.kind == "embedded")
        keyed, nump_of = _run_planned(planned, target, cfg, out / "runs", console)
        cells = [c for c, _ in planned]
        dirs = list(keyed.values())
        profile = fit_profile(dirs, workload=cfg.workload, tokenizer=tokenizer, shape=cfg.shape,
                              bootstrap=cfg.bootstrap, seed=cfg.seed, replay=replay)
        nump = cfg.num_prompts
    proposed = _proposals(cfg, profile, cells, tokenizer, replay)
    identified: list[ProposedPoint] = []
    if proposed and cfg.identify and not cfg.from_runs:  # one round: run them, fit again with them
        more = [(p.cell(), requests_at(cfg.num_prompts, p.concurrency)) for p in proposed]
        # the baseline beside each (its batch's own step cost, and the point's speedup to check)
        more += [(CellSpec(label="off", speculative_config=None, concurrency=c), requests_at(cfg.num_prompts, c))
                 for c in sorted({p.concurrency for p in proposed}) if ("off", c) not in keyed]
        got_dirs, got_n = _run_planned(more, target, cfg, out / "identify", console)
        keyed.update(got_dirs)
        nump_of.update(got_n)
        cells += [c for c, _ in more]
        dirs = list(keyed.values())
        profile = fit_profile(dirs, workload=cfg.workload, tokenizer=tokenizer, shape=cfg.shape,
                              bootstrap=cfg.bootstrap, seed=cfg.seed)
        identified, proposed = proposed, _proposals(cfg, profile, cells, tokenizer, replay)
    warm = cfg.warmup if not cfg.from_runs else int((load_run(dirs[0]).run.get("config") or {}).get("warmup") or 0)
    if cfg.from_runs or len({nump_of.get(k) for k in keyed}) <= 1:
        checks, _ = check_cells(profile, cfg.workload, cells, keyed, nump, tokenizer, warmup=warm, reused_server=not cfg.from_runs,
                                replay=replay)
    else:  # planned runs: the baseline of each concurrency sent as many requests as the cells beside it
        checks = []
        for n in sorted({v for v in nump_of.values() if v is not None}):
            conc = {c for (lb, c), m in nump_of.items() if m == n}
            sub = [c for c in cells if c.concurrency in conc and nump_of.get((c.label, c.concurrency)) == n]
            got, _ = check_cells(profile, cfg.workload, sub, keyed, n, tokenizer, warmup=warm, reused_server=True,
                                 replay=replay if len(identified) == 0 else None)
            checks += got
    path = profile.save(out / PROFILE_FILE)
    return CalibrationResult(profile=profile, profile_path=path, run_dirs=[str(d) for d in dirs], checks=checks,
                             proposed=proposed, identified=identified)


def plan_live(cfg: CalibrateConfig, embedded: bool) -> list[tuple[CellSpec, int | None]]:
    """The live runs: planned for ``predict_concurrency`` or the plain grid at ``concurrencies``, plus the
    synthetic-acceptance points when asked for (each with its number of requests)."""
    if cfg.predict_concurrency:
        planned = plan_calibration(cfg.methods, cfg.ks, cfg.predict_concurrency, cfg.predict_k, cfg.num_prompts, embedded)
    else:
        planned = [(c, cfg.num_prompts) for c in calibration_cells(cfg.methods, cfg.ks, cfg.concurrencies, embedded=embedded)]
    if cfg.synthetic_acceptance is not None:
        concs = sorted({c.concurrency for c, _ in planned})
        asked = _asked(cfg) or concs
        kmax = cfg.predict_k or max(int((c.speculative_config or {}).get("num_speculative_tokens") or 0) for c, _ in planned)
        forward = cfg.synthetic_forward or default_forward(asked, max(kmax, 1))
        # the largest asked concurrency too (with its baseline): the steps' cost in the batch — attention over
        # the batch's context, flat to batch ~16 on an H200 and growing past it, run k times per step by a draft
        # model — is not read off smaller batches, whatever their tokens per forward (a draft model's k = 8 at
        # 64 calibrated at 4 and 16 only: +6.8 % on a virtual clock, +2.6 % with these points)
        top = max(asked)
        if top not in concs:
            planned.append((CellSpec(label="off", speculative_config=None, concurrency=top), requests_at(cfg.num_prompts, top)))
        planned += plan_synthetic([c for c, _ in planned], sorted({*concs, top}), forward, cfg.synthetic_acceptance, cfg.num_prompts)
    return planned


def _asked(cfg: CalibrateConfig) -> list[int]:
    """The concurrencies the profile will be asked about (empty: none named)."""
    return sorted({*(cfg.ask_concurrency or []), *(cfg.predict_concurrency or [])})


def _run_planned(planned: Sequence[tuple[CellSpec, int | None]], target: Any, cfg: CalibrateConfig, where: Path,
                 console: Any) -> tuple[dict[tuple[str, int], Path], dict[tuple[str, int], int | None]]:
    """Run the planned cells (grouped by their number of requests; one server per config) into ``where``;
    the finished ones' directories (each with its ``cell.json``) and request counts, by (label, concurrency)."""
    from specgauge.sweep import run_grid

    groups: dict[int | None, list[CellSpec]] = {}
    for c, n in planned:
        groups.setdefault(n, []).append(c)
    keyed: dict[tuple[str, int], Path] = {}
    nump_of: dict[tuple[str, int], int | None] = {}
    for n, group in groups.items():
        d_out = where if len(groups) == 1 else where / f"n{n}"
        res = run_grid(group, target, cfg.workload, d_out, num_prompts=n, seed=cfg.seed,
                       time_budget_s=cfg.time_budget_s, resume=cfg.resume, console=console, warmup=cfg.warmup)
        for c in group:
            run = res.manifest.cell(c.label, c.concurrency)
            if run is not None and run.status == "done":
                d = res.cell_dir(c.label, c.concurrency)
                write_cell(d, c)
                keyed[(c.label, c.concurrency)] = d
                nump_of[(c.label, c.concurrency)] = n
    if not keyed:
        raise ProfileError(f"no calibration run finished; see {where}")
    return keyed, nump_of


def _proposals(cfg: CalibrateConfig, profile: StepCostProfile, cells: Sequence[CellSpec], tokenizer: Any,
               replay: Any = None) -> list[ProposedPoint]:
    """Each calibrated method (its largest plain k, or ``predict_k``) predicted at the asked concurrencies;
    the runs that identify the terms those predictions rest on without the calibration having seen them
    (``replay``: the shared one, used where it is planned for as many requests as a run there sends)."""
    asked = _asked(cfg)
    if not asked:
        return []
    by_family: dict[str, dict[str, Any]] = {}
    for c in cells:
        sp = c.speculative_config
        if sp and not synthetic_rates(sp):
            f = family(sp)
            if f not in by_family or int(sp.get("num_speculative_tokens") or 0) > int(by_family[f].get("num_speculative_tokens") or 0):
                by_family[f] = sp
    from specgauge.sweep.grid import config_label

    ask_cells: list[CellSpec] = []
    preds = []
    for c in asked:  # as a run there would send them: at least 2·C requests, so the batch reaches C
        here = []
        for sp in by_family.values():
            spec = {**sp, "num_speculative_tokens": max(cfg.predict_k or 0, int(sp.get("num_speculative_tokens") or 1))}
            here.append(CellSpec(label=config_label(spec), speculative_config=spec, concurrency=c))
        n = requests_at(cfg.num_prompts, c)
        same = replay if replay is not None and n is not None and len(replay.requests) == n else None
        preds += predict_cells(profile, cfg.workload, here, tokenizer=tokenizer, num_prompts=n, replay=same)
        ask_cells += here
    return propose_points(preds, ask_cells, cfg.synthetic_acceptance)


def predict_paired(profile: StepCostProfile, workload: Sequence[Path], cells: Sequence[CellSpec], repeats: int, *,
                   num_prompts: int | None, tokenizer: Any = None, warmup: int = 0) -> list[CellPrediction]:
    """Predictions for cells measured by ``specgauge.sweep.paired.run_paired``: the candidate server served
    every earlier concurrency's repeats of its config first (a stateful drafter remembers them), so each
    repeat is predicted with its own server state. The repeats' figures are combined as compare pools
    them: a ratio of sums of request time over the same requests, i.e. the harmonic mean of the
    repeats' speedups (a repeat at 1.1x and one at 2.2x pool to 1.47x, not 1.65x)."""
    spec_cells = [c for c in cells if c.speculative_config]
    order: dict[str, list[int]] = {}
    for c in spec_cells:
        order.setdefault(c.label, []).append(c.concurrency)
    per_rep = [predict_cells(profile, workload, spec_cells, tokenizer=tokenizer, num_prompts=num_prompts, warmup=warmup,
                             earlier_runs={(c.label, c.concurrency): sorted(order[c.label]).index(c.concurrency) * repeats + r
                                           for c in spec_cells}) for r in range(repeats)]
    out = []
    for preds in zip(*per_rep, strict=True):
        upd = {k: len(preds) / sum(1.0 / getattr(p, k) for p in preds) for k in ("speedup", "speedup_low", "speedup_high")
               if all(getattr(p, k) for p in preds)}
        out.append(preds[0].model_copy(update=upd))
    return out


def _run_paired_calibration(cfg: CalibrateConfig, tokenizer: Any) -> CalibrationResult:
    from specgauge.sweep import ServerTarget
    from specgauge.sweep.paired import paired_speedup, run_paired

    out = Path(cfg.out_dir)
    target = cfg.target or ServerTarget.embedded()
    cells = [c for c in calibration_cells(cfg.methods, cfg.ks, cfg.concurrencies, embedded=target.kind == "embedded")
             if c.speculative_config]
    runs = run_paired(cells, target, cfg.workload, out / "paired", num_prompts=cfg.num_prompts, repeats=cfg.paired_repeats,
                      warmup=cfg.warmup, seed=cfg.seed, resume=cfg.resume)
    dirs: list[Path] = []
    for run in runs:
        write_cell(run.baseline_dir, CellSpec(label="off", speculative_config=None, concurrency=run.concurrency))
        write_cell(run.candidate_dir, CellSpec(label=run.label, speculative_config=run.speculative_config,
                                               concurrency=run.concurrency))
        dirs += [run.baseline_dir, run.candidate_dir]
    profile = fit_profile(dirs, workload=cfg.workload, tokenizer=tokenizer, shape=cfg.shape, bootstrap=cfg.bootstrap,
                          seed=cfg.seed)
    preds = predict_paired(profile, cfg.workload, cells, cfg.paired_repeats, num_prompts=cfg.num_prompts,
                           tokenizer=tokenizer, warmup=cfg.warmup)
    checks = []
    for cell, p in zip(cells, preds, strict=True):
        m, lo, hi, _ = paired_speedup([r for r in runs if r.label == cell.label and r.concurrency == cell.concurrency])
        checks.append(CellCheck(label=cell.label, concurrency=cell.concurrency, predicted=p.speedup, predicted_low=p.speedup_low,
                                predicted_high=p.speedup_high, measured=m, measured_low=lo, measured_high=hi,
                                error=p.speedup / m - 1 if p.speedup is not None and m else None))
    path = profile.save(out / PROFILE_FILE)
    return CalibrationResult(profile=profile, profile_path=path, run_dirs=[str(d) for d in dirs], checks=checks)
