"""Prometheus metrics with vLLM's names, labels and meaning (``vllm:`` prefix, ``model_name`` and
``engine`` labels). Spec-decode counters exist only when speculation is on, as in vLLM.

Fed from the engine thread by :class:`specgauge.engine.runner.EngineRunner`, one call per step output.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specgauge.engine.step_records import StepOutput

# vLLM v1's buckets (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


class EngineMetrics:
    def __init__(self, model_name: str, num_spec_tokens: int, engine: str = "0") -> None:
        self.registry = CollectorRegistry()
        r, lab = self.registry, ["model_name", "engine"]
        self.labels = {"model_name": model_name, "engine": engine}
        L = self.labels
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lab, registry=r).labels(**L)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", lab, registry=r
        ).labels(**L)
        self.request_success = Counter(
            "vllm:request_success", "Count of successfully processed requests.", [*lab, "finished_reason"], registry=r
        )
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lab, registry=r).labels(**L)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lab, registry=r).labels(**L)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lab, registry=r).labels(**L)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lab,
                              buckets=TTFT_BUCKETS, registry=r).labels(**L)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lab,
                             buckets=ITL_BUCKETS, registry=r).labels(**L)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", lab,
                             buckets=E2E_BUCKETS, registry=r).labels(**L)
        self.k = num_spec_tokens
        if num_spec_tokens:
            self.drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", lab, registry=r).labels(**L)
            self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", lab, registry=r).labels(**L)
            self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", lab, registry=r).labels(**L)
            per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                              [*lab, "position"], registry=r)
            self.per_pos = [per_pos.labels(**L, position=str(i)) for i in range(num_spec_tokens)]

    def observe_step(self, o: StepOutput) -> None:
        """Counters for one request's step (call once per StepOutput)."""
        if o.new_token_ids:
            self.generation_tokens.inc(len(o.new_token_ids))
        if self.k and o.num_drafted > 0:
            self.drafts.inc()
            self.draft_tokens.inc(o.num_drafted)
            self.accepted.inc(o.num_accepted)
            for i in range(o.num_accepted):
                self.per_pos[i].inc()

    def observe_finished(self, reason: str) -> None:
        self.request_success.labels(**self.labels, finished_reason=reason).inc()

    def set_state(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)

    def set_memory(self, report: dict[str, dict[str, int]]) -> None:
        """What the engine holds (``Engine.memory_bytes``), as gauges vLLM has no names for:
        ``specgauge:model_weight_bytes{role}``, ``specgauge:kv_cache_capacity_bytes{role}`` and
        ``specgauge:kv_cache_capacity_tokens`` (the capacity ``vllm:kv_cache_usage_perc`` is a share of)."""
        r, lab = self.registry, ["model_name", "engine", "role"]
        weights = Gauge("specgauge:model_weight_bytes", "Bytes of model weights held, by role (target, draft).", lab, registry=r)
        kv = Gauge("specgauge:kv_cache_capacity_bytes", "Bytes allocated for the KV cache, by role (target, draft).", lab, registry=r)
        for role, d in report.items():
            if "weight_bytes" in d:
                weights.labels(**self.labels, role=role).set(d["weight_bytes"])
            if "kv_capacity_bytes" in d:
                kv.labels(**self.labels, role=role).set(d["kv_capacity_bytes"])
        if "kv_capacity_tokens" in report.get("target", {}):
            Gauge("specgauge:kv_cache_capacity_tokens", "Target KV-cache capacity in tokens.", ["model_name", "engine"],
                  registry=r).labels(**self.labels).set(report["target"]["kv_capacity_tokens"])

    def render(self) -> bytes:
        return generate_latest(self.registry)
