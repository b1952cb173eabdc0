"""``specgauge bench``: the live benchmark (flags -> config -> one library call per concurrency)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import (
    LangOpt,
    SegmentOpt,
    console,
    err_console,
    user_errors,
    workload_paths,
)


@user_errors
def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server root, e.g. http://127.0.0.1:8000.")],
    workload: Annotated[list[Path] | None, typer.Option("--workload", "-w", help="Workload file(s), any format simulate reads (see specgauge simulate --help); prompts alone are enough. Default: the built-in sample.")] = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Where results.jsonl, run.json and summary.json go.")] = Path("results/bench"),
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="/v1/chat/completions or /v1/completions; default: by request kind.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name; default: the server's first model.")] = None,
    max_concurrency: Annotated[str | None, typer.Option("--max-concurrency", help="Concurrency cap; a list (1,4,16) sweeps it, one sub-directory per value.")] = None,
    request_rate: Annotated[float, typer.Option("--request-rate", help="Requests/s (Poisson, or gamma with --burstiness); inf sends all at once.")] = float("inf"),
    burstiness: Annotated[float, typer.Option("--burstiness", help="Gamma shape of inter-arrival times (1 = Poisson).")] = 1.0,
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="Requests to send (cycling the workload); default: each once.")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", min=1, help="Cap every request's output at N tokens (the max_tokens sent; a request's own lower max_tokens stays). Without it a request that sets none generates until EOS. vllm bench serve sets this per dataset (--random-output-len, --sharegpt-output-len, --custom-output-len).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    trace: Annotated[bool, typer.Option("--trace", help="Replay the workload's own arrival times.")] = False,
    trace_speed: Annotated[float, typer.Option("--trace-speed", help="Speed factor for --trace.")] = 1.0,
    goodput: Annotated[list[str] | None, typer.Option("--goodput", help="SLO per request, e.g. ttft:500 tpot:50 e2el:8000 (ms).")] = None,
    percentile_metrics: Annotated[str, typer.Option("--percentile-metrics")] = "ttft,tpot,itl",
    metric_percentiles: Annotated[str, typer.Option("--metric-percentiles")] = "99",
    num_warmups: Annotated[int, typer.Option("--num-warmups", min=0, help="Warm-up requests sent first, never recorded.")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-request timeout (s).")] = 600.0,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in the same output dir.")] = False,
    dialect: Annotated[str, typer.Option("--dialect", help="auto, vllm, sglang, llamacpp, specgauge.")] = "auto",
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token (never written to results).")] = None,
    segment_by: SegmentOpt = None,
    ray_workers: Annotated[int | None, typer.Option("--ray-workers", min=1, help="Send from N async Ray actors (the optional ray extra), one schedule shared out; records stream back to one results.jsonl.")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster for --ray-workers; default RAY_ADDRESS, the latest cluster here, else a local one.")] = None,
    server_log: Annotated[Path | None, typer.Option("--server-log", help="The server's log file (vLLM): model-weight and KV-cache memory are read from its start-up lines.")] = None,
    memory_tool_timeout: Annotated[float, typer.Option("--memory-tool-timeout", help="Seconds nvidia-smi / amd-smi / rocm-smi may take before being stopped (then no device memory).")] = 5.0,
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="The JSON the server runs with (vLLM's --speculative-config), when the server does not say: the run's outputs are replayed through the same drafter and its acceptance set beside the server's.")] = None,
    lang: LangOpt = None,
) -> None:
    """Live benchmark: throughput, TTFT/TPOT/ITL/E2E percentiles, failures, acceptance from the server's counters."""
    from specgauge.bench import BenchConfig, run_bench
    from specgauge.config import ConfigError, SpeculativeConfig
    from specgauge.report.bench_console import format_summary

    spec = SpeculativeConfig.from_json(speculative_config) if speculative_config else None
    from specgauge.i18n import check_lang

    lang = check_lang(lang)

    try:
        concs: list[int | None] = [int(c) for c in max_concurrency.split(",")] if max_concurrency else [None]
    except ValueError:
        raise ConfigError(f"--max-concurrency {max_concurrency!r}: expected integers like 1,4,16") from None
    if goodput:  # vLLM takes "--goodput ttft:500 tpot:50"; accept that quoted, or the flag repeated
        goodput = [g for item in goodput for g in item.split()]
    if ray_address and not ray_workers:
        raise ConfigError("--ray-address: only with --ray-workers N")
    failed = False
    for c in concs:
        out = output_dir / f"c{c}" if len(concs) > 1 else output_dir
        cfg = BenchConfig(
            base_url=base_url, workload=workload_paths(workload), output_dir=out, endpoint=endpoint, model=model,
            max_concurrency=c, request_rate=request_rate, burstiness=burstiness, num_prompts=num_prompts, max_tokens=max_tokens, seed=seed,
            self_timed=trace, trace_speed=trace_speed, goodput=goodput, percentile_metrics=percentile_metrics,
            metric_percentiles=metric_percentiles, warmup=num_warmups, timeout=timeout, resume=resume, dialect=dialect,
            api_key=api_key, segment_by=segment_by, ray_workers=ray_workers, ray_address=ray_address,
            server_log=server_log, memory_tool_timeout=memory_tool_timeout, speculative_config=spec,
        )
        result = run_bench(cfg, console=err_console)
        console.print(format_summary(result.summary, lang), highlight=False, markup=False)
        from specgauge.i18n import t

        console.print(t("cli.results", path=result.output_dir), highlight=False)
        failed |= result.exit_code != 0
    if failed:
        raise typer.Exit(1)
