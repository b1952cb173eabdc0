"""Shared record types: what the load generator measured, one line per request.

Raw observations only (like guidellm's ``RequestTimings``): the scheduled and the actual send time,
and for every streamed chunk its arrival time and how many output tokens it carried. TTFT, TPOT,
per-token ITL and the rest are derived later (``specgauge.stats.latency``), so a record can be
re-analysed without re-running the benchmark.

Times inside a record are seconds; ``scheduled_s`` / ``sent_s`` are relative to the run start
(``RunRecord.started_at``), chunk times are relative to the request's actual send time.
"""

from __future__ import annotations

import math
import os
from enum import Enum
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class FailureKind(str, Enum):
    """Why a request did not finish cleanly. One class per request, the first that applied."""

    http_status = "http_status"  #: non-2xx status (429, 500, …); ``RequestRecord.http_status`` has it
    timeout = "timeout"  #: no complete response within the request timeout (stalls, endless bodies)
    connection_reset = "connection_reset"  #: the server closed or reset the connection mid-response
    connection_error = "connection_error"  #: could not connect at all
    stream_cut_short = "stream_cut_short"  #: stream ended without ``[DONE]`` or without final usage
    malformed_sse = "malformed_sse"  #: bytes that are not Server-Sent Events
    invalid_json = "invalid_json"  #: an SSE data line (or a plain body) that is not JSON
    error_payload = "error_payload"  #: the server sent ``{"error": …}`` instead of a completion
    worker_lost = "worker_lost"  #: the load-generator worker sending it died mid-request (``bench --ray-workers``)


class TokenCountSource(str, Enum):
    """Where the per-chunk token counts came from; derived ITLs say how exact they are."""

    usage = "usage"  #: per-chunk ``usage`` (vLLM ``continuous_usage_stats``) — exact
    timings = "timings"  #: per-chunk ``timings.predicted_n`` (llama.cpp ``timings_per_token``) — exact
    one_per_chunk = "one_per_chunk"  #: content chunks == usage.completion_tokens, so 1 each — exact
    spread = "spread"  #: final usage total spread evenly over content chunks — approximate
    none = "none"  #: no usage at all (failed or non-streamed without usage)


class Chunk(NamedTuple):
    """One streamed SSE event that carried output: arrival time (s after the request's actual
    send) and the number of output tokens it carried. Stored as ``[t, n]`` in the JSONL."""

    t: float
    n: int


class GapEnd(NamedTuple):
    """The chunk that ended one of a response's longest silences: its index in ``chunks`` (the gap is
    ``chunks[i].t - chunks[i-1].t``) and the start of the text it carried (content or tool-call
    arguments). Stored as ``[i, text]``."""

    i: int
    text: str


class SpecCounts(BaseModel):
    """Speculative-decoding counts for one request, one run or one segment (vLLM's definitions).

    A *draft* is one proposal of up to k tokens at one step; ``draft_tokens`` counts proposed
    tokens, ``accepted_tokens`` those the target kept (the bonus/correction token is not a draft
    token). ``accepted_per_pos[i]`` = drafts whose token i was accepted. Fields a source does not
    expose are None (never 0).
    """

    drafts: int | None = Field(default=None, ge=0)
    draft_tokens: int | None = Field(default=None, ge=0)
    accepted_tokens: int | None = Field(default=None, ge=0)
    accepted_per_pos: list[int] | None = None
    source: str = ""  #: e.g. "vllm:/metrics", "vllm:per-request", "llamacpp:timings"

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted tokens; NaN when nothing was drafted or a count is missing."""
        if not self.draft_tokens or self.accepted_tokens is None:
            return math.nan
        return self.accepted_tokens / self.draft_tokens

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts (vLLM's "acceptance length"); NaN without drafts."""
        if not self.drafts or self.accepted_tokens is None:
            return math.nan
        return 1.0 + self.accepted_tokens / self.drafts

    @property
    def per_position_rate(self) -> list[float]:
        """accepted_per_pos[i] / drafts; empty when unknown."""
        if not self.drafts or self.accepted_per_pos is None:
            return []
        return [a / self.drafts for a in self.accepted_per_pos]

    def __add__(self, other: SpecCounts) -> SpecCounts:
        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a + b

        pos: list[int] | None = None
        if self.accepted_per_pos is not None and other.accepted_per_pos is not None:
            n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
            a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
            b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
            pos = [x + y for x, y in zip(a, b)]
        return SpecCounts(
            drafts=add(self.drafts, other.drafts),
            draft_tokens=add(self.draft_tokens, other.draft_tokens),
            accepted_tokens=add(self.accepted_tokens, other.accepted_tokens),
            accepted_per_pos=pos,
            source=self.source if self.source == other.source else f"{self.source}+{other.source}",
        )

    @classmethod
    def from_numbers(
        cls, drafts: Any, draft_tokens: Any, accepted_tokens: Any, accepted_per_pos: list[int] | None, source: str
    ) -> SpecCounts:
        """From a server's numbers (counter floats, JSON ints); a missing one stays None."""

        def as_int(v: Any) -> int | None:
            return None if v is None else int(v)

        return cls(drafts=as_int(drafts), draft_tokens=as_int(draft_tokens), accepted_tokens=as_int(accepted_tokens),
                   accepted_per_pos=accepted_per_pos, source=source)

    @classmethod
    def total(cls, items: list[SpecCounts]) -> SpecCounts | None:
        if not items:
            return None
        out = items[0]
        for s in items[1:]:
            out = out + s
        return out


