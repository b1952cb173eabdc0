"""``specgauge canary-judge``: the canary judge as an HTTP service for Argo Rollouts and Flagger
(flags -> ``AnalysisConfig`` -> ``AnalysisThread``; the contract is in ``canary.analysis_service``)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, console, user_errors
from specgauge.config import MIN_SPEEDUP


@user_errors
def canary_judge(
    baseline: Annotated[str, typer.Option("--baseline", help="The stable deployment's URL (speculation off), e.g. http://llm-stable:8000.")],
    candidate: Annotated[str, typer.Option("--candidate", help="The canary (speculative) deployment's URL, same model.")],
    workload: Annotated[list[Path] | None, typer.Option("--workload", help="Requests to send each analysis (default: the built-in sample). Repeatable.")] = None,
    requests: Annotated[int, typer.Option("--requests", help="Requests per side per analysis.")] = 24,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight per side.")] = 4,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Cap each request's max_tokens (shorter analyses).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name to send (default: the candidate's first /v1/models entry).")] = None,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Practical margin of the relative judge.")] = MIN_SPEEDUP,
    min_samples: Annotated[int, typer.Option("--min-samples", help="Successful requests per side before judging (else INCONCLUSIVE); at most --requests.")] = 20,
    host: Annotated[str, typer.Option("--host", help="Listen address (0.0.0.0 in a pod).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Listen port.")] = 8080,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Environment variable holding the upstreams' API key (never printed).")] = None,
    lang: LangOpt = None,
) -> None:
    """Serve the canary judge for Argo Rollouts (web metric: GET/POST /v1/analysis) and Flagger (webhook: POST /v1/flagger)."""
    from specgauge.canary.analysis_service import AnalysisConfig, AnalysisThread
    from specgauge.canary.config import JudgeConfig

    key = os.environ.get(api_key_env) if api_key_env else None
    cfg = AnalysisConfig(baseline=baseline, candidate=candidate, workload=list(workload or []), requests=requests,
                         concurrency=concurrency, max_tokens=max_tokens, model=model, host=host, port=port, api_key=key,
                         judge=JudgeConfig(min_speedup=min_speedup, min_samples=min_samples, min_tail_samples=min_samples))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with AnalysisThread(cfg) as svc:
        from specgauge.i18n import t

        console.print(t("canary.judge_ready", url=svc.base_url), highlight=False)
        stop.wait()
