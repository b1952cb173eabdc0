"""Latency and throughput from request records, with ``vllm bench serve``'s definitions.

Per request (successful only, as vLLM):
- TTFT: first output-carrying chunk after the actual send.
- E2E (vLLM's E2EL): end of the response after the actual send.
- TPOT = (E2E - TTFT) / (output_tokens - 1), defined when output_tokens > 1.
- ITL **per token**: a chunk carrying n tokens that arrived g seconds after the previous
  output chunk contributes n values g/n (under speculation one chunk often carries several
  tokens; counting it as one gap would overstate ITL n-fold). Tokens that arrive in the first
  chunk have no inter-token gap and contribute none. Σ ITL = last chunk - first chunk.
- chunk ITL: vLLM's own ITL (one value per chunk gap), kept for comparison.
Output token counts come from ``usage``, never from text. Empty data: NaN with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specgauge.distributions import DEFAULT_PERCENTILES, Dist, describe
from specgauge.records import Chunk, FailureKind, RequestRecord

GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def per_token_itls(chunks: Sequence[Chunk]) -> list[float]:
    """Per-token inter-token latencies (seconds): each chunk's gap spread over its tokens."""
    out: list[float] = []
    prev: float | None = None
    for c in chunks:
        if c.n <= 0 and prev is not None:
            continue  # a chunk without tokens (text with unknown count) does not end a gap
        if prev is not None:
            g = (c.t - prev) / c.n
            out.extend([g] * c.n)
        prev = c.t
    return out


def chunk_itls(chunks: Sequence[Chunk]) -> list[float]:
    """vLLM's ITL: one gap per output chunk after the first."""
    return [b.t - a.t for a, b in zip(chunks, chunks[1:])]


def tpot(rec: RequestRecord) -> float | None:
    if not rec.ok or rec.ttft_s is None or rec.e2e_s is None or not rec.output_tokens or rec.output_tokens <= 1:
        return None
    return (rec.e2e_s - rec.ttft_s) / (rec.output_tokens - 1)


