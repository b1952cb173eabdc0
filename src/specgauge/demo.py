"""``specgauge demo``: the whole job on the embedded default, on a CPU, no GPU and no server needed.

1. profile the built-in sample workload (with the shipped target's logged responses);
2. replay n-gram, suffix, draft-model and EAGLE-3 acceptance offline on every request (exact: logged
   token ids; the shipped EAGLE-3 head on the shipped target, with its teacher-forced figure beside it),
   k = 1..8, and say which suffix backend ran;
3. calibrate: short live runs of the embedded server (no speculation and one config per method, at
   concurrency 1 and the demo's) fit this machine's step-cost law (``specgauge calibrate``);
4. predict every (method, k) at the demo's concurrency from the replay and that law, with a band,
   and pick the candidate — or say that nothing is predicted to pay here, and why;
5. the live A/B: the embedded server without and with the candidate, on the same requests;
6. compare (paired speedup with CI, latency, output equivalence, verdict), then the prediction beside
   the measurement: they agree within 10 % or the demo says plainly that they did not, and why;
7. one self-contained HTML report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console

from specgauge.config import MIN_SPEEDUP
from specgauge.errors import UserError
from specgauge.i18n import en, t, translate

#: prediction and measurement "agree" when they are this close (the issue's demo criterion)
AGREEMENT = 0.10


class DemoError(UserError):
    pass


class DemoConfig(BaseModel):
    out_dir: Path = Path("specgauge-demo")
    num_prompts: int = Field(default=120, ge=4, description="requests per live A/B run")
    max_concurrency: int = Field(default=4, ge=1)
    ks: list[int] = Field(default_factory=lambda: list(range(1, 9)))
    calibration_prompts: int = Field(default=24, ge=4, description="requests per calibration run")
    min_speedup: float = Field(default=MIN_SPEEDUP, gt=0, description="practical margin, as compare's --min-speedup")
    threads: int = Field(default=1, ge=1, description="torch threads per server process")
    lang: str | None = None  #: en | ko for the report and the console summaries; None: from the locale


class DemoResult(BaseModel):
    out_dir: Path
    report: Path
    verdict: str
    candidate: dict[str, Any]
    predicted: float | None = None
    measured: float | None = None
    agreement: str = ""
    seconds: float


def _save(path: Path, model: BaseModel) -> Path:
    path.write_text(json.dumps(model.model_dump(mode="json"), ensure_ascii=False, indent=1), encoding="utf-8")
    return path


#: the EAGLE-3 head's proposal length in the calibration (one k: its per-position cost; the draft model's
#: two k already give the law a model drafter's fixed part)
HEAD_CALIBRATION_K = 2


def demo_methods() -> list[str]:
    """The demo's candidates as simulate and calibrate name them: n-gram, suffix, the shipped draft model
    and, where the package ships it, the shipped EAGLE-3 head (a hidden-state drafter on the tiny target)."""
    from specgauge.models import draft_dir, eagle3_dir, heads_available

    methods = ["ngram", "suffix", f"draft_model:{draft_dir()}"]
    if heads_available():
        methods.append(f"eagle3:{eagle3_dir()}")
    return methods


def candidate_cells(methods: list[str], ks: list[int], concurrency: int) -> list[Any]:
    """Every (method, k) the replay covered, as prediction cells at ``concurrency`` (labels and configs as
    the calibration's: ``ngram-k2``, ``draft_model-k1``, ``eagle3-k2``)."""
    from specgauge.predict import CellSpec
    from specgauge.sweep.grid import config_label, grid_method

    cells = []
    for m in methods:
        for k in ks:
            spec = grid_method(m, k)
            cells.append(CellSpec(label=config_label(spec), speculative_config=spec, concurrency=concurrency))
    return cells


def choose(preds: list[Any], margin: float) -> tuple[Any, bool]:
    """The cell with the highest predicted speedup, and whether it is predicted to pay (its band's
    low end above the practical margin — the same rule compare applies to a measured CI)."""
    ok = [p for p in preds if p.speedup is not None]
    if not ok:
        raise DemoError("the calibrated prediction produced no figure; nothing to choose")
    best = max(ok, key=lambda p: p.speedup)
    low = best.speedup_low if best.speedup_low is not None else best.speedup
    return best, low > margin


def agreement(predicted: float | None, measured: float | None, low: float | None, high: float | None) -> tuple[bool, str]:
    """Plain words on predicted vs measured: within ``AGREEMENT``, or inside the measured CI, or not."""

    if predicted is None or measured is None:
        return False, t("demo.agree.none")
    err = predicted / measured - 1
    words = {"p": f"{predicted:.2f}x", "m": f"{measured:.2f}x", "e": f"{err:+.1%}", "tol": f"{AGREEMENT:.0%}"}
    if abs(err) <= AGREEMENT:
        return True, t("demo.agree.within", **words)
    if low is not None and high is not None and low <= predicted <= high:
        return True, t("demo.agree.inside_ci", lo=f"{low:.2f}", hi=f"{high:.2f}x", **words)
    return False, t("demo.agree.not", **words)


def disagreement_reasons(pred: Any, cmp: Any, summary: dict[str, Any]) -> list[str]:
    """Where a gap between prediction and measurement can come from, with this run's evidence."""
    out = []
    acc_live = ((summary.get("specgauge") or {}).get("acceptance") or {}).get("counters", {}).get("acceptance_rate")
    if pred.acceptance_rate is not None and isinstance(acc_live, (int, float)):
        gap = acc_live - pred.acceptance_rate
        same = t("demo.c.matches") if abs(gap) < 0.01 else t("demo.c.gap", gap=f"{gap:+.1%}")
        out.append(t("demo.c.acceptance", rep=f"{pred.acceptance_rate:.1%}", live=f"{acc_live:.1%}", same=same))
    if pred.extrapolated:
        out.append(t("demo.c.extrapolated"))
    s = cmp.overall.speedup
    if s.low is not None and s.high is not None:
        out.append(t("demo.c.noise", lo=f"{s.low:.2f}", hi=f"{s.high:.2f}"))
    out.extend(translate(n) for n in pred.notes[:3])
    return out


def run_demo(cfg: DemoConfig, console: Console, err: Console | None = None) -> DemoResult:
    from specgauge.i18n import check_lang, use_lang

    with use_lang(check_lang(cfg.lang)):
        return _run_demo(cfg, console, err)


class _Run:
    """One demo run's place and console: its output directory, the logged sample, the step header."""

    def __init__(self, cfg: DemoConfig, console: Console, err: Console | None) -> None:
        from specgauge.models import available
        from specgauge.workload.samples import sample_logged_path

        self.cfg, self.console, self.err = cfg, console, err or console
        self.t_start = time.monotonic()
        if not available():
            raise DemoError("the shipped tiny models are missing from the package (specgauge/models); reinstall specgauge")
        self.logged = sample_logged_path()
        if not self.logged.is_file():
            raise DemoError(f"{self.logged} is missing; run scripts/make_sample_logs.py")
        self.out = cfg.out_dir.resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        for old in ("bench-baseline", "bench-speculative"):
            if (self.out / old / "results.jsonl").exists():
                raise DemoError(f"{self.out / old} already holds a run; pass another --out-dir or remove it")
        self.conc = cfg.max_concurrency
        self.methods = demo_methods()

    def step(self, n: int, text: str) -> None:
        self.console.rule(f"[bold]{n}/7[/bold] {text}  [dim]({time.monotonic() - self.t_start:.0f} s)[/dim]")


def _run_demo(cfg: DemoConfig, console: Console, err: Console | None = None) -> DemoResult:

    run = _Run(cfg, console, err)
    _profile_and_replay(run)
    cal = _calibrate(run)
    best, spec, pays = _predict(run, cal)
    runs = _live_ab(run, spec)
    cmp, line = _compare(run, best, runs, pays)
    report = _report(run, runs)
    secs = time.monotonic() - run.t_start
    console.rule(t("demo.done", s=f"{secs:.0f}"))
    console.print(f"{t('demo.report', path=f'[bold]{report}[/bold]')}\n{t('demo.results', path=run.out)}", highlight=False)
    return DemoResult(out_dir=run.out, report=report, verdict=cmp.verdict.overall.verdict.value, candidate=spec,
                      predicted=best.speedup, measured=cmp.overall.speedup.estimate, agreement=line, seconds=secs)


def _profile_and_replay(run: _Run) -> None:
    """Steps 1-2: the sample's profile; every candidate replayed offline at every k (exact: logged ids)."""
    import torch

    from specgauge.api import profile, resolve_tokenizer
    from specgauge.drafters.suffix.native import resolve_backend
    from specgauge.report.console import render_profile, render_simulation
    from specgauge.simulate.run import SimulateConfig, simulate
    from specgauge.workload.loaders import LoadOptions

    cfg, out = run.cfg, run.out
    run.step(1, t("demo.step.profile"))
    prof, _ = profile([run.logged], LoadOptions(), None)
    _save(out / "profile.json", prof)
    render_profile(prof, run.console)
    backend = resolve_backend("auto")
    run.step(2, t("demo.step.replay", backend=backend, ks=",".join(map(str, cfg.ks))))
    torch.set_num_threads(cfg.threads)
    sim = simulate(SimulateConfig(workload=[run.logged], methods=run.methods, ks=cfg.ks, batch_sizes=[1, run.conc]),
                   resolve_tokenizer(None), on_request=_ticker(run.err, "demo.tick.replayed"))
    sim = sim.model_copy(update={"notes": [*sim.notes, en("demo.n.backend", backend=backend)]})
    _save(out / "simulate.json", sim)
    render_simulation(sim, run.console)
    run.console.print(t("demo.uncalibrated"), highlight=False)


def _calibrate(run: _Run) -> Any:
    """Step 3: this machine's step-cost law from short live runs of the embedded server."""
    from specgauge.calibrate import DEFAULT_KS, CalibrateConfig, run_calibration
    from specgauge.report.predict_console import render_calibration
    from specgauge.sweep import ServerTarget

    cfg, cs = run.cfg, sorted({1, run.conc})
    run.step(3, t("demo.step.calibrate", cs=",".join(map(str, cs))))
    cal = run_calibration(CalibrateConfig(workload=[run.logged], out_dir=run.out / "calibration", methods=run.methods,
                                          ks={**DEFAULT_KS, "eagle3": HEAD_CALIBRATION_K}, concurrencies=cs,
                                          num_prompts=cfg.calibration_prompts,
                                          target=ServerTarget.embedded(threads=cfg.threads)), console=run.err, tokenizer=None)
    render_calibration(cal, run.console)
    return cal


def _predict(run: _Run, cal: Any) -> tuple[Any, dict[str, Any], bool]:
    """Step 4: every (method, k) predicted at the demo's concurrency; the candidate (its prediction, its
    config, whether it is predicted to pay), or why nothing pays."""
    from specgauge.predict import predict_cells
    from specgauge.report.predict_console import render_predictions

    cfg, conc, console = run.cfg, run.conc, run.console
    run.step(4, t("demo.step.predict", c=conc))
    cells = candidate_cells(run.methods, cfg.ks, conc)
    preds = predict_cells(cal.profile, [run.logged], cells, num_prompts=cfg.num_prompts, max_batch=conc)
    (run.out / "predictions.json").write_text(json.dumps([p.model_dump(mode="json") for p in preds], indent=1), encoding="utf-8")
    render_predictions(cal.profile, preds, console)
    best, pays = choose(preds, cfg.min_speedup)
    spec = dict(next(c.speculative_config for c in cells if c.label == best.label) or {})
    band = t("demo.band", lo=f"{best.speedup_low:.2f}", hi=f"{best.speedup_high:.2f}x") if best.speedup_low is not None else "–"
    if pays:
        console.print(t("demo.candidate", label=f"[bold]{best.label}[/bold]", x=f"{best.speedup:.2f}x", c=conc, band=band))
    else:
        console.print("[bold yellow]" + t("demo.nothing_pays", label=best.label, x=f"{best.speedup:.2f}x", band=band,
                                          m=f"{cfg.min_speedup:.2f}x") + "[/bold yellow]")
        for why in _why_not(cal.profile, best):
            console.print("  " + t("demo.why", text=why), highlight=False, markup=False)
        console.print(t("demo.ab_anyway", label=best.label))
    return best, spec, pays


def _live_ab(run: _Run, spec: dict[str, Any]) -> dict[str, Path]:
    """Step 5: the embedded server without and with the candidate, on the same requests."""
    from specgauge.bench import BenchConfig, run_bench
    from specgauge.models import target_dir
    from specgauge.report.bench_console import format_summary
    from specgauge.servers import embedded_server

    cfg, conc, out = run.cfg, run.conc, run.out
    runs = {}
    for name, sc in (("bench-baseline", None), ("bench-speculative", spec)):
        run.step(5, t("demo.step.bench_spec", spec=json.dumps(sc), n=cfg.num_prompts, c=conc) if sc
                 else t("demo.step.bench_base", n=cfg.num_prompts, c=conc))
        with embedded_server(target_dir(), out / f"{name}.server.log", sc, max_batch=conc, threads=cfg.threads) as srv:
            res = run_bench(BenchConfig(base_url=srv.base_url, workload=[run.logged], output_dir=out / name,
                                        max_concurrency=conc, num_prompts=cfg.num_prompts, seed=0,
                                        timeout=300, progress=True), console=run.err)
        run.console.print(format_summary(res.summary), highlight=False, markup=False)
        runs[name] = out / name
    return runs


def _compare(run: _Run, best: Any, runs: dict[str, Path], pays: bool) -> tuple[Any, str]:
    """Step 6: compare's verdict, then the prediction beside the measurement (and why they differ)."""
    from specgauge.report.decide_console import render_comparison
    from specgauge.report.runs import CompareRequest, compare_paths
    from specgauge.stats.verdict import VerdictCriteria

    cfg, conc, out, console = run.cfg, run.conc, run.out, run.console
    run.step(6, t("demo.step.compare"))
    cmp = compare_paths(CompareRequest(baseline=runs["bench-baseline"], candidate=runs["bench-speculative"],
                                       criteria=VerdictCriteria(min_speedup=cfg.min_speedup)))
    _save(out / "compare.json", cmp)
    render_comparison(cmp, console)
    s = cmp.overall.speedup
    agree, line = agreement(best.speedup, s.estimate, s.low, s.high)
    console.print(t("demo.pred_vs_meas", label=best.label, c=conc, line=line), highlight=False, markup=False)
    if not agree:
        summary = json.loads((runs["bench-speculative"] / "summary.json").read_text(encoding="utf-8"))
        for why in disagreement_reasons(best, cmp, summary):
            console.print("  " + t("demo.cause", text=why), highlight=False, markup=False)
    (out / "prediction_check.json").write_text(json.dumps({
        "candidate": best.label, "concurrency": conc, "predicted": best.speedup, "predicted_low": best.speedup_low,
        "predicted_high": best.speedup_high, "measured": s.estimate, "measured_low": s.low, "measured_high": s.high,
        "agree": agree, "summary": line, "predicted_to_pay": pays}, indent=1), encoding="utf-8")
    return cmp, line


def _report(run: _Run, runs: dict[str, Path]) -> Path:
    """Step 7: one self-contained HTML report of everything above."""
    from specgauge.i18n import get_lang, t
    from specgauge.report.html import ReportConfig, write_report

    run.step(7, t("demo.step.report"))
    out = run.out
    report = out / "report.html"
    write_report(ReportConfig(inputs=[out / "profile.json", out / "simulate.json", runs["bench-baseline"],
                                      runs["bench-speculative"], out / "compare.json"], out=report,
                              title=t("demo.title"), lang=get_lang()))
    return report


def _why_not(profile: Any, best: Any) -> list[str]:
    """The fitted law's own figures that keep speculation from paying here."""
    p = profile.params
    out = []
    if best.tokens_per_forward is not None:
        out.append(t("demo.w.tokens", tpf=f"{best.tokens_per_forward:.1f}", mal=f"{best.mean_acceptance_length or float('nan'):.2f}"))
    from specgauge.predict.law import KNEE

    # costs in ms; the knee is a position (tokens per forward), not a cost: it was printed ×1000 as one
    names = ", ".join(f"{k}={1000 * v:.3g}" for k, v in sorted(p.items()) if v > 0 and k != KNEE)
    out.append(t("demo.w.law", names=names))
    return out


def _ticker(console: Console, what: str, first_s: float = 2.0) -> Callable[[int], None]:
    """A progress line ``what`` (n so far) after ``first_s`` seconds, then each time the wait has doubled
    (2, 4, 8, 16 … s): a few lines however long the replay, in a log file as on a terminal (a line every
    2 s wrote dozens of "replayed N requests" lines into a non-terminal log)."""
    t0 = time.monotonic()
    due = [first_s]

    def tick(n: int) -> None:
        waited = time.monotonic() - t0
        if waited >= due[0]:
            while due[0] <= waited:
                due[0] *= 2
            console.print(t(what, n=n), highlight=False)

    return tick