class ToolCall(BaseModel):
    """One tool call of a response (OpenAI ``tool_calls``, assembled from its streamed deltas): the
    function's name and its arguments as the server sent them (JSON text, not parsed)."""

    name: str | None = None
    arguments: str = ""
    id: str | None = None


class OutputCheck(BaseModel):
    """Whether a response's structured output is what its request asked for (``specgauge.structured``):
    tool calls that name an offered function with arguments valid against its schema, or a JSON
    document valid against ``response_format``'s. ``valid`` None: nothing to judge (an ``auto`` tool
    choice answered in text; a request whose schema is no JSON Schema, ``error`` says so)."""

    kind: Literal["tool_call", "json"]
    valid: bool | None
    items: int = 0  #: tool calls / JSON documents looked at
    error: str | None = None  #: the first problem, one line (English, stored; shown translated)


GAP_ENDS_KEPT = 4  #: the longest gaps of a response whose ending text a record keeps
GAP_TEXT_CHARS = 24  #: characters of that text kept

#: RequestRecord fields written only when set (records of runs without them keep their bytes)
_OPTIONAL_RECORD_FIELDS = ("tool_calls", "output_check", "gap_ends")


class RequestRecord(BaseModel):
    """One finished (or failed) request: one line of ``results.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    segment: str = "default"
    index: int = Field(ge=0, description="position in the workload order")
    scheduled_s: float = Field(description="when the arrival process wanted it sent (s after run start)")
    sent_s: float = Field(description="when it was actually sent (s after run start)")
    ready_s: float | None = Field(default=None, description="when the runner dispatched it, before waiting for a slot")
    started_at: float = Field(description="actual send time, Unix epoch seconds")
    ok: bool
    failure: FailureKind | None = None
    error: str | None = None
    http_status: int | None = None
    ttft_s: float | None = None  #: first output-carrying chunk (None when there was none)
    e2e_s: float | None = None  #: end of the response (``[DONE]``/body end); None on failure
    elapsed_s: float = Field(default=0.0, ge=0.0, description="send to end, whatever the outcome")
    chunks: list[Chunk] = Field(default_factory=list)
    token_counts: TokenCountSource = TokenCountSource.none
    prompt_tokens: int | None = None  #: from ``usage``
    output_tokens: int | None = None  #: from ``usage``, never from re-tokenising
    finish_reason: str | None = None
    text: str = ""
    spec: SpecCounts | None = None  #: the server's per-request speculative counts, where exposed
    extra: dict[str, Any] = Field(default_factory=dict)  #: dialect extras (timings, meta_info…)
    tool_calls: list[ToolCall] | None = None  #: OpenAI ``tool_calls`` of the response, where it made any
    output_check: OutputCheck | None = None  #: tool calls / JSON checked against the request's schema
    #: the chunks that ended the response's longest inter-chunk gaps (up to ``GAP_ENDS_KEPT``, longest
    #: first), with the text they carried: what a stall waited for (``stats.stalls``)
    gap_ends: list[GapEnd] | None = None

    @model_serializer(mode="wrap")
    def _omit_unset_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        for k in _OPTIONAL_RECORD_FIELDS:
            if k in d and d[k] is None:
                del d[k]
        return d

    @property
    def client_queue_s(self) -> float:
        """Time spent waiting for a concurrency slot (vLLM's client_queue_time)."""
        return max(0.0, self.sent_s - (self.ready_s if self.ready_s is not None else self.scheduled_s))

    @property
    def send_lag_s(self) -> float:
        """How late the load generator itself was: dispatch time - scheduled time."""
        return (self.ready_s if self.ready_s is not None else self.sent_s) - self.scheduled_s


class KvSample(BaseModel):
    """One KV-cache usage reading from ``/metrics`` during a run: seconds after sampling began, 0..1."""

    t: float
    kv_cache_usage: float


class SessionRecord(BaseModel):
    """One (re)start of a bench run, as ``run.json`` keeps it in ``sessions``: how long it ran, the
    ``/metrics`` snapshots before and after, their diff and the speculative counts from it, KV-cache
    and device-memory samples, the client's own event-loop stalls, the Ray workers where used.

    Only what the session got to is written (``model_fields_set``): an interrupted session has no
    ``counter_spec`` at all, which says "not read", while ``counter_spec: null`` says "read, and the
    server exposes no speculative counters"."""

    model_config = ConfigDict(extra="allow")

    started_at: float | None = None  #: Unix epoch seconds
    requests: int | None = None  #: requests this session was to send
    interrupted: bool | None = None  #: Ctrl-C: nothing after it was measured
    duration_s: float | None = None  #: first send to last response (the Ray workers' common start with Ray)
    ray: dict[str, Any] | None = None  #: ``scale.loadgen.public_info``: workers, clocks, per-worker chunks
    memory: dict[str, Any] | None = None  #: device memory (``loadgen.memory.MemorySampler.summary``)
    kv_samples: list[KvSample] | None = None
    client_loop: dict[str, Any] | None = None  #: the load generator's own stalls (``loadgen.client_loop``)
    server_log_memory: dict[str, Any] | None = None  #: from ``--server-log`` (``stats.server_memory``)
    counters_before: dict[str, float] | None = None  #: ``Snapshot.to_json``
    counters_after: dict[str, float] | None = None
    counter_diff: dict[str, float] | None = None  #: ``CounterDiff.to_json``
    counter_spec: SpecCounts | None = None  #: the speculative counts in the diff (the dialect's reading)
    spec_gauges: dict[str, Any] | None = None
    kv_cache: dict[str, Any] | None = None  #: the dialect's memory gauges after the run

    @model_serializer(mode="wrap")
    def _only_what_was_measured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        d: dict[str, Any] = handler(self)
        kept = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in d.items() if k in kept}

    @property
    def counters_read(self) -> bool:
        """Whether /metrics was read before and after this session (its counters cover it)."""
        return "counter_spec" in self.model_fields_set


