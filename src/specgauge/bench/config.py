"""A bench run's settings (``BenchConfig``, flags named as in ``vllm bench serve`` where they mean the
same), the requests it sends (``plan_requests``: the workload cycled ``~rN``) and when
(``arrival_process``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from specgauge.config import SpeculativeConfig
from specgauge.errors import UserError
from specgauge.loadgen import arrivals as A
from specgauge.loadgen.dialects import get_dialect
from specgauge.paths import portable_path, public_url
from specgauge.workload.plan import plan_cycle
from specgauge.workload.schema import Request

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


class BenchError(UserError):
    """A bench problem the user can fix: bad flag, unreachable server, existing results."""


class BenchConfig(BaseModel):
    """Settings of one benchmark run (names as ``vllm bench serve`` where they mean the same)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    base_url: str
    workload: list[Path] = Field(min_length=1)
    output_dir: Path
    endpoint: str | None = None  #: None: /v1/chat/completions or /v1/completions by request kind
    model: str | None = None  #: None: the first model of the server's /v1/models
    max_concurrency: int | None = Field(default=None, ge=1)
    request_rate: float = Field(default=math.inf, gt=0)
    burstiness: float = Field(default=1.0, gt=0)
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(default=None, ge=0)
    ramp_up_end_rps: float | None = Field(default=None, gt=0)
    self_timed: bool = False  #: replay the workload's own arrival_time values
    trace_speed: float = Field(default=1.0, gt=0)
    num_prompts: int | None = Field(default=None, ge=1)  #: None: every request once; more cycles
    #: cap on every request's output tokens (``max_tokens`` sent); a request's own lower ``max_tokens``
    #: stays; None: the workload's caps only (a request without one generates until EOS)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int = 0
    goodput: list[str] | None = None  #: ["ttft:MS", "tpot:MS", "e2el:MS"]
    percentile_metrics: str = "ttft,tpot,itl"
    metric_percentiles: str = "99"
    resume: bool = False
    timeout: float = Field(default=600.0, gt=0)
    warmup: int = Field(default=0, ge=0)  #: vLLM's --num-warmups: sent first, never recorded
    api_key: SecretStr | None = None
    dialect: str = "auto"
    segment_by: str | None = None
    progress: bool = True
    memory_interval: float = Field(default=1.0, gt=0)
    memory_tool_timeout: float = Field(default=5.0, gt=0)  #: seconds a GPU telemetry tool may take before it is killed
    #: the server's log file when specgauge (or you) started it: its memory lines (model weights, KV
    #: cache) are read at the end of the run; nothing else of it is kept
    server_log: Path | None = None
    fsync: bool = False
    #: send from N async Ray actors (``specgauge[ray]``; ``specgauge.scale.loadgen``); None: this process
    ray_workers: int | None = Field(default=None, ge=1)
    #: the Ray cluster: None / "auto" (RAY_ADDRESS, the latest cluster here, else a new local one) or an address
    ray_address: str | None = None
    ray_worker_cpus: float = Field(default=0.25, gt=0)  #: CPUs reserved per load-generator actor
    #: the speculative config the server runs with, when it does not say (vLLM): the replay check
    #: (``stats.replay_check``) replays the run's outputs through the same drafter
    speculative_config: SpeculativeConfig | None = None

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, v: str) -> str:
        if v != "auto":
            get_dialect(v)  # ValueError naming the known dialects (plugins included)
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v.rstrip("/")

    def percentiles(self) -> list[float]:
        try:
            ps = [float(p) for p in self.metric_percentiles.split(",") if p.strip()]
        except ValueError:
            raise BenchError(f"--metric-percentiles {self.metric_percentiles!r}: comma-separated numbers, e.g. 50,90,99") from None
        if any(not 0 <= p <= 100 for p in ps):
            raise BenchError(f"--metric-percentiles {self.metric_percentiles!r}: each must be within 0..100")
        return ps

    def selected_metrics(self) -> list[str]:
        ms = [m.strip() for m in self.percentile_metrics.split(",") if m.strip()]
        bad = [m for m in ms if m not in PERCENTILE_METRICS]
        if bad:
            raise BenchError(f"--percentile-metrics: {', '.join(bad)} unknown; choose from {', '.join(PERCENTILE_METRICS)}")
        return ms

    def public(self) -> dict[str, Any]:
        """The config as stored beside the results: secrets left out, and no absolute machine path
        (workload files relative to the output directory, the built-in sample by name, the output
        directory by its name; ``report.runs`` resolves them back)."""
        d = self.model_dump(mode="json", exclude={"api_key"})
        d["api_key_set"] = self.api_key is not None
        d["base_url"] = public_url(self.base_url)
        d["workload"] = [portable_path(p, self.output_dir) for p in self.workload]
        d["output_dir"] = Path(self.output_dir).resolve().name
        if self.server_log is not None:
            d["server_log"] = portable_path(self.server_log, self.output_dir)
        model = (d.get("speculative_config") or {}).get("model")
        if model and Path(model).exists():  # a draft model directory: no machine path in the results
            d["speculative_config"]["model"] = portable_path(Path(model), self.output_dir)
        return d


def plan_requests(items: Sequence[Request], num_prompts: int | None, max_tokens: int | None = None) -> list[Request]:
    """The first ``num_prompts`` requests, cycling (ids suffixed ``~rN``) when more are asked; with
    ``max_tokens``, each request's ``max_tokens`` capped at it (its own, where lower, kept)."""
    if not items:
        raise BenchError("the workload has no requests")
    if max_tokens is not None:
        items = [r if r.max_tokens is not None and r.max_tokens <= max_tokens else r.model_copy(update={"max_tokens": max_tokens})
                 for r in items]
    return plan_cycle(items, num_prompts, lambda req, rid: req.model_copy(update={"id": rid}), lambda req: req.id)


def arrival_process(cfg: BenchConfig, reqs: Sequence[Request]) -> A.Arrivals:
    try:
        if cfg.self_timed:
            ts = [r.arrival_time for r in reqs]
            if any(t is None for t in ts):
                raise BenchError("--self-timed needs an arrival_time on every workload request")
            return A.Trace([float(t) for t in ts if t is not None], cfg.trace_speed)
        return A.from_flags(cfg.request_rate, cfg.burstiness, cfg.ramp_up_strategy, cfg.ramp_up_start_rps, cfg.ramp_up_end_rps)
    except ValueError as e:
        raise BenchError(str(e)) from None
