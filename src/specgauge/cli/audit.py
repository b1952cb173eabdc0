"""``specgauge audit``: is speculative decoding lossless on this server? (flags -> config -> one call)

Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE (too few samples for the requested power); 2 is a user
error (bad flag, unreachable server), as for every specgauge command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, console, err_console, user_errors


@user_errors
def audit(
    base_url: Annotated[str | None, typer.Option("--base-url", help="Candidate server (speculation on), e.g. http://127.0.0.1:8000.")] = None,
    reference_url: Annotated[str | None, typer.Option("--reference-url", help="Reference server: the same binary and model, speculation off.")] = None,
    embedded: Annotated[bool, typer.Option("--embedded", help="Start two embedded engines (specgauge serve) myself.")] = False,
    server_cmd: Annotated[str | None, typer.Option("--server-cmd", help="Start both servers from this template, e.g. 'vllm serve MODEL --port {port} --speculative-config {spec}' ({spec} and its flag are left out for the reference; rules as for sweep).")] = None,
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="The candidate's config (JSON) with --embedded / --server-cmd. Embedded default: ngram k=4, lookup 2-5.")] = None,
    model_dir: Annotated[Path | None, typer.Option("--model-dir", help="--embedded: model directory (default: the shipped tiny target); --server-cmd: what {model} stands for.")] = None,
    workaround: Annotated[str | None, typer.Option("--workaround", help="--server-cmd: put a specgauge workaround on both servers' PYTHONPATH (see 'specgauge workaround-path').")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name in requests; default: each server's first.")] = None,
    workload: Annotated[list[Path] | None, typer.Option("--workload", "-w", help="Take the prompts from this workload (its first --num-prompts requests); default: a built-in handful.")] = None,
    num_prompts: Annotated[int, typer.Option("--num-prompts", min=1, help="Prompts to sample.")] = 4,
    samples: Annotated[int, typer.Option("--samples", min=1, help="Sampled completions per prompt and side.")] = 300,
    positions: Annotated[int, typer.Option("--positions", min=1, help="First token positions tested (max_tokens of each sample).")] = 4,
    temperature: Annotated[float, typer.Option("--temperature", max=2.0, help="Sampling temperature.")] = 0.8,
    top_p: Annotated[float, typer.Option("--top-p", max=1.0)] = 1.0,
    samples_per_request: Annotated[int, typer.Option("--samples-per-request", min=1, help="OpenAI n per request where the server supports it.")] = 50,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Sampling requests in flight per server.")] = 4,
    greedy_rounds: Annotated[int, typer.Option("--greedy-rounds", min=0, help="Rounds of greedy requests in mixed batches (0: skip that check).")] = 3,
    greedy_tokens: Annotated[int, typer.Option("--greedy-tokens", min=1, help="max_tokens of the greedy check.")] = 32,
    mixed_concurrency: Annotated[int, typer.Option("--mixed-concurrency", min=2, help="Requests in flight in a mixed batch.")] = 4,
    control: Annotated[bool, typer.Option("--control/--no-control", help="Also send the mixed batches to the reference (batch-invariance control).")] = True,
    alpha: Annotated[float, typer.Option("--alpha", help="Family-wise error rate of a false FAIL (Holm).")] = 0.05,
    power: Annotated[float, typer.Option("--power", help="Power each test must have for PASS.")] = 0.8,
    detect_tv: Annotated[float, typer.Option("--detect-tv", max=1.0, help="Total-variation distance each test must detect with --power.")] = 0.2,
    max_categories: Annotated[int, typer.Option("--max-categories", min=2, help="Columns per table ('other' included).")] = 8,
    test: Annotated[str, typer.Option("--test", help="Chi-square test of homogeneity: pearson or g (G-test).")] = "pearson",
    greedy_tolerance: Annotated[int, typer.Option("--greedy-tolerance", min=0, help="Greedy mismatches tolerated.")] = 0,
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Where samples.jsonl and audit.json go.")] = Path("results/audit"),
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted audit in the same output dir (or add samples).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-request timeout (s).")] = 300.0,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token (never written to results).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print audit.json instead of tables.")] = False,
    lang: LangOpt = None,
) -> None:
    """Losslessness audit: token distributions with and without speculation at temperature > 0, and greedy
    outputs in batches mixed with sampled requests. PASS / FAIL / INCONCLUSIVE with the evidence.

    Exit status: 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 user error.
    """
    from pydantic import ValidationError

    from specgauge.audit import AuditConfig, run_audit
    from specgauge.audit.analysis import StatsSettings
    from specgauge.config import ConfigError, format_validation_error

    try:
        cfg = AuditConfig(
            base_url=base_url, reference_url=reference_url, embedded=embedded, server_cmd=server_cmd,
            speculative_config=speculative_config, model_dir=model_dir, workaround=workaround, model=model,
            workload=workload, num_prompts=num_prompts, samples=samples, positions=positions, temperature=temperature,
            top_p=top_p, samples_per_request=samples_per_request, concurrency=concurrency, greedy_rounds=greedy_rounds,
            greedy_tokens=greedy_tokens, mixed_concurrency=mixed_concurrency, control=control,
            stats=StatsSettings(alpha=alpha, power=power, detect_tv=detect_tv, max_categories=max_categories, test=test,
                                greedy_tolerance=greedy_tolerance),
            output_dir=output_dir, resume=resume, timeout=timeout, api_key=api_key,
        )
    except ValidationError as e:
        raise ConfigError(format_validation_error(e)) from None
    if workaround is not None:
        from specgauge.workarounds import workaround_path

        workaround_path(workaround)  # an unknown name fails here, before any server starts
    from specgauge.i18n import t, translate

    result = run_audit(cfg, progress=lambda msg: err_console.print(translate(msg), highlight=False, markup=False))
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
    else:
        from specgauge.report.audit_console import render_audit

        render_audit(result, console)
        console.print(t("audit.evidence", audit=output_dir / "audit.json", samples=output_dir / "samples.jsonl"), highlight=False,
                      markup=False)
    raise typer.Exit(result.exit_code)