def parse_goodput(pairs: Sequence[str] | Mapping[str, float] | None) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` (ms) -> {"ttft": 500.0, …}; names as in ``vllm bench serve``."""
    if not pairs:
        return {}
    if isinstance(pairs, Mapping):
        items = list(pairs.items())
    else:
        items = []
        for p in pairs:
            name, sep, val = str(p).partition(":")
            if not sep:
                raise ValueError(f"goodput SLO {p!r}: write it as NAME:MILLISECONDS, e.g. ttft:500")
            try:
                items.append((name.strip(), float(val)))
            except ValueError:
                raise ValueError(f"goodput SLO {p!r}: {val!r} is not a number of milliseconds") from None
    out: dict[str, float] = {}
    for name, v in items:
        if name not in GOODPUT_METRICS:
            raise ValueError(f"goodput SLO {name!r}: choose one of {', '.join(GOODPUT_METRICS)}")
        if not v >= 0:
            raise ValueError(f"goodput SLO {name}: {v} ms must be >= 0")
        out[name] = float(v)
    return out


def is_good(rec: RequestRecord, slo_ms: Mapping[str, float]) -> bool:
    """vLLM's rule: every given SLO met; a request with <= 1 output token has TPOT 0."""
    if not rec.ok:
        return False
    vals = {"ttft": rec.ttft_s, "tpot": tpot(rec) or 0.0, "e2el": rec.e2e_s}
    for name, limit in slo_ms.items():
        v = vals[name]
        if v is None or v * 1000.0 > limit:
            return False
    return True


@dataclass
class LatencyMetrics:
    """One group of requests (the run, or one segment). Times in seconds."""

    requests: int
    completed: int
    failed: int
    failures: dict[str, int]
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    request_goodput: float | None
    ttft: Dist
    tpot: Dist
    itl: Dist
    chunk_itl: Dist
    e2el: Dist
    client_queue: Dist
    send_lag: Dist  #: dispatch - scheduled time: the load generator's own lateness (slot waits excluded)
    max_concurrent_requests: int
    max_output_tokens_per_s: float = math.nan
    token_count_sources: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def failure_rate(self) -> float:
        return self.failed / self.requests if self.requests else math.nan

    def dists(self) -> dict[str, Dist]:
        return {"ttft": self.ttft, "tpot": self.tpot, "itl": self.itl, "chunk_itl": self.chunk_itl, "e2el": self.e2el}

    def to_json(self) -> dict[str, Any]:
        from specgauge.distributions import finite_or_none

        out: dict[str, Any] = {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "failure_rate": finite_or_none(self.failure_rate),
            "failures": self.failures,
            "duration_s": self.duration_s,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": finite_or_none(self.request_throughput),
            "output_throughput": finite_or_none(self.output_throughput),
            "total_token_throughput": finite_or_none(self.total_token_throughput),
            "request_goodput": finite_or_none(self.request_goodput) if self.request_goodput is not None else None,
            "max_concurrent_requests": self.max_concurrent_requests,
            "max_output_tokens_per_s": finite_or_none(self.max_output_tokens_per_s),
            "token_count_sources": self.token_count_sources,
        }
        for name, d in self.dists().items():
            out[name] = d.scaled(1000.0).to_json("ms")
        out["client_queue"] = self.client_queue.scaled(1000.0).to_json("ms")
        out["send_lag"] = self.send_lag.scaled(1000.0).to_json("ms")
        if self.reasons:
            out["reasons"] = self.reasons
        return out


def _peak_concurrency(recs: Sequence[RequestRecord]) -> int:
    ev: list[tuple[float, int]] = []
    for r in recs:
        if r.ok and r.e2e_s is not None:
            ev.append((r.sent_s, 1))
            ev.append((r.sent_s + r.e2e_s, -1))
    ev.sort()
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return peak


def _peak_output_tokens_per_s(recs: Sequence[RequestRecord]) -> float:
    """vLLM's ``max_output_tokens_per_s`` — output tokens in the busiest 1-second bucket, buckets counted
    from the first send — except that a bucket the run only partly covers counts at its own length: the
    last one (the first send to the last token is not a whole number of seconds) is tokens / its length,
    merged into the bucket before it when shorter than half a second. vLLM counts a partial bucket as a
    whole second, so a run under a second (or with a short tail) showed a "peak" below its mean rate;
    here the buckets' rates average, weighted by length, to the mean over the tokens' span, so the peak
    is never below the mean output throughput.

    Example: tokens at 0.2 s ×100, 1.1 s ×100, 2.3 s ×30, last at 2.3 s: buckets [0,1) 100, [1,2) 100,
    [2,2.3] 30 → the tail (0.3 s < 0.5 s) joins [1,2): 130 / 1.3 s = 100 tok/s; peak 100 (vLLM: 100)."""
    ok = [r for r in recs if r.ok and r.chunks]
    if not ok:
        return math.nan
    t0 = min(r.started_at for r in ok)
    buckets: dict[int, int] = {}
    end = 0.0
    for r in ok:
        base = r.started_at - t0
        for c in r.chunks:
            b = int(base + c.t)
            buckets[b] = buckets.get(b, 0) + c.n
            end = max(end, base + c.t)
    last = int(end)
    widths = {b: 1.0 for b in buckets}
    tail = end - last  # the length of the last bucket that the tokens' span covers
    if last in buckets:
        if tail >= 0.5 or last == 0:
            widths[last] = max(tail, 1e-3)
        else:  # a short tail: counted with the bucket before it
            buckets[last - 1] = buckets.get(last - 1, 0) + buckets.pop(last)
            widths[last - 1] = 1.0 + tail
            widths.pop(last)
    return float(max(n / widths[b] for b, n in buckets.items()))


def latency_metrics(
    records: Sequence[RequestRecord],
    duration_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    goodput_ms: Mapping[str, float] | None = None,
) -> LatencyMetrics:
    ok = [r for r in records if r.ok]
    reasons: dict[str, str] = {}
    failures: dict[str, int] = {}
    for r in records:
        if not r.ok:
            k = (r.failure or FailureKind.connection_error).value
            failures[k] = failures.get(k, 0) + 1
    no_ok = "no successful request" if not ok else None
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [t for r in ok if (t := tpot(r)) is not None]
    itls: list[float] = []
    citls: list[float] = []
    for r in ok:
        itls.extend(per_token_itls(r.chunks))
        citls.extend(chunk_itls(r.chunks))
    e2es = [r.e2e_s for r in ok if r.e2e_s is not None]
    queue = [r.client_queue_s for r in ok]
    lag = [r.send_lag_s for r in records]
    in_tok = sum(r.prompt_tokens or 0 for r in ok)
    out_tok = sum(r.output_tokens or 0 for r in ok)
    dur = duration_s if duration_s > 0 else math.nan
    if not duration_s > 0:
        reasons["throughput"] = "run duration is zero"
    good: float | None = None
    if goodput_ms:
        good = sum(1 for r in ok if is_good(r, goodput_ms)) / dur
    srcs: dict[str, int] = {}
    for r in ok:
        srcs[r.token_counts.value] = srcs.get(r.token_counts.value, 0) + 1
    ttft_d = describe(ttfts, percentiles, no_ok or "no response carried output")
    tpot_d = describe(tpots, percentiles, no_ok or "no response had more than one output token")
    itl_d = describe(itls, percentiles, no_ok or "no response had two output chunks")
    citl_d = describe(citls, percentiles, no_ok or "no response had two output chunks")
    e2e_d = describe(e2es, percentiles, no_ok or "no data")
    for name, d in (("ttft", ttft_d), ("tpot", tpot_d), ("itl", itl_d), ("e2el", e2e_d)):
        if d.reason:
            reasons[name] = d.reason
    return LatencyMetrics(
        requests=len(records),
        completed=len(ok),
        failed=len(records) - len(ok),
        failures=failures,
        duration_s=duration_s,
        total_input_tokens=in_tok,
        total_output_tokens=out_tok,
        request_throughput=len(ok) / dur,
        output_throughput=out_tok / dur,
        total_token_throughput=(in_tok + out_tok) / dur,
        request_goodput=good,
        ttft=ttft_d,
        tpot=tpot_d,
        itl=itl_d,
        chunk_itl=citl_d,
        e2el=e2e_d,
        client_queue=describe(queue, percentiles, no_ok or "no data"),
        send_lag=describe(lag, (50.0, 99.0), "no request"),
        max_concurrent_requests=_peak_concurrency(records),
        max_output_tokens_per_s=_peak_output_tokens_per_s(records),
        token_count_sources=srcs,
        reasons=reasons,
    )


def run_duration(records: Sequence[RequestRecord]) -> float:
    """First actual send to last request end (wall clock, failed requests included)."""
    if not records:
        return 0.0
    start = min(r.started_at for r in records)
    return float(np.max([r.started_at + r.elapsed_s for r in records]) - start)
