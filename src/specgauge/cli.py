"""Command line: flags -> config -> one library call. Nothing here computes a figure.

Errors that are the user's (bad workload line, bad flag value, unreachable server) are printed as one
clear line naming the place, with exit status 2; a traceback means a bug in specgauge.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from specgauge import __version__

app = typer.Typer(
    name="specgauge",
    help="Does speculative decoding pay off on YOUR workload? Profile, replay, benchmark, decide.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
    console = Console(width=140)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 200)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn specgauge's own error types into one line on stderr and exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from specgauge.errors import USER_ERRORS

        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            err_console.print(f"[bold red]error:[/bold red] {e}", highlight=False, markup=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        console.print(f"specgauge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    pass


WorkloadArg = Annotated[
    list[Path] | None,
    typer.Argument(help="Workload file(s): OpenAI JSONL, Batch API input+output, ShareGPT, vllm custom, text. "
                   "gzip/zstd fine. Default: the built-in sample workload."),
]
FormatOpt = Annotated[str | None, typer.Option("--format", help="Override format detection: openai, batch, sharegpt, vllm-custom, text.")]
SegmentOpt = Annotated[str | None, typer.Option("--segment-by", help="Field path (e.g. metadata.team) or 're:REGEX' over the system prompt.")]
SkipOpt = Annotated[bool, typer.Option("--skip-invalid", help="Skip malformed requests (counted) instead of stopping.")]
TokOpt = Annotated[str | None, typer.Option("--tokenizer", help="HF tokenizer directory, or tiktoken:NAME. Default: the shipped model's tokenizer when present, else an approximation.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Use at most this many requests.")]


def _workload_paths(paths: list[Path] | None) -> list[Path]:
    if paths:
        return paths
    from specgauge.workload.samples import sample_logged_path, sample_path

    logged = sample_logged_path()
    return [logged if logged.is_file() else sample_path()]


@app.command()
@user_errors
def profile(
    workload: WorkloadArg = None,
    tokenizer: TokOpt = None,
    format: FormatOpt = None,
    segment_by: SegmentOpt = None,
    skip_invalid: SkipOpt = False,
    limit: LimitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the workload looks like, per segment: lengths, sampling mix, tools, RAG context, copy overlap, language."""
    from specgauge.api import profile as run_profile
    from specgauge.workload.loaders import LoadOptions

    opts = LoadOptions(format=format, segment_by=segment_by, skip_invalid=skip_invalid, limit=limit)  # type: ignore[arg-type]
    prof, report = run_profile(_workload_paths(workload), opts, tokenizer)
    for e in report.errors:
        err_console.print(f"[yellow]skipped:[/yellow] {e}", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(prof.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
    else:
        from specgauge.report.console import render_profile

        render_profile(prof, console)


@app.command()
@user_errors
def simulate(
    workload: WorkloadArg = None,
    method: Annotated[str, typer.Option("--method", "-m", help="Comma-separated: ngram, suffix, draft_model:PATH (plugins by kind).")] = "ngram,suffix",
    k: Annotated[str, typer.Option("--k", "-k", help="Proposal lengths: 1-8, or 1,2,4.")] = "1-8",
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="vLLM's --speculative-config JSON; sets the method, k and its options.")] = None,
    draft_sampling: Annotated[str, typer.Option("--draft-sampling", help="greedy (vLLM's way: exact replay) or probabilistic (needs target logprobs in the log; lower bound).")] = "greedy",
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes (concurrency) for the predicted speedup, e.g. 1,8,32.")] = "1",
    cost_profile: Annotated[Path | None, typer.Option("--cost-profile", help="JSON cost profile (measured by specgauge bench).")] = None,
    tokenizer: TokOpt = None,
    format: FormatOpt = None,
    segment_by: SegmentOpt = None,
    skip_invalid: SkipOpt = False,
    limit: LimitOpt = None,
    detail: Annotated[bool, typer.Option("--detail", help="Also print every segment × method × k row.")] = False,
    as_json: JsonOpt = False,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one CSV row per segment × method × k to this file.")] = None,
    per_request: Annotated[Path | None, typer.Option("--per-request", help="Append per-request acceptance rows (JSONL) to this file as they are computed.")] = None,
) -> None:
    """Acceptance per method, k and segment, replayed offline from logged outputs; predicted speedup."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from specgauge.api import resolve_tokenizer
    from specgauge.config import ConfigError, SpeculativeConfig
    from specgauge.simulate.run import SimulateConfig, parse_ks
    from specgauge.simulate.run import simulate as run_simulate
    from specgauge.workload.loaders import LoadOptions

    spec = SpeculativeConfig.from_json(speculative_config) if speculative_config else None
    methods = [m for m in method.split(",") if m.strip()]
    ks = parse_ks(k)
    if spec is not None:
        methods = [spec.method or "draft_model"] if method == "ngram,suffix" else methods
        if k == "1-8" and spec.num_speculative_tokens:
            ks = [spec.num_speculative_tokens]
    try:
        batches = sorted({int(b) for b in batch.split(",")})
    except ValueError:
        raise ConfigError(f"--batch {batch!r}: expected integers like 1,8,32") from None
    if min(batches) < 1:
        raise ConfigError("--batch: batch sizes must be >= 1")
    cfg = SimulateConfig(
        workload=_workload_paths(workload),
        load=LoadOptions(format=format, segment_by=segment_by, skip_invalid=skip_invalid, limit=limit),  # type: ignore[arg-type]
        methods=methods, ks=ks, speculative_config=spec, tokenizer=tokenizer, batch_sizes=batches, cost_profile=cost_profile,
        per_request_out=per_request, draft_sampling=draft_sampling,
    )
    tok = resolve_tokenizer(tokenizer)
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=as_json) as prog:
        task = prog.add_task("replay", total=limit)
        result = run_simulate(cfg, tok, on_request=lambda n: prog.update(task, completed=n))
    if csv_out is not None:
        from specgauge.report.tables import simulation_rows, write_csv

        write_csv(simulation_rows(result), csv_out)
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
    else:
        from specgauge.report.console import render_simulation

        render_simulation(result, console, detail=detail)
        if csv_out is not None:
            console.print(f"CSV written to {csv_out}")


@app.command()
@user_errors
def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server root, e.g. http://127.0.0.1:8000.")],
    workload: Annotated[list[Path] | None, typer.Option("--workload", "-w", help="Workload file(s); default: the built-in sample.")] = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Where results.jsonl, run.json and summary.json go.")] = Path("results/bench"),
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="/v1/chat/completions or /v1/completions; default: by request kind.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name; default: the server's first model.")] = None,
    max_concurrency: Annotated[str | None, typer.Option("--max-concurrency", help="Concurrency cap; a list (1,4,16) sweeps it, one sub-directory per value.")] = None,
    request_rate: Annotated[float, typer.Option("--request-rate", help="Requests/s (Poisson, or gamma with --burstiness); inf sends all at once.")] = float("inf"),
    burstiness: Annotated[float, typer.Option("--burstiness", help="Gamma shape of inter-arrival times (1 = Poisson).")] = 1.0,
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="Requests to send (cycling the workload); default: each once.")] = None,
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
) -> None:
    """Live benchmark: throughput, TTFT/TPOT/ITL/E2E percentiles, failures, acceptance from the server's counters."""
    from specgauge.bench import BenchConfig, format_summary, run_bench
    from specgauge.config import ConfigError

    try:
        concs: list[int | None] = [int(c) for c in max_concurrency.split(",")] if max_concurrency else [None]
    except ValueError:
        raise ConfigError(f"--max-concurrency {max_concurrency!r}: expected integers like 1,4,16") from None
    if goodput:  # vLLM takes "--goodput ttft:500 tpot:50"; accept that quoted, or the flag repeated
        goodput = [g for item in goodput for g in item.split()]
    failed = False
    for c in concs:
        out = output_dir / f"c{c}" if len(concs) > 1 else output_dir
        cfg = BenchConfig(
            base_url=base_url, workload=_workload_paths(workload), output_dir=out, endpoint=endpoint, model=model,
            max_concurrency=c, request_rate=request_rate, burstiness=burstiness, num_prompts=num_prompts, seed=seed,
            self_timed=trace, trace_speed=trace_speed, goodput=goodput, percentile_metrics=percentile_metrics,
            metric_percentiles=metric_percentiles, warmup=num_warmups, timeout=timeout, resume=resume, dialect=dialect,
            api_key=api_key, segment_by=segment_by,
        )
        result = run_bench(cfg, console=err_console)
        console.print(format_summary(result.summary), highlight=False, markup=False)
        console.print(f"results: {result.output_dir}", highlight=False)
        failed |= result.exit_code != 0
    if failed:
        raise typer.Exit(1)


@app.command()
@user_errors
def demo(
    out_dir: Annotated[Path, typer.Option("--out-dir", "-o", help="Where the demo writes its results and report.")] = Path("specgauge-demo"),
    num_prompts: Annotated[int, typer.Option("--num-prompts", min=4, help="Requests per live run.")] = 120,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", min=1)] = 4,
    k: Annotated[str, typer.Option("--k", help="Proposal lengths to replay offline.")] = "1-8",
) -> None:
    """The whole job on the embedded default: profile, offline replay, live A/B on the embedded server, verdict, HTML report."""
    from specgauge.demo import DemoConfig, run_demo
    from specgauge.simulate.run import parse_ks

    run_demo(DemoConfig(out_dir=out_dir, num_prompts=num_prompts, max_concurrency=max_concurrency, ks=parse_ks(k)), console, err_console)


def main() -> None:
    app()


from specgauge import cli_decide as _cli_decide  # noqa: E402,F401  (registers compare, report)
from specgauge.engine import cli_serve as _cli_serve  # noqa: E402,F401  (registers serve)


if __name__ == "__main__":
    main()
