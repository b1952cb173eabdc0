"""``specgauge recommend``: which speculative config to serve with (flags -> settings -> one library call).

From a sweep (``specgauge recommend SWEEP_DIR``: measured speedups and CIs) or from replay +
calibration (``specgauge recommend --cost-profile FILE [WORKLOAD] --method … --k …``: predicted
speedups and bands). Exit status 0 (whether the answer is a config or "off"), 2 for a user error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, console, parse_int_list, user_errors, workload_paths
from specgauge.config import MIN_SPEEDUP


@user_errors
def recommend(
    inputs: Annotated[list[Path] | None, typer.Argument(help="A sweep directory; with --cost-profile, workload file(s) instead (default: the built-in sample).")] = None,
    cost_profile: Annotated[Path | None, typer.Option("--cost-profile", help="Recommend from replay + this fitted step-cost profile (specgauge calibrate) instead of a sweep.")] = None,
    method: Annotated[str, typer.Option("--method", help="With --cost-profile: methods to predict, e.g. ngram,suffix,draft_model:DIR.")] = "ngram,suffix",
    k: Annotated[str, typer.Option("--k", help="With --cost-profile: proposal lengths, e.g. 1-8 or 2,4,8.")] = "1-8",
    concurrency: Annotated[str, typer.Option("--concurrency", help="With --cost-profile: concurrencies to predict, e.g. 1,2,4,8,16.")] = "1,2,4,8,16",
    num_prompts: Annotated[int | None, typer.Option("--num-prompts", min=1, help="With --cost-profile: requests replayed (cycling the workload).")] = None,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="The margin: a config is chosen only when its interval's low end clears it.")] = MIN_SPEEDUP,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="vLLM's --max-num-seqs: where the schedule's last range ends.")] = 256,
    model: Annotated[str, typer.Option("--model", help="The model name written into the flags.")] = "MODEL",
    as_json: Annotated[bool, typer.Option("--json", help="Print the recommendation as JSON instead of tables.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the recommendation as JSON to this file (specgauge report takes it).")] = None,
    lang: LangOpt = None,
) -> None:
    """Best config per concurrency band and segment, the crossover, and ready vLLM / llama.cpp / SGLang flags."""
    from specgauge.recommend import PredictedRecommendConfig, RecommendSettings, recommend_from_profile, recommend_from_sweep
    from specgauge.recommend.sources import RecommendError
    from specgauge.simulate.run import parse_ks

    settings = RecommendSettings(min_speedup=min_speedup, max_batch=max_batch, model=model)
    if cost_profile is None:
        if not inputs or len(inputs) != 1:
            raise RecommendError("pass one sweep directory (specgauge sweep … -o DIR), or --cost-profile FILE to recommend from replay")
        rec = recommend_from_sweep(inputs[0], settings)
    else:
        rec = recommend_from_profile(PredictedRecommendConfig(
            cost_profile=cost_profile, workload=workload_paths(inputs), methods=[m for m in method.split(",") if m.strip()],
            ks=parse_ks(k), concurrencies=parse_int_list(concurrency, "--concurrency"), num_prompts=num_prompts, settings=settings))
    text = json.dumps(rec.model_dump(mode="json"), ensure_ascii=False, indent=1)
    if out is not None:
        try:
            out.write_text(text + "\n", encoding="utf-8")
        except OSError as e:
            raise RecommendError(f"--out {out}: {e.strerror or e}") from None
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        from specgauge.report.sweep_console import render_recommendation

        render_recommendation(rec, console)
