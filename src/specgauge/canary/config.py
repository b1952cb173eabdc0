"""The canary's settings: what the CLI's flags fill, with the same defaults as the library."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator, model_validator

from specgauge.config import MIN_SPEEDUP, ConfigError
from specgauge.paths import public_url
from specgauge.stats.collapse import CollapseCriteria
from specgauge.stats.stalls import StallCriteria
from specgauge.units import parse_duration  # noqa: F401  (the one duration grammar; cli.canary imports it here)

LATENCY_METRICS = ("ttft", "tpot", "e2e")
GUARDRAILS = ("failure_rate", "ttft_p95", "tpot_p95", "e2e_p95", "acceptance", "structured_outputs", "stalls", "acceptance_replay")
def parse_steps(text: str, flag: str = "--steps") -> list[float]:
    """``1,5,25,50,100`` -> [1.0, 5.0, 25.0, 50.0, 100.0]: increasing percentages in (0, 100]."""
    try:
        steps = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected percentages like 1,5,25,50,100") from None
    return check_steps(steps, flag)


def check_steps(steps: list[float], flag: str = "--steps") -> list[float]:
    if not steps:
        raise ConfigError(f"{flag}: give at least one step, e.g. 1,5,25,50,100")
    if any(not 0 < s <= 100 for s in steps):
        raise ConfigError(f"{flag} {steps}: every step is a percentage in (0, 100]")
    if any(b <= a for a, b in zip(steps, steps[1:], strict=False)):
        raise ConfigError(f"{flag} {steps}: steps must increase")
    return steps


class Guardrails(BaseModel):
    """Fixed limits on the candidate alone, checked first each interval. ``critical`` ones roll
    back at once when they fail; the others count as a failed evaluation."""

    max_failure_rate: float = Field(default=0.01, ge=0, le=1, description="failed share of candidate requests; failed when a one-sided binomial test says the rate is above it")
    ttft_p95_ms: float | None = Field(default=None, gt=0)
    tpot_p95_ms: float | None = Field(default=None, gt=0)
    e2e_p95_ms: float | None = Field(default=None, gt=0)
    min_acceptance_rate: float | None = Field(default=None, ge=0, le=1, description="draft acceptance floor, from the candidate's counters")
    min_draft_tokens: int = Field(default=100, ge=1, description="drafted tokens a window needs before the acceptance floor is judged")
    critical: list[str] = Field(default_factory=lambda: ["failure_rate"])

    @field_validator("critical")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        bad = [g for g in v if g not in GUARDRAILS]
        if bad:
            raise ValueError(f"unknown guardrail {bad[0]!r}; choose from {', '.join(GUARDRAILS)}")
        return v


class JudgeConfig(BaseModel):
    """The relative judge and the evaluation's sample rules."""

    guardrails: Guardrails = Field(default_factory=Guardrails)
    metrics: list[str] = Field(default_factory=lambda: list(LATENCY_METRICS))
    speed_metric: str = Field(default="tpot", description="the metric whose measured speedup allows promotion beyond max_weight_without_speedup (e2e when too few tpot values)")
    min_samples: int = Field(default=20, ge=2, description="successful requests per side before the window is judged")
    min_tail_samples: int = Field(default=20, ge=2, description="values per side before the p95 ratio is judged (the p95 of fewer is the maximum)")
    min_speedup: float = Field(default=MIN_SPEEDUP, ge=1.0, description="practical margin: faster means speedup CI above it; slower means a significant slowdown beyond it")
    confidence: float = Field(default=0.99, gt=0.5, lt=1.0)
    alpha: float = Field(default=0.01, gt=0, lt=1, description="significance of the failure tests (Fisher, binomial)")
    max_divergence: float = Field(default=0.02, ge=0, le=1, description="share of greedy output pairs allowed to differ")
    min_pairs: int = Field(default=5, ge=1, description="greedy pairs needed before exact match is judged")
    pass_score: float = Field(default=95.0, ge=0, le=100, description="score (share of decided checks passed, 0-100) a window needs to pass")
    resamples: int = Field(default=2000, ge=200)
    seed: int = 0
    stalls: StallCriteria = Field(default_factory=StallCriteria, description="what counts as a stall: a gap above factor x the window's baseline TPOT and min_gap_ms")
    collapse: CollapseCriteria = Field(default_factory=CollapseCriteria, description="when the candidate's acceptance counts as collapsed against the replay of its own outputs")

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in LATENCY_METRICS]
        if bad:
            raise ValueError(f"unknown metric {bad[0]!r}; choose from {', '.join(LATENCY_METRICS)}")
        return v

    @field_validator("speed_metric")
    @classmethod
    def _speed(cls, v: str) -> str:
        if v not in LATENCY_METRICS:
            raise ValueError(f"unknown speed metric {v!r}; choose from {', '.join(LATENCY_METRICS)}")
        return v


