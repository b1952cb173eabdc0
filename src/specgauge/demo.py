"""``specgauge demo``: the whole job on the embedded default, on a CPU, no GPU and no server needed.

1. profile the built-in sample workload (with the shipped target's logged responses);
2. measure the embedded engine's cost profile, then replay n-gram, suffix and draft-model acceptance
   offline (exact: logged token ids), k = 1..8, and predict the speedup of each;
3. start the embedded server without speculation and bench it;
4. start it again with the best (method, k) of step 2 and bench it on the same requests;
5. compare the two runs: paired speedup and latency deltas with CIs, output equivalence, verdict;
6. write one self-contained HTML report, and print where everything is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console

from specgauge.errors import UserError


class DemoError(UserError):
    pass


class DemoConfig(BaseModel):
    out_dir: Path = Path("specgauge-demo")
    num_prompts: int = Field(default=120, ge=4, description="requests per live run")
    max_concurrency: int = Field(default=4, ge=1)
    ks: list[int] = Field(default_factory=lambda: list(range(1, 9)))
    #: suffix replay is pure Python (~1k positions/s): the demo replays it on this many requests
    suffix_requests: int = Field(default=60, ge=0)
    threads: int = Field(default=1, ge=1, description="torch threads per server process")
    lang: str | None = None  #: en | ko for the report and the console summaries; None: from the locale


class DemoResult(BaseModel):
    out_dir: Path
    report: Path
    verdict: str
    candidate: dict[str, Any]
    seconds: float


def _save(path: Path, model: BaseModel) -> Path:
    path.write_text(json.dumps(model.model_dump(mode="json"), ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def choose_candidate(sim: Any, batch: int) -> tuple[dict[str, Any], str]:
    """The (method, k) with the highest predicted speedup at ``batch`` over all requests."""
    best: tuple[float, str, int] | None = None
    for p in sim.overall.predictions:
        if p.batch == batch and p.predicted_speedup is not None and (best is None or p.predicted_speedup > best[0]):
            best = (p.predicted_speedup, p.method, p.k)
    if best is None:
        raise DemoError("the offline replay produced no prediction; nothing to choose")
    speed, method, k = best
    from specgauge.models import draft_dir

    if method.startswith("draft_model"):
        spec: dict[str, Any] = {"model": str(draft_dir()), "num_speculative_tokens": k}
    else:
        spec = {"method": method, "num_speculative_tokens": k}
        if method == "ngram":
            spec.update(prompt_lookup_min=2, prompt_lookup_max=5)
    return spec, f"{method} k={k} (predicted {speed:.2f}x at concurrency {batch})"


def run_demo(cfg: DemoConfig, console: Console, err: Console | None = None) -> DemoResult:
    from specgauge.i18n import check_lang, use_lang

    with use_lang(check_lang(cfg.lang)):
        return _run_demo(cfg, console, err)


def _run_demo(cfg: DemoConfig, console: Console, err: Console | None = None) -> DemoResult:
    from specgauge.api import profile, resolve_tokenizer
    from specgauge.bench import BenchConfig, format_summary, run_bench
    from specgauge.i18n import get_lang, t
    from specgauge.models import available, draft_dir, target_dir
    from specgauge.report.console import render_profile, render_simulation
    from specgauge.report.html import ReportConfig, write_report
    from specgauge.report.runs import CompareRequest, compare_paths
    from specgauge.servers import embedded_server
    from specgauge.simulate.run import SimulateConfig, SimulateResult, simulate
    from specgauge.workload.loaders import LoadOptions
    from specgauge.workload.samples import sample_logged_path

    err = err or console
    t_start = time.monotonic()
    if not available():
        raise DemoError("the shipped tiny models are missing from the package (specgauge/models); reinstall specgauge")
    logged = sample_logged_path()
    if not logged.is_file():
        raise DemoError(f"{logged} is missing; run scripts/make_sample_logs.py")
    out = cfg.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in ("bench-baseline", "bench-speculative"):
        if (out / old / "results.jsonl").exists():
            raise DemoError(f"{out / old} already holds a run; pass another --out-dir or remove it")

    def step(n: int, text: str) -> None:
        console.rule(f"[bold]{n}/6[/bold] {text}  [dim]({time.monotonic() - t_start:.0f} s)[/dim]")

    step(1, t("demo.step.profile"))
    prof, _ = profile([logged], LoadOptions(), None)
    _save(out / "profile.json", prof)
    render_profile(prof, console)

    step(2, t("demo.step.replay", ks=",".join(map(str, cfg.ks))))
    import torch

    from specgauge.simulate.calibrate import calibrate_engine, save

    torch.set_num_threads(cfg.threads)
    batches = sorted({1, cfg.max_concurrency})
    costs = save(calibrate_engine(target_dir(), draft_dir(), batch_sizes=batches), out / "cost_profile.json")
    console.print(f"cost profile measured on this machine's embedded engine: {costs.read_text()}", highlight=False)
    tok = resolve_tokenizer(None)
    main = simulate(SimulateConfig(workload=[logged], methods=["ngram", f"draft_model:{draft_dir()}"], ks=cfg.ks,
                                   batch_sizes=batches, cost_profile=costs), tok, on_request=_ticker(err, "replayed"))
    if cfg.suffix_requests:
        suf = simulate(SimulateConfig(workload=[logged], methods=["suffix"], ks=cfg.ks, batch_sizes=batches, cost_profile=costs,
                                      load=LoadOptions(limit=cfg.suffix_requests)), tok, on_request=_ticker(err, "suffix replayed"))
        main = _merge(main, suf)
    _save(out / "simulate.json", main)
    render_simulation(main, console)

    spec, why = choose_candidate(main, cfg.max_concurrency)
    console.print(f"candidate for the live A/B: [bold]{why}[/bold]")
    console.print("[dim]the prediction uses the cost profile measured above (target forward over k+1 tokens vs 1, "
                  "draft step vs target step); per-step host overhead is not measured, and the report sets predicted "
                  "against measured[/dim]")
    runs = {}
    for n, (name, sc) in enumerate((("bench-baseline", None), ("bench-speculative", spec)), start=3):
        step(n, t("demo.step.bench_spec", spec=json.dumps(sc), n=cfg.num_prompts, c=cfg.max_concurrency) if sc
             else t("demo.step.bench_base", n=cfg.num_prompts, c=cfg.max_concurrency))
        with embedded_server(target_dir(), out / f"{name}.server.log", sc, max_batch=max(cfg.max_concurrency, 1), threads=cfg.threads) as srv:
            res = run_bench(BenchConfig(base_url=srv.base_url, workload=[logged], output_dir=out / name,
                                        max_concurrency=cfg.max_concurrency, num_prompts=cfg.num_prompts, seed=0,
                                        timeout=300, progress=True), console=err)
        console.print(format_summary(res.summary), highlight=False, markup=False)
        runs[name] = out / name

    step(5, t("demo.step.compare"))
    cmp = compare_paths(CompareRequest(baseline=runs["bench-baseline"], candidate=runs["bench-speculative"]))
    _save(out / "compare.json", cmp)
    from specgauge.report.decide_console import render_comparison

    render_comparison(cmp, console)

    step(6, t("demo.step.report"))
    report = out / "report.html"
    write_report(ReportConfig(inputs=[out / "profile.json", out / "simulate.json", runs["bench-baseline"],
                                      runs["bench-speculative"], out / "compare.json"], out=report,
                              title=t("demo.title"), lang=get_lang()))
    secs = time.monotonic() - t_start
    verdict = cmp.verdict.overall.verdict.value
    console.rule(t("demo.done", s=f"{secs:.0f}"))
    console.print(f"{t('demo.report', path=f'[bold]{report}[/bold]')}\n{t('demo.results', path=out)}", highlight=False)
    return DemoResult(out_dir=out, report=report, verdict=verdict, candidate=spec, seconds=secs)


def _ticker(console: Console, what: str) -> Callable[[int], None]:
    last = [0.0]

    def tick(n: int) -> None:
        now = time.monotonic()
        if now - last[0] > 2:
            last[0] = now
            console.print(f"  {what} {n} requests", highlight=False)

    return tick


def _merge(a: Any, b: Any) -> Any:
    """One SimulateResult from two over the same workload (methods side by side)."""
    from specgauge.simulate.run import SegmentResult

    def seg(x: SegmentResult | None, y: SegmentResult | None) -> SegmentResult:
        xs = x or SegmentResult(summaries=[], predictions=[], best_k={})
        ys = y or SegmentResult(summaries=[], predictions=[], best_k={})
        return SegmentResult(summaries=xs.summaries + ys.summaries, predictions=xs.predictions + ys.predictions,
                             best_k={**xs.best_k, **ys.best_k})

    notes = list(a.notes) + [f"suffix replayed on the first {b.requests_replayed} requests only (pure-Python replay)"] + list(b.notes)
    return a.model_copy(update={
        "methods": a.methods + b.methods,
        "overall": seg(a.overall, b.overall),
        "segments": {s: seg(a.segments.get(s), b.segments.get(s)) for s in sorted(set(a.segments) | set(b.segments))},
        "notes": notes,
    })
