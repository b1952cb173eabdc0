"""``specgauge demo``: the whole job on the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import (
    LangOpt,
    console,
    err_console,
    user_errors,
)
from specgauge.config import MIN_SPEEDUP


@user_errors
def demo(
    out_dir: Annotated[Path, typer.Option("--out-dir", "-o", help="Where the demo writes its results and report.")] = Path("specgauge-demo"),
    num_prompts: Annotated[int, typer.Option("--num-prompts", min=4, help="Requests per live run.")] = 120,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", min=1)] = 4,
    k: Annotated[str, typer.Option("--k", help="Proposal lengths to replay offline and predict.")] = "1-8",
    calibration_prompts: Annotated[int, typer.Option("--calibration-prompts", min=4, help="Requests per calibration run.")] = 24,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Practical margin, as compare's.")] = MIN_SPEEDUP,
    lang: LangOpt = None,
) -> None:
    """The whole job on the embedded default: profile, replay, calibrate, predict, live A/B, verdict beside the prediction, HTML report."""
    from specgauge.demo import DemoConfig, run_demo
    from specgauge.simulate.run import parse_ks

    run_demo(DemoConfig(out_dir=out_dir, num_prompts=num_prompts, max_concurrency=max_concurrency, ks=parse_ks(k),
                        calibration_prompts=calibration_prompts, min_speedup=min_speedup, lang=lang), console, err_console)
