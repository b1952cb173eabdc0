"""``specgauge profile`` and ``specgauge simulate``: workload shape and offline replay (flags -> one library call)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from specgauge.cli.common import (
    FormatOpt,
    JsonOpt,
    LangOpt,
    LimitOpt,
    SegmentOpt,
    SkipOpt,
    TokOpt,
    WorkloadArg,
    console,
    err_console,
    user_errors,
    workload_paths,
)


@user_errors
def profile(
    workload: WorkloadArg = None,
    tokenizer: TokOpt = None,
    format: FormatOpt = None,
    segment_by: SegmentOpt = None,
    skip_invalid: SkipOpt = False,
    limit: LimitOpt = None,
    as_json: JsonOpt = False,
    lang: LangOpt = None,
) -> None:
    """What the workload looks like, per segment: lengths, sampling mix, tools, RAG context, copy overlap, language."""
    from specgauge.api import profile as run_profile
    from specgauge.workload.loaders import LoadOptions

    opts = LoadOptions(format=format, segment_by=segment_by, skip_invalid=skip_invalid, limit=limit)  # type: ignore[arg-type]
    prof, report = run_profile(workload_paths(workload), opts, tokenizer)
    for e in report.errors:
        from specgauge.i18n import t, translate

        err_console.print(f"[yellow]{t('cli.skipped')}[/yellow] {translate(str(e))}", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(prof.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
    else:
        from specgauge.i18n import check_lang, use_lang
        from specgauge.report.console import render_profile

        with use_lang(check_lang(lang)):
            render_profile(prof, console)


@user_errors
def simulate(
    workload: WorkloadArg = None,
    method: Annotated[str | None, typer.Option("--method", "-m", help="Comma-separated: ngram, suffix, draft_model:PATH, KIND:DIR (eagle3:HEAD, peagle:HEAD, dflash:HEAD, dspark:HEAD, mtp:TARGET for native MTP, mtp:ASSISTANT for Gemma 4; plugins by kind). The chain heads (eagle3, peagle, mtp) also show the teacher-forced figure training tools print, beside the replayed one. Default: ngram,suffix; with --speculative-config, its method.")] = None,
    k: Annotated[str | None, typer.Option("--k", "-k", help="Proposal lengths: 1-8, or 1,2,4. Default: 1-8; with --speculative-config, its num_speculative_tokens.")] = None,
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="vLLM's --speculative-config JSON; sets the method, k and its options.")] = None,
    target_model: Annotated[Path | None, typer.Option("--target-model", help="eagle3:DIR / mtp:DIR / dflash:DIR: the target model (a directory, or a Hub id already in the local Hugging Face cache; any architecture transformers loads) whose hidden states the head reads. Default: the one the head's config.json names, else --tokenizer when it is a model directory.")] = None,
    device: Annotated[str, typer.Option("--device", help="Hidden-state heads: where the target and head run: cpu, cuda (ROCm too) or auto.")] = "cpu",
    dtype: Annotated[str, typer.Option("--dtype", help="Hidden-state heads: auto (float32 on the CPU, bfloat16 on a GPU), float32, bfloat16 or float16.")] = "auto",
    hidden_states: Annotated[Path | None, typer.Option("--hidden-states", help="Hidden-state heads: a directory of vLLM's own hidden-state dumps (docs/hidden-states.md) read instead of running the target; --target-model still names the target's checkpoint (its config, embedding, final norm).")] = None,
    replay_batch_tokens: Annotated[int | None, typer.Option("--replay-batch-tokens", min=0, help="Hidden-state heads: run the target passes of consecutive requests together, up to this many padded tokens per forward (default: 8192 on a GPU; 0, one request per forward, on the CPU, where batching is no faster). The figures are the same to float rounding (docs/hidden-states.md).")] = None,
    draft_sampling: Annotated[str, typer.Option("--draft-sampling", help="greedy (vLLM's way: exact replay) or probabilistic (needs target logprobs in the log; lower bound).")] = "greedy",
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes (concurrency) for the predicted speedup, e.g. 1,8,32.")] = "1",
    cost_profile: Annotated[Path | None, typer.Option("--cost-profile", help="Your server's fitted step-cost law (cost_profile.json from specgauge calibrate): calibrated predictions with a band. Without it the speedup comes from an uncalibrated guessed cost model.")] = None,
    tokenizer: TokOpt = None,
    format: FormatOpt = None,
    segment_by: SegmentOpt = None,
    skip_invalid: SkipOpt = False,
    limit: LimitOpt = None,
    detail: Annotated[bool, typer.Option("--detail", help="Also print every segment × method × k row.")] = False,
    as_json: JsonOpt = False,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per segment × method × k to this file.")] = None,
    per_request: Annotated[Path | None, typer.Option("--per-request", help="Append per-request acceptance rows (JSONL) to this file as they are computed.")] = None,
    partition_by: Annotated[str | None, typer.Option("--partition-by", help="Field path (or 're:REGEX') naming the server/cache of each request: one suffix cache per value, each in arrival order.")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="Replay on a Ray cluster (the optional ray extra); the same result as without.")] = False,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster for --ray; default RAY_ADDRESS, the latest cluster here, else a local one.")] = None,
    split_streams: Annotated[int, typer.Option("--split-streams", min=1, help="With --ray: cut each suffix stream into N pieces with cold caches (APPROXIMATE; the error is measured and printed).")] = 1,
    lang: LangOpt = None,
) -> None:
    """Acceptance per method, k and segment, replayed offline from logged outputs; predicted speedup.
    Chain heads (eagle3, peagle, mtp) also show the teacher-forced accuracy training tools print, labelled optimistic."""
    from specgauge.api import resolve_tokenizer
    from specgauge.config import ConfigError, SpeculativeConfig
    from specgauge.simulate.run import SimulateConfig, SimulateError, nothing_to_replay, parse_ks
    from specgauge.workload.loaders import LoadOptions

    spec = SpeculativeConfig.from_json(speculative_config) if speculative_config else None
    given: dict[str, Any] = {}  # only what the user typed; SimulateConfig fills the rest (model_fields_set)
    if method is not None:
        given["methods"] = [m for m in method.split(",") if m.strip()]
    if k is not None:
        given["ks"] = parse_ks(k)
    cfg = SimulateConfig(
        workload=workload_paths(workload),
        load=LoadOptions(format=format, segment_by=segment_by, skip_invalid=skip_invalid, limit=limit),  # type: ignore[arg-type]
        **given, speculative_config=spec, tokenizer=tokenizer, batch_sizes=_batches(batch), cost_profile=cost_profile,
        per_request_out=per_request, draft_sampling=draft_sampling, partition_by=partition_by, target_model=target_model,
        device=device, dtype=dtype, hidden_states=hidden_states, replay_batch_tokens=replay_batch_tokens,
    )
    if split_streams > 1 and not ray:
        raise ConfigError("--split-streams: only with --ray (without it every stream is replayed exactly, in one pass)")
    if ray_address and not ray:
        raise ConfigError("--ray-address: only with --ray")
    result = _replay(cfg, resolve_tokenizer(tokenizer), ray, ray_address, split_streams, quiet=as_json)
    nothing = nothing_to_replay(result, cfg.workload)
    if nothing is not None:  # a table of dashes and exit 0 would read as a result
        raise SimulateError(nothing)
    _show(result, as_json, csv_out, detail, lang)


def _batches(batch: str) -> list[int]:
    from specgauge.config import ConfigError

    try:
        batches = sorted({int(b) for b in batch.split(",")})
    except ValueError:
        raise ConfigError(f"--batch {batch!r}: expected integers like 1,8,32") from None
    if min(batches) < 1:
        raise ConfigError("--batch: batch sizes must be >= 1")
    return batches


def _replay(cfg: Any, tok: Any, ray: bool, ray_address: str | None, split_streams: int, quiet: bool) -> Any:
    """The one replay pass (here, or on Ray), with a progress bar on stderr unless ``quiet``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from specgauge.simulate.run import simulate as run_simulate

    from specgauge.i18n import t as tr

    with Progress(TextColumn(tr("progress.replaying")), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=quiet) as prog:
        task = prog.add_task("replay", total=cfg.load.limit)
        if not ray:
            return run_simulate(cfg, tok, on_request=lambda n: prog.update(task, completed=n))
        from specgauge.scale.replay import RayReplayConfig, simulate_on_ray

        result, spread = simulate_on_ray(cfg, tok, RayReplayConfig(address=ray_address, split_streams=split_streams),
                                         on_request=lambda n: prog.update(task, completed=n))
        err_console.print(f"ray: {spread.cluster}, {spread.files} file(s) in {spread.record_blocks} block(s); "
                          f"per-request methods: {spread.per_request_stage}; {spread.stream_tasks} stream task(s); "
                          f"{spread.seconds:.1f} s", highlight=False, markup=False)
        for note in spread.notes:
            err_console.print(f"ray: {note}", highlight=False, markup=False)
        return result


def _show(result: Any, as_json: bool, csv_out: Path | None, detail: bool, lang: str | None) -> None:
    if csv_out is not None:
        from specgauge.report.tables import simulation_rows, write_csv

        write_csv(simulation_rows(result), csv_out)
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
        return
    from specgauge.i18n import check_lang, t, use_lang
    from specgauge.report.console import render_simulation

    with use_lang(check_lang(lang)):
        render_simulation(result, console, detail=detail)
        if csv_out is not None:
            console.print(t("simulate.csv", path=csv_out))