class RunRecord(BaseModel):
    """What is stored beside the results: config (no secrets), server identity, counter snapshots."""

    model_config = ConfigDict(extra="allow")

    specgauge_version: str
    started_at: float  #: Unix epoch seconds at run start (t=0 of scheduled_s/sent_s)
    config: dict[str, Any]
    dialect: str
    server: dict[str, Any] = Field(default_factory=dict)  #: version, speculative config, models…
    #: one entry per (re)start: duration, /metrics snapshots before/after and their diff, the
    #: speculative counts from that diff, KV-cache and device-memory samples
    sessions: list[SessionRecord] = Field(default_factory=list)
    resumed_from: int = 0  #: records already present when this run (re)started
    warnings: list[str] = Field(default_factory=list)
    #: the warm-up requests (sent first, not in the results): id, ok and their token ids / per-request
    #: counters, which a stateful drafter's cache learned before the run (``stats.replay_check``)
    warmups: list[dict[str, Any]] = Field(default_factory=list)


class MetricStats(BaseModel):
    """One latency metric of a run in milliseconds, as ``vllm bench serve`` reports it: mean, median,
    std and the asked percentiles (by vLLM's label: ``"99"``, ``"99.9"``)."""

    mean: float | None = None
    median: float | None = None
    std: float | None = None
    percentiles: dict[str, float | None] = Field(default_factory=dict)


class SpecDecodeStats(BaseModel):
    """vLLM's ``spec_decode_*`` result keys: acceptance rate in percent, acceptance length (1 +
    accepted / drafts), the counts, and the per-position rates."""

    acceptance_rate: float | None = None
    acceptance_length: float | None = None
    num_drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    per_position_acceptance_rates: list[float] = Field(default_factory=list)


class SpecgaugeSummary(BaseModel):
    """``summary.json``'s ``specgauge`` block: what vLLM's keys do not say (``stats.summary``)."""

    model_config = ConfigDict(extra="allow")

    version: str
    dialect: str
    server: dict[str, Any] = Field(default_factory=dict)
    sessions: int = 0
    resumed_from: int = 0
    warnings: list[str] = Field(default_factory=list)
    latency: dict[str, Any] = Field(default_factory=dict)  #: ``LatencyMetrics.to_json``: per-token ITL, failures…
    acceptance: dict[str, Any] = Field(default_factory=dict)  #: counters, per request, agreement, gauges
    segments: dict[str, Any] = Field(default_factory=dict)
    memory: dict[str, Any] = Field(default_factory=dict)
    replay_check: dict[str, Any] | None = None  #: ``stats.replay_check.ReplayCheck``
    structured_outputs: dict[str, Any] | None = None  #: ``stats.outputs.outputs_summary`` (None: none asked for)
    stalls: dict[str, Any] | None = None  #: ``stats.stalls.StallSummary`` against the run's own TPOT


