"""``specgauge canary``: flags -> ``CanaryConfig`` -> ``run_canary``.

Exit status: 0 the roll-out completed (the last step passed), 1 it rolled back, 3 it stopped
undecided, 2 a user error (an unreachable upstream, a bad flag, a port in use).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from specgauge.cli.common import LangOpt, console, err_console, user_errors
from specgauge.config import MIN_SPEEDUP

if TYPE_CHECKING:
    from specgauge.canary import CanaryConfig, CanaryResult


def _names(text: str) -> list[str]:
    return [] if text.strip().lower() in ("", "none") else [s.strip() for s in text.split(",") if s.strip()]


def _event_line(e: dict[str, Any]) -> str | None:
    from specgauge.i18n import t, translate, word

    kind = e.get("event")
    if kind in ("start", "resume"):
        st = e.get("state", {})
        return t(f"canary.ev.{kind}", w=f"{st.get('weight'):g}", n=st.get("failed_evaluations", 0))
    if kind == "evaluation":
        d, j, w = e["decision"], e["judgement"], e["window"]
        to = t("canary.ev.to", w=format(d["to_weight"], "g")) if d["to_weight"] != d["from_weight"] else ""
        return t("canary.ev.eval", w=f"{w['weight']:g}", outcome=word("canary.outcome", j["outcome"]),
                 action=word("canary.action", d["action"]), to=to, nb=w["requests"]["baseline"], nc=w["requests"]["candidate"],
                 reason=translate(d["reason"]))
    if kind == "error":
        return t("canary.ev.error", error=translate(str(e.get("error"))))
    return None


@user_errors
def canary(
    baseline: Annotated[str, typer.Option("--baseline", help="The deployment serving today (speculation off), e.g. http://10.0.0.1:8000.")],
    candidate: Annotated[str, typer.Option("--candidate", help="The speculative deployment, same model.")],
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port the proxy listens on (0: any free port).")] = 8080,
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback unless told otherwise).")] = "127.0.0.1",
    steps: Annotated[str, typer.Option("--steps", help="Candidate weights in percent, in order.")] = "1,5,25,50,100",
    interval: Annotated[str, typer.Option("--interval", help="Evaluation interval: 60s, 5m, 500ms.")] = "60s",
    shadow: Annotated[bool, typer.Option("--shadow", help="Mirror a copy of baseline requests to the candidate (steps = mirrored share); clients only see the baseline.")] = False,
    failure_limit: Annotated[int, typer.Option("--failure-limit", min=1, help="Failed evaluations that roll back (weight 0).")] = 3,
    min_speedup: Annotated[float, typer.Option("--min-speedup", min=1.0, help="Practical margin: a gain must clear it; a slowdown beyond it fails.")] = MIN_SPEEDUP,
    max_weight_without_speedup: Annotated[float, typer.Option("--max-weight-without-speedup", min=0, max=100, help="Steps above this need a measured speedup beyond --min-speedup.")] = 50.0,
    max_failure_rate: Annotated[float, typer.Option("--max-failure-rate", min=0, max=1, help="Guardrail: candidate failure rate (binomial test).")] = 0.01,
    ttft_p95_ms: Annotated[float | None, typer.Option("--ttft-p95-ms", help="Guardrail: candidate TTFT p95 SLO.")] = None,
    tpot_p95_ms: Annotated[float | None, typer.Option("--tpot-p95-ms", help="Guardrail: candidate TPOT p95 SLO.")] = None,
    e2e_p95_ms: Annotated[float | None, typer.Option("--e2e-p95-ms", help="Guardrail: candidate E2E p95 SLO.")] = None,
    min_acceptance_rate: Annotated[float | None, typer.Option("--min-acceptance-rate", min=0, max=1, help="Guardrail: draft acceptance floor (candidate's counters).")] = None,
    min_draft_tokens: Annotated[int, typer.Option("--min-draft-tokens", min=1, help="Drafted tokens a window needs before the floor is judged.")] = 100,
    critical: Annotated[str, typer.Option("--critical", help="Guardrails that roll back at once: failure_rate, ttft_p95, tpot_p95, e2e_p95, acceptance (or none).")] = "failure_rate",
    metrics: Annotated[str, typer.Option("--metrics", help="Latency metrics the relative judge compares.")] = "ttft,tpot,e2e",
    speed_metric: Annotated[str, typer.Option("--speed-metric", help="Metric whose speedup allows promotion beyond --max-weight-without-speedup.")] = "tpot",
    min_samples: Annotated[int, typer.Option("--min-samples", min=2, help="Successful requests per side before a window is judged.")] = 20,
    confidence: Annotated[float, typer.Option("--confidence", help="Confidence of the shift and p95 intervals.")] = 0.99,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance of the failure tests.")] = 0.01,
    max_divergence: Annotated[float, typer.Option("--max-divergence", min=0, max=1, help="Share of greedy output pairs allowed to differ.")] = 0.02,
    min_pairs: Annotated[int, typer.Option("--min-pairs", min=1, help="Greedy pairs needed before exact match is judged.")] = 5,
    pass_score: Annotated[float, typer.Option("--pass-score", min=0, max=100, help="Score (share of decided checks passed) a window needs.")] = 95.0,
    session_header: Annotated[str, typer.Option("--session-header", help="Header naming the session (else the body's 'user').")] = "X-Session-Id",
    hash_seed: Annotated[str, typer.Option("--hash-seed", help="Salt of the session hash (another value picks other users).")] = "",
    out_dir: Annotated[Path, typer.Option("--out-dir", "-o", help="Decision log, state, per-request records, summary.")] = Path("canary"),
    keep_outputs: Annotated[bool, typer.Option("--keep-outputs", help="Keep output texts in the per-request records (dropped by default).")] = False,
    reset_state: Annotated[bool, typer.Option("--reset-state", help="Start from the first step even if --out-dir has a saved state.")] = False,
    duration: Annotated[str | None, typer.Option("--duration", help="Stop after this long (default: until Ctrl-C / SIGTERM).")] = None,
    first_byte_timeout: Annotated[str, typer.Option("--first-byte-timeout", help="A candidate stream without a first byte by then is retried on the baseline.")] = "30s",
    stall_timeout: Annotated[str, typer.Option("--stall-timeout", help="Longest silence inside a response.")] = "60s",
    timeout: Annotated[str, typer.Option("--timeout", help="One whole request.")] = "600s",
    header_timeout: Annotated[str, typer.Option("--header-timeout", help="A client connection without a complete request head by then (idle ones too) is closed.")] = "30s",
    body_timeout: Annotated[str, typer.Option("--body-timeout", help="A request body not received by then is answered 408.")] = "60s",
    max_body_bytes: Annotated[int, typer.Option("--max-body-bytes", min=1024, help="Largest request body (413 past it).")] = 64 << 20,
    max_inflight_bytes: Annotated[int, typer.Option("--max-inflight-bytes", min=1024, help="All request bodies held at once (503 past it).")] = 256 << 20,
    candidate_dialect: Annotated[str, typer.Option("--candidate-dialect", help="auto, vllm, llamacpp, sglang, embedded: how to read its counters.")] = "auto",
    tag_responses: Annotated[bool, typer.Option("--tag-responses/--no-tag-responses", help="Add X-Specgauge-Canary: baseline|candidate to responses.")] = True,
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="The candidate's speculative config (vLLM's JSON): each window replays its outputs through the same drafter and fails guardrail:acceptance_replay when its acceptance collapses below them (needs token ids: see --ask-token-ids).")] = None,
    ask_token_ids: Annotated[bool | None, typer.Option("--ask-token-ids/--no-ask-token-ids", help="Add return_token_ids to requests forwarded to a vLLM-dialect candidate (not the baseline) and take the ids out of responses whose client did not ask; default: on with --speculative-config.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json at the end instead of text.")] = False,
    lang: LangOpt = None,
) -> None:
    """Canary roll-out: a proxy that sends a growing, sticky share of live traffic to the speculative
    deployment, judges it each interval against the baseline, and falls back on its own.

    Exit status: 0 complete, 1 rolled back, 3 undecided, 2 user error.
    """
    from specgauge.canary import CanaryConfig, Guardrails, JudgeConfig
    from specgauge.canary.config import parse_duration, parse_steps
    from specgauge.config import SpeculativeConfig

    cfg = CanaryConfig(
        baseline=baseline, candidate=candidate, host=host, port=port, steps=parse_steps(steps),
        interval_s=parse_duration(interval, "--interval"), shadow=shadow, failure_limit=failure_limit,
        max_weight_without_speedup=max_weight_without_speedup, session_header=session_header, hash_seed=hash_seed,
        judge=JudgeConfig(
            guardrails=Guardrails(max_failure_rate=max_failure_rate, ttft_p95_ms=ttft_p95_ms, tpot_p95_ms=tpot_p95_ms,
                                  e2e_p95_ms=e2e_p95_ms, min_acceptance_rate=min_acceptance_rate,
                                  min_draft_tokens=min_draft_tokens, critical=_names(critical)),
            metrics=_names(metrics), speed_metric=speed_metric, min_samples=min_samples,
            min_speedup=min_speedup, confidence=confidence, alpha=alpha, max_divergence=max_divergence,
            min_pairs=min_pairs, pass_score=pass_score,
        ),
        out_dir=out_dir, keep_outputs=keep_outputs, reset_state=reset_state,
        duration_s=parse_duration(duration, "--duration") if duration else None,
        first_byte_timeout_s=parse_duration(first_byte_timeout, "--first-byte-timeout"),
        stall_timeout_s=parse_duration(stall_timeout, "--stall-timeout"), timeout_s=parse_duration(timeout, "--timeout"),
        header_timeout_s=parse_duration(header_timeout, "--header-timeout"),
        body_timeout_s=parse_duration(body_timeout, "--body-timeout"), max_body_bytes=max_body_bytes,
        max_inflight_bytes=max_inflight_bytes,
        candidate_dialect=candidate_dialect, tag_responses=tag_responses,
        speculative_config=SpeculativeConfig.from_json(speculative_config).model_dump(exclude_none=True) if speculative_config else None,
        ask_token_ids=ask_token_ids,
    )
    _roll_out(cfg, shadow=shadow, steps=steps, interval=interval, as_json=as_json)


def _roll_out(cfg: CanaryConfig, *, shadow: bool, steps: str, interval: str, as_json: bool) -> NoReturn:
    """The proxy until the roll-out ends: events on stderr as they come, the summary at the end, and
    the roll-out's exit status."""
    from specgauge.canary import run_canary

    ready = functools.partial(_print_ready, shadow=shadow, steps=steps, interval=interval,
                              log=cfg.out_dir / "decisions.jsonl")
    result = run_canary(cfg, on_event=_print_event, on_ready=ready)
    _print_result(result, as_json=as_json, summary=cfg.out_dir / "summary.json")
    raise typer.Exit(result.exit_code)


def _print_event(e: dict[str, Any]) -> None:
    line = _event_line(e)
    if line is not None:
        err_console.print(line, highlight=False, markup=False)


def _print_ready(url: str, *, shadow: bool, steps: str, interval: str, log: Path) -> None:
    from specgauge.i18n import t

    mode = t("canary.ready.mirror") if shadow else t("canary.ready.route")
    err_console.print(t("canary.ready", url=url, mode=mode, steps=steps, interval=interval, path=log),
                      highlight=False, markup=False)


def _print_result(result: CanaryResult, *, as_json: bool, summary: Path) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2) + "\n")
        return
    from specgauge.canary import format_summary
    from specgauge.i18n import t

    console.print(format_summary(result), highlight=False, markup=False)
    console.print(t("canary.summary_path", path=summary), highlight=False, markup=False)
