"""``specgauge sweep``: bench a grid of speculative configs × concurrencies (flags -> SweepConfig -> run_sweep).

Exit status: 0 when every cell ran (cells skipped by --time-budget are listed, not failures), 1 when
a cell failed or was interrupted, 2 for a user error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specgauge.cli.common import (
    LangOpt,
    ServerNiceOpt,
    WorkloadArg,
    console,
    err_console,
    parse_int_list,
    user_errors,
    workload_paths,
)

if TYPE_CHECKING:
    from specgauge.sweep.grid import ServerConfig
    from specgauge.sweep.runner import SweepResult
    from specgauge.sweep.target import ServerTarget


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    from specgauge.units import parse_pairs

    return parse_pairs(items, flag)


@user_errors
def sweep(
    workload: WorkloadArg = None,
    config: Annotated[list[str] | None, typer.Option("--config", help="A server config: off, vLLM --speculative-config JSON, or LABEL=JSON. Repeat for more; 'off' is always included.")] = None,
    method: Annotated[str | None, typer.Option("--method", help="Grid shorthand with --k: ngram,suffix,draft_model:DIR (one config per method × k).")] = None,
    k: Annotated[str | None, typer.Option("--k", help="Proposal lengths for --method, e.g. 2,4,8 or 1-8.")] = None,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Client concurrencies, e.g. 1,2,4,8.")] = "1,2,4,8",
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="Requests per cell (cycling the workload); default: each once.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Arrival seed (the same in every cell, so requests pair by id).")] = 0,
    server_cmd: Annotated[str | None, typer.Option("--server-cmd", help="Start your server per config: a template with {port}, {spec} (the config's JSON) and {model}, e.g. 'vllm serve MODEL --port {port} --speculative-config {spec}'. Without speculation '--speculative-config {spec}' is left out, and so is any {spec:WORD} (a flag only a speculative server takes).")] = None,
    url: Annotated[list[str] | None, typer.Option("--url", help="A running server: NAME=URL (NAME: off, ngram-k4, … or a --config label). Repeat per config.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Embedded: the target model directory (default: the shipped tiny target). --server-cmd: the value of {model}.")] = None,
    server_env: Annotated[list[str] | None, typer.Option("--server-env", help="NAME=VALUE in the environment of started servers (repeatable).")] = None,
    threads: Annotated[int, typer.Option("--threads", min=1, help="Embedded server: torch threads per server.")] = 1,
    health_timeout: Annotated[float, typer.Option("--health-timeout", min=1, help="Seconds to wait for a started server's /health or /v1/models.")] = 600.0,
    server_nice: ServerNiceOpt = 0,
    cost_profile: Annotated[Path | None, typer.Option("--cost-profile", help="A fitted step-cost profile (specgauge calibrate): predicted beside measured for every cell.")] = None,
    time_budget: Annotated[str | None, typer.Option("--time-budget", help="Stop starting cells after this long, e.g. 30m, 1h30m; cells not run are listed as skipped.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue a sweep in the same output directory: finished cells are skipped, a broken one continued.")] = False,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Threshold of the crossover (where a config stops paying).")] = 1.0,
    warmup: Annotated[int, typer.Option("--num-warmups", min=0, help="Warm-up requests per cell, sent first and never recorded.")] = 1,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-request timeout (s).")] = 600.0,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token for the servers (never written to results).")] = None,
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Sweep directory: sweep.json, report.html, one bench directory per cell.")] = Path("results/sweep"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON instead of tables.")] = False,
    lang: LangOpt = None,
) -> None:
    """Bench a grid of speculative configs × concurrencies, one server per config: speedup with CIs, Pareto front, crossover."""
    from specgauge.config import ConfigError
    from specgauge.simulate.run import parse_ks
    from specgauge.sweep.grid import expand_grid, parse_config
    from specgauge.sweep.run import SweepConfig, parse_duration, run_sweep

    if server_cmd and url:
        raise ConfigError("--server-cmd and --url: pass one (start servers, or use running ones)")
    configs = [parse_config(c) for c in config or []]
    configs += expand_grid([m for m in (method or "").split(",") if m.strip()], parse_ks(k) if k else [])
    target = _target(configs, url, server_cmd, model, _pairs(server_env, "--server-env"), threads=threads,
                     health_timeout=health_timeout, nice=server_nice, api_key=api_key)
    cfg = SweepConfig(
        workload=workload_paths(workload), configs=configs, concurrencies=parse_int_list(concurrency, "--concurrency"),
        out_dir=output_dir, num_prompts=num_prompts, seed=seed, target=target, cost_profile=cost_profile,
        time_budget_s=parse_duration(time_budget), resume=resume, min_speedup=min_speedup, warmup=warmup, timeout=timeout,
    )
    result = run_sweep(cfg, console=err_console)
    _finish(result, as_json=as_json)
    if result.failed:
        raise typer.Exit(1)


def _target(configs: list[ServerConfig], url: list[str] | None, server_cmd: str | None, model: str | None,
            env: dict[str, str], *, threads: int, health_timeout: float, nice: int, api_key: str | None) -> ServerTarget:
    """Where the sweep's servers come from; running servers named by ``--url`` add their configs."""
    from specgauge.sweep.grid import config_from_label
    from specgauge.sweep.target import ServerTarget

    if url:
        urls = _pairs(url, "--url")
        given = {c.label for c in configs}
        inferred = [config_from_label(name) for name in urls if name not in given]
        if any(c.speculative_config for c in inferred):
            from specgauge.i18n import t

            err_console.print(t("cli.url_configs"), highlight=False, markup=False)
        configs += inferred
        target = ServerTarget.from_urls(urls)
    elif server_cmd:
        target = ServerTarget.from_command(server_cmd, model=model, env=env, health_timeout_s=health_timeout, nice=nice)
    else:
        target = ServerTarget.embedded(model, threads=threads, nice=nice)
        target.env, target.health_timeout_s = env, health_timeout
    if api_key:
        from pydantic import SecretStr

        target.api_key = SecretStr(api_key)
    return target


def _finish(result: SweepResult, *, as_json: bool) -> None:
    """Print the analysis, store the recommendation (computed once here; the report renders it), write the report."""
    from specgauge.i18n import t
    from specgauge.recommend.sources import store_recommendation
    from specgauge.report.html import ReportConfig, write_report
    from specgauge.report.sweep_console import render_sweep

    m = result.manifest
    if as_json:
        sys.stdout.write(json.dumps(m.model_dump(mode="json"), ensure_ascii=False, indent=1) + "\n")
    else:
        render_sweep(m, console)
    store_recommendation(m, result.out_dir)
    report = result.out_dir / "report.html"
    write_report(ReportConfig(inputs=[result.out_dir], out=report, title=t("cli.sweep_title", name=result.out_dir.resolve().name)))
    if not as_json:
        console.print(t("cli.sweep_done", sweep=result.out_dir / "sweep.json", report=report), highlight=False, markup=False)
        console.print(t("cli.next", cmd=f"specgauge recommend {result.out_dir}"), highlight=False, markup=False)