#: the traffic keys ``vllm bench serve --save-result`` writes, in its order
_VLLM_HEAD = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "request_goodput", "output_throughput", "total_token_throughput", "max_concurrent_requests",
              "max_output_tokens_per_s", "max_concurrency", "request_rate", "burstiness")


class BenchSummary(BaseModel):
    """``summary.json``: ``vllm bench serve --save-result``'s keys (same names, same meaning: vLLM
    0.32's ``benchmarks/serve.py``) at the top level, ours under ``specgauge``. Note ``*_itl_ms`` is
    per token here (a chunk of n tokens gives n gaps of g/n); vLLM's per-chunk ITL is in
    ``specgauge.latency.chunk_itl``."""

    model_config = ConfigDict(extra="forbid")

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None = None
    request_goodput: float | None = None  #: None without ``--goodput`` (as vLLM)
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    max_concurrent_requests: int = 0
    max_output_tokens_per_s: float | None = None
    max_concurrency: int | None = None
    request_rate: float | str | None = None  #: ``"inf"`` for all at once (as vLLM writes it)
    burstiness: float | None = None
    #: the selected metrics (``--percentile-metrics``: ttft, tpot, itl, e2el) in their order
    metrics: dict[str, MetricStats] = Field(default_factory=dict)
    spec_decode: SpecDecodeStats | None = None  #: None when nothing was drafted (vLLM leaves the keys out)
    specgauge: SpecgaugeSummary | None = None

    def to_vllm_json(self) -> dict[str, Any]:
        """The keys ``vllm bench serve --save-result`` writes, as it names and orders them."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _VLLM_HEAD}
        for name, m in self.metrics.items():
            out[f"mean_{name}_ms"], out[f"median_{name}_ms"], out[f"std_{name}_ms"] = m.mean, m.median, m.std
            for p, v in m.percentiles.items():
                out[f"p{p}_{name}_ms"] = v
        if self.spec_decode is not None:
            out.update({f"spec_decode_{k}": v for k, v in self.spec_decode.model_dump().items()})
        return out

    def to_json(self) -> dict[str, Any]:
        """``summary.json``: vLLM's keys, then ``specgauge``."""
        out = self.to_vllm_json()
        if self.specgauge is not None:
            out["specgauge"] = self.specgauge.model_dump(mode="json")
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchSummary:
        """Back from ``summary.json`` (or a ``vllm bench serve`` result: its other keys are ignored)."""
        metrics: dict[str, MetricStats] = {}
        for k in d:
            if k.startswith("mean_") and k.endswith("_ms"):
                name = k[len("mean_"):-len("_ms")]
                pre, post = "p", f"_{name}_ms"
                pcts = {x[len(pre):-len(post)]: d[x] for x in d
                        if x.startswith(pre) and x.endswith(post) and _is_number(x[len(pre):-len(post)])}
                metrics[name] = MetricStats(mean=d[k], median=d.get(f"median_{name}_ms"), std=d.get(f"std_{name}_ms"),
                                            percentiles=pcts)
        spec = {k[len("spec_decode_"):]: v for k, v in d.items() if k.startswith("spec_decode_")}
        return cls(**{k: d[k] for k in _VLLM_HEAD if k in d}, metrics=metrics,
                   spec_decode=SpecDecodeStats(**spec) if spec else None,
                   specgauge=SpecgaugeSummary.model_validate(d["specgauge"]) if isinstance(d.get("specgauge"), dict) else None)


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


class ResultsFile:
    """``results.jsonl``: one ``RequestRecord`` per line, appended and flushed as each request ends.

    Opening for resume reads the ids already present and cuts a torn last line (a crash in the
    middle of a write), so an appended record never lands after half a line.
    """

    def __init__(self, path: str | os.PathLike[str], fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._f: IO[str] | None = None

    def existing(self) -> list[RequestRecord]:
        """The records already there, a torn last line cut from the file first (what a resume appends to)."""
        return self.read(repair=True)

    def read(self, repair: bool = False) -> list[RequestRecord]:
        """The records of the file's complete lines; ``repair``: also cut a torn last line from the file
        (never for a file only read: ``report`` may be handed any file)."""
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            cut = raw.rfind(b"\n") + 1
            if repair:
                with open(self.path, "r+b") as f:
                    f.truncate(cut)
            raw = raw[:cut]
        out: list[RequestRecord] = []
        for i, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(RequestRecord.model_validate_json(line))
            except ValueError as e:
                raise ValueError(f"{self.path}:{i}: not a specgauge request record ({str(e).splitlines()[0]})") from None
        return out

    def open(self) -> ResultsFile:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")
        return self

    def append(self, rec: RequestRecord) -> None:
        if self._f is None:
            self.open()
        assert self._f is not None
        self._f.write(rec.model_dump_json() + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
