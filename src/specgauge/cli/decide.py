"""``specgauge compare`` and ``specgauge report``: flags -> config -> one library call.

Exit status of ``compare`` (for CI pipelines): 0 GO, 1 NO-GO (also "equivalent within the margin" and
"no gain worth turning on": nothing worth turning on), 3 INCONCLUSIVE; 2 is a user error (bad flag,
unreadable run), as for every specgauge command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, console, err_console, user_errors
from specgauge.config import MIN_SPEEDUP


@user_errors
def compare(
    baseline: Annotated[Path, typer.Argument(help="Baseline: a bench output dir, a results.jsonl, or a simulate JSON.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate (speculation on): same kinds as the baseline.")],
    slo: Annotated[str | None, typer.Option("--slo", help="SLOs the candidate must meet, e.g. e2e_p95_ms=500,ttft_p95_ms=200,tpot_p95_ms=40.")] = None,
    latency_metric: Annotated[str, typer.Option("--latency-metric", help="Latency statistic whose CI can also justify GO (ttft|tpot|e2e _p50|_p95).")] = "e2e_p95",
    temperature: Annotated[float | None, typer.Option("--temperature", min=0, help="Temperature of every request (default: from the workload in run.json; unknown counts as > 0).")] = None,
    scorer: Annotated[str | None, typer.Option("--scorer", help="module:function (baseline_text, candidate_text) -> float; > 0 means candidate better.")] = None,
    max_divergence: Annotated[float, typer.Option("--max-divergence", min=0, max=1, help="Share of temperature-0 outputs allowed to differ before NO-GO.")] = 0.02,
    max_failure_increase: Annotated[float, typer.Option("--max-failure-increase", min=0, max=1, help="Failure-rate rise (absolute) tolerated.")] = 0.005,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Practical margin: GO needs the whole speedup CI above it; a CI inside [1/m, m] is 'equivalent within the margin' and a CI below it 'no gain worth turning on' (both NO-GO).")] = MIN_SPEEDUP,
    min_pairs: Annotated[int, typer.Option("--min-pairs", min=1, help="Paired requests needed before judging.")] = 10,
    resamples: Annotated[int, typer.Option("--resamples", min=2000, help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    show_mismatches: Annotated[int, typer.Option("--show-mismatches", min=0, help="Temperature-0 mismatches to print.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    cost_profile: Annotated[Path | None, typer.Option("--cost-profile", help="A fitted step-cost law (cost_profile.json from calibrate): its prediction of the drafter's prefill is shown beside the measured TTFT split.")] = None,
    stall_factor: Annotated[float, typer.Option("--stall-factor", min=1, help="A gap between two output chunks above this many times the baseline's median TPOT is a stall (and above --min-stall-ms).")] = 10.0,
    min_stall_ms: Annotated[float, typer.Option("--min-stall-ms", min=0, help="The shortest gap that counts as a stall.")] = 250.0,
    lang: LangOpt = None,
) -> None:
    """Paired A/B: speedup and latency deltas with bootstrap CIs, output equivalence, GO / NO-GO / INCONCLUSIVE.

    Exit status: 0 GO, 1 NO-GO (equivalent within the margin included), 3 INCONCLUSIVE, 2 user error.
    """
    from specgauge.i18n import check_lang
    from specgauge.report.runs import CompareRequest, compare_paths
    from specgauge.stats.compare import CompareConfig
    from specgauge.stats.stalls import StallCriteria
    from specgauge.stats.verdict import VerdictCriteria, metric_key, parse_slo

    lang = check_lang(lang)
    req = CompareRequest(
        baseline=baseline, candidate=candidate, temperature=temperature, scorer=scorer,
        config=CompareConfig(resamples=resamples, seed=seed, stalls=StallCriteria(factor=stall_factor, min_gap_ms=min_stall_ms)),
        cost_profile=cost_profile,
        criteria=VerdictCriteria(slo_ms=parse_slo(slo), latency_metric=metric_key(latency_metric, "--latency-metric"),
                                 min_speedup=min_speedup, max_failure_increase=max_failure_increase,
                                 max_divergence=max_divergence, min_pairs=min_pairs),
    )
    result = compare_paths(req)
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
    else:
        from specgauge.report.decide_console import render_comparison

        render_comparison(result, console, mismatches=show_mismatches, lang=lang)
    raise typer.Exit(result.verdict.exit_code)


@user_errors
def report(
    inputs: Annotated[list[Path], typer.Argument(help="Bench output dirs, results.jsonl, and JSON from profile / simulate / compare.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
    redact: Annotated[bool, typer.Option("--redact", help="Replace prompts and outputs by short hashes.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report's data as JSON to this file.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Also write one CSV row per bench run to this file.")] = None,
    title: Annotated[str | None, typer.Option("--title", help="Report title (default: \"specgauge report\" in the report's language).")] = None,
    lang: LangOpt = None,
) -> None:
    """One self-contained HTML report (plots embedded, nothing fetched when viewed), plus JSON / CSV."""
    from rich.markup import escape

    from specgauge.report.html import ReportConfig, write_report

    res = write_report(ReportConfig(inputs=inputs, out=out, redact=redact, json_out=json_out, csv_out=csv_out, title=title, lang=lang))
    from specgauge.i18n import t, translate

    for note in res.notes:
        err_console.print(f"[yellow]{t('console.note')}[/yellow] {escape(translate(note))}", highlight=False)
    console.print(t("cli.report_written", path=out.resolve()), highlight=False)
    for p in (json_out, csv_out):
        if p is not None:
            console.print(t("cli.also", path=p.resolve()), highlight=False)
