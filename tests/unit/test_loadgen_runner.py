"""The runner against the scripted loopback server: per-chunk token counts, schedule, classification."""

from __future__ import annotations

import asyncio

import pytest

from specgauge.loadgen.dialects import get_dialect
from specgauge.testing.fakeserver import FakeServer
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


def test_hooked_reader_path_is_used_and_equals_the_plain_read_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path (the body parsed inside aiohttp's reader) runs with the installed aiohttp and
    records what plain reading records: same chunks and counts, text, usage, spec."""
    from specgauge.loadgen import runner as rmod

    used: list[int] = []
    orig = rmod._read_hooked

    async def counting(reader, sink):  # type: ignore[no-untyped-def]
        used.append(1)
        await orig(reader, sink)

    monkeypatch.setattr(rmod, "_read_hooked", counting)
    prompts = ["tokens:40 per:3", "tokens:7 per:1 delay_ms:5", "tokens:300 per:2"]
    with FakeServer() as srv:
        hooked = run(srv, [creq(i, p) for i, p in enumerate(prompts)])
        monkeypatch.setattr(rmod, "HOOK_READER", False)
        plain = run(srv, [creq(i, p) for i, p in enumerate(prompts)])
    assert len(used) == len(prompts)
    for a, b in zip(hooked, plain, strict=True):
        assert a.ok and b.ok, (a.error, b.error)
        assert [c.n for c in a.chunks] == [c.n for c in b.chunks]
        assert all(x.t <= y.t for x, y in zip(a.chunks, a.chunks[1:]))  # stamped in arrival order
        assert (a.text, a.output_tokens, a.token_counts, a.spec, a.finish_reason) == (
            b.text, b.output_tokens, b.token_counts, b.spec, b.finish_reason)


def test_payloads_as_bytes_or_text_give_the_same_state() -> None:
    from specgauge.loadgen.runner import (
        MalformedSSE,
        RequestFailed,
        StreamState,
        apply_payloads,
    )

    cum = get_dialect("vllm").cumulative_tokens
    events = ['{"choices": [{"text": "a", "finish_reason": null}], "usage": {"completion_tokens": 1}}',
              '{"choices": [{"text": "bc", "finish_reason": "length"}], "usage": {"completion_tokens": 3}}',
              '{"choices": [], "usage": {"completion_tokens": 3}, "metrics": {"x": NaN}}', "[DONE]"]
    states = []
    for as_bytes in (False, True):
        st = StreamState()
        apply_payloads([e.encode() if as_bytes else e for e in events], 0.5, st, 200, cum)
        states.append((st.times, st.counts, st.text, st.finish_reason, st.final_usage, st.done, str(st.final)))
    assert states[0] == states[1]
    assert states[0][1] == [1, 2] and states[0][5] is True  # NaN: JSON only the standard library reads
    with pytest.raises(MalformedSSE, match="UTF-8"):
        apply_payloads([b'{"choices": [{"text": "\xff"}]}'], 0.1, StreamState(), 200, cum)
    with pytest.raises(RequestFailed, match="not JSON"):
        apply_payloads([b"{oops"], 0.1, StreamState(), 200, cum)


def test_closely_spaced_sends_are_never_early_and_keep_plan_order() -> None:
    times = [0.001 * i for i in range(25)]
    with FakeServer() as srv:
        recs = run(srv, [creq(i, "tokens:2") for i in range(25)], times)
    assert all(r.ok for r in recs)
    assert all(r.sent_s >= r.scheduled_s for r in recs)  # the spin ends at the send time, never before
    assert [r.index for r in sorted(recs, key=lambda r: r.sent_s)] == list(range(25))


def test_a_due_request_waits_for_the_earlier_ones_in_the_plan() -> None:
    """Plan order holds even when a later request's time has passed first: a client descheduled
    between two spinning requests' checks (one just before its time, the next after its own) would
    otherwise send them swapped (seen under CPU load: 18 of 60 runs of the test above, 0 now)."""
    import time

    async def go(srv: FakeServer) -> tuple[RequestRecord, RequestRecord]:
        async with new_session(None) as s:
            r = Runner(RunnerSettings(srv.base_url, "fake", None, None, 5.0), get_dialect("vllm"), s)
            now = time.perf_counter()
            second = asyncio.create_task(r.send(creq(1, "tokens:2"), 1, 0.0, now, turn=1))  # due at once
            await asyncio.sleep(0.01)
            assert not second.done()  # held for turn 0
            first = asyncio.create_task(r.send(creq(0, "tokens:2"), 0, 0.0, now + 0.002, turn=0))
            return await first, await second

    with FakeServer() as srv:
        a, b = asyncio.run(go(srv))
    assert a.ok and b.ok and a.sent_s < b.sent_s


def test_the_collector_is_paused_during_a_run_and_restored_after() -> None:
    import gc

    seen: list[bool] = []
    with FakeServer() as srv:
        async def go() -> None:
            async with new_session(None) as s:
                r = Runner(RunnerSettings(srv.base_url, "fake"), get_dialect("vllm"), s,
                           lambda rec: seen.append(gc.isenabled()))
                await r.run([(0, creq(0, "tokens:3"), 0.0)])
                assert gc.isenabled()
                gc.disable()
                await r.run([(1, creq(1, "tokens:3"), 0.0)])  # off before: stays off after
                assert not gc.isenabled()
                gc.enable()

        asyncio.run(go())
    assert seen == [False, False]


def test_a_long_fast_stream_is_read_whole_through_the_hook() -> None:
    """A stream far past aiohttp's read buffer (its reader pauses the parser) loses nothing when the
    hook takes over mid-stream."""
    with FakeServer() as srv:
        recs = run(srv, [creq(i, "tokens:3000 per:1") for i in range(3)], max_concurrency=3)
    for r in recs:
        assert r.ok, r.error
        assert len(r.chunks) == 3000 and sum(c.n for c in r.chunks) == r.output_tokens == 3000


def test_buffered_bytes_are_taken_whole_from_aiohttps_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the installed aiohttp the buffer is taken in one piece (its layout is the known one: if an
    upgrade changes it, the public per-chunk path is used and this test says so)."""
    import aiohttp

    from specgauge.loadgen.hooked import _take_buffered

    class Proto:
        _reading_paused = False

        def pause_reading(self) -> None: ...

        def resume_reading(self) -> None: ...

    async def go() -> tuple[bytes, bytes]:
        r = aiohttp.StreamReader(Proto(), 2**16, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
        for piece in (b"data: 1\n\n", b"data: 2\n", b"\ndata: 3\n\n"):
            r.begin_http_chunk_receiving()
            r.feed_data(piece)
            r.end_http_chunk_receiving()
        assert r.read_nowait(3) == b"dat"  # a partly read first chunk: the offset is honoured
        monkeypatch.setattr(aiohttp.StreamReader, "read_nowait", lambda self, n=-1: pytest.fail("per-chunk path"))
        taken = _take_buffered(r)
        monkeypatch.undo()
        r.feed_data(b"data: 4\n\n")
        return taken, r.read_nowait()

    taken, after = asyncio.run(go())
    assert taken == b"a: 1\n\ndata: 2\n\ndata: 3\n\n"
    assert after == b"data: 4\n\n"  # the reader is consistent afterwards


def test_run_async_uses_uvloop_where_installed_and_the_runner_works_on_it() -> None:
    uvloop = pytest.importorskip("uvloop")
    from specgauge.loadgen.runner import run_async

    with FakeServer() as srv:
        async def go() -> tuple[type, list[RequestRecord]]:
            async with new_session(2) as s:
                r = Runner(RunnerSettings(srv.base_url, "fake", None, 2, 5.0), get_dialect("vllm"), s)
                recs = await r.run([(i, creq(i, p), 0.001 * i) for i, p in enumerate(["tokens:500 per:2", "fault:badjson"])])
            return type(asyncio.get_running_loop()), recs

        loop_type, (good, bad) = run_async(go())
    assert issubclass(loop_type, uvloop.Loop)
    assert good.ok and sum(c.n for c in good.chunks) == good.output_tokens == 500
    assert [c.n for c in good.chunks] == [1] + [2] * 249 + [1]  # the scripted server: first token alone
    assert bad.failure is FailureKind.invalid_json