class CanaryConfig(BaseModel):
    """Everything ``specgauge canary`` needs. Times in seconds, weights in percent."""

    baseline: str
    candidate: str
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535, description="0: any free port")
    steps: list[float] = Field(default_factory=lambda: [1.0, 5.0, 25.0, 50.0, 100.0])
    interval_s: float = Field(default=60.0, gt=0)
    shadow: bool = False
    failure_limit: int = Field(default=3, ge=1, description="failed evaluations that roll back")
    max_weight_without_speedup: float = Field(default=50.0, ge=0, le=100, description="steps above it need a measured speedup")
    max_window_intervals: int = Field(default=10, ge=1, description="a held window is restarted after this many intervals")
    session_header: str = "X-Session-Id"
    hash_seed: str = ""
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    out_dir: Path = Path("canary")
    timeout_s: float = Field(default=600.0, gt=0, description="one whole request")
    first_byte_timeout_s: float = Field(default=30.0, gt=0, description="a candidate stream without a first byte by then is retried on the baseline")
    stall_timeout_s: float = Field(default=60.0, gt=0, description="longest silence inside a stream")
    connect_timeout_s: float = Field(default=5.0, gt=0)
    header_timeout_s: float = Field(default=30.0, gt=0, description="a client connection without a complete request line and headers by then (idle keep-alive ones too) is closed")
    body_timeout_s: float = Field(default=60.0, gt=0, description="a request body not received by then is answered 408")
    max_body_bytes: int = Field(default=64 << 20, ge=1024, description="one request body (413 past it)")
    max_inflight_bytes: int = Field(default=256 << 20, ge=1024, description="all request bodies the proxy holds at once (503 past it)")
    shadow_max_inflight: int = Field(default=64, ge=1)
    keep_outputs: bool = False
    reset_state: bool = False
    duration_s: float | None = Field(default=None, gt=0)
    tag_responses: bool = True
    candidate_dialect: str = "auto"
    #: the candidate's speculative config (vLLM's JSON): each window replays its outputs through the same
    #: drafter (guardrail:acceptance_replay); needs the responses' token ids (``ask_token_ids``)
    speculative_config: dict[str, Any] | None = None
    ask_token_ids: bool | None = Field(default=None, description="add return_token_ids to what the candidate gets (vLLM's "
                                       "dialect) and take the ids out of what clients did not ask for; None: when "
                                       "speculative_config is set (guardrail:acceptance_replay)")
    mode: Literal["live", "shadow"] = "live"

    @field_validator("baseline", "candidate")
    @classmethod
    def _url(cls, v: str) -> str:
        p = urlsplit(v)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise ValueError(f"{v!r} is not an http(s) URL like http://127.0.0.1:8000")
        return v.rstrip("/")

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: list[float]) -> list[float]:
        return check_steps(v)

    @model_validator(mode="after")
    def _mode(self) -> CanaryConfig:
        self.mode = "shadow" if self.shadow else "live"
        return self

    def asks_token_ids(self) -> bool:
        """Whether the proxy asks the candidate for token ids (``ask_token_ids``, by default when the replay
        guardrail is on)."""
        return self.speculative_config is not None if self.ask_token_ids is None else self.ask_token_ids

    def public(self) -> dict[str, object]:
        """The config as logs and results may carry it (no credentials, no absolute paths)."""
        d = self.model_dump(mode="json", exclude={"out_dir", "reset_state"})
        d["baseline"], d["candidate"] = public_url(self.baseline), public_url(self.candidate)
        d["out_dir"] = self.out_dir.name
        return d
