"""The runner against the scripted loopback server: per-chunk token counts, schedule, classification."""

from __future__ import annotations

import asyncio

import pytest

from specgauge.loadgen.dialects import get_dialect
from specgauge.loadgen.fakeserver import FakeServer
from specgauge.loadgen.runner import Runner, RunnerSettings, build_body, new_session
from specgauge.records import FailureKind, RequestRecord, TokenCountSource
from specgauge.workload.schema import ApiKind, Message, Request


def creq(i: int, prompt: str, chat: bool = False) -> Request:
    if chat:
        return Request(id=f"r{i}", api=ApiKind.chat, messages=[Message(role="user", content=prompt)], max_tokens=32)
    return Request(id=f"r{i}", api=ApiKind.completion, prompt=prompt, max_tokens=32)


def run(srv: FakeServer, reqs: list[Request], times: list[float] | None = None, dialect: str = "vllm",
        timeout: float = 5.0, max_concurrency: int | None = None) -> list[RequestRecord]:
    seen: list[RequestRecord] = []

    async def go() -> list[RequestRecord]:
        async with new_session(max_concurrency) as s:
            r = Runner(RunnerSettings(srv.base_url, "fake", None, max_concurrency, timeout), get_dialect(dialect), s, seen.append)
            return await r.run([(i, q, (times or [0.0] * len(reqs))[i]) for i, q in enumerate(reqs)])

    out = asyncio.run(go())
    assert [r.id for r in sorted(seen, key=lambda r: r.index)] == [r.id for r in out]  # each reported once
    return out


def test_body_merges_stream_options_and_keeps_request_fields() -> None:
    b = build_body(creq(0, "x"), RunnerSettings("http://h", "m"), get_dialect("vllm"))
    assert b["stream"] is True and b["model"] == "m" and b["max_tokens"] == 32
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize("chat", [False, True])
def test_per_chunk_counts_from_continuous_usage(chat: bool) -> None:
    with FakeServer() as srv:
        (r,) = run(srv, [creq(0, "tokens:11 per:3", chat)])
    assert r.ok, r.error
    assert [c.n for c in r.chunks] == [1, 3, 3, 3, 1]
    assert r.output_tokens == 11 and r.token_counts is TokenCountSource.usage
    assert r.text.split() == [f"t{i}" for i in range(11)]
    assert r.ttft_s == r.chunks[0].t and r.e2e_s is not None and r.e2e_s >= r.chunks[-1].t
    # the server's per-request numbers: 4 steps after the first token, k=4, accepted n-1 each
    assert r.spec is not None and (r.spec.drafts, r.spec.draft_tokens, r.spec.accepted_tokens) == (4, 16, 6)
    # the runner builds records without re-validation: they must survive a strict round trip
    assert RequestRecord.model_validate_json(r.model_dump_json()) == r


def test_without_per_chunk_usage_counts_are_derived_and_labelled() -> None:
    with FakeServer(usage_per_chunk=False) as srv:
        one, multi = run(srv, [creq(0, "tokens:5 per:1"), creq(1, "tokens:10 per:3")])
    assert one.token_counts is TokenCountSource.one_per_chunk and [c.n for c in one.chunks] == [1] * 5
    assert multi.token_counts is TokenCountSource.spread  # 4 chunks for 10 tokens: approximate
    assert sum(c.n for c in multi.chunks) == 10 and multi.output_tokens == 10


def test_scheduled_and_actual_send_times_with_a_concurrency_limit() -> None:
    with FakeServer() as srv:
        recs = run(srv, [creq(i, "tokens:4 per:1 delay_ms:30") for i in range(4)], [0.0, 0.0, 0.0, 0.2], max_concurrency=2)
    assert [r.scheduled_s for r in recs] == [0.0, 0.0, 0.0, 0.2]
    # the third waits for a slot (~4 chunks x 30 ms); the fourth is sent no earlier than scheduled
    assert recs[2].sent_s - recs[2].scheduled_s > 0.05
    assert recs[2].client_queue_s > 0.05
    assert recs[2].send_lag_s < 0.05  # the wait was for a slot, not the load generator being late
    assert recs[3].sent_s >= 0.2
    assert all(r.ok for r in recs)


@pytest.mark.parametrize(
    "prompt, kind",
    [
        ("fault:http429", FailureKind.http_status),
        ("fault:http500", FailureKind.http_status),
        ("fault:drop tokens:10", FailureKind.connection_reset),
        ("fault:cut", FailureKind.stream_cut_short),
        ("fault:nousage", FailureKind.stream_cut_short),
        ("fault:malformed", FailureKind.malformed_sse),
        ("fault:badjson", FailureKind.invalid_json),
        ("fault:error", FailureKind.error_payload),
        ("fault:stall tokens:6", FailureKind.timeout),
        ("fault:endless", FailureKind.timeout),
    ],
)
def test_each_fault_is_classified(prompt: str, kind: FailureKind) -> None:
    with FakeServer() as srv:
        (r,) = run(srv, [creq(0, prompt)], timeout=0.5)
    assert not r.ok and r.failure is kind, (r.failure, r.error)
    assert r.error
    if kind is FailureKind.http_status:
        assert r.http_status in (429, 500)
    if prompt.startswith("fault:drop") or prompt.startswith("fault:stall"):
        assert r.chunks, "chunks received before the fault are kept"


def test_connection_refused() -> None:
    with FakeServer() as srv:
        url = srv.base_url
    async def go() -> RequestRecord:
        async with new_session(None) as s:
            return await Runner(RunnerSettings(url, "m"), get_dialect("vllm"), s).send(creq(0, "x"), 0, 0.0)
    r = asyncio.run(go())
    assert r.failure is FailureKind.connection_error


def test_a_stale_keep_alive_connection_is_retried_once_not_a_failure() -> None:
    with FakeServer(close_after_stream=True) as srv:
        recs = run(srv, [creq(i, "tokens:3") for i in range(30)], [0.002 * i for i in range(30)], max_concurrency=1)
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok][:3]
