"""The async load generator: sends requests on schedule, timestamps every streamed chunk.

One aiohttp session, one SSE parser (``sse.py``), one code path for chat and completions; what
differs by server lives in a ``Dialect``. A request is sent at its scheduled time (arrival process)
once a concurrency slot is free; both times are recorded (the last ``SPIN_S`` before a send time
is yield-spun, so timer slack does not delay sends). Every stream event that carries output is
stamped with the moment the bytes that completed it came off the connection (the body is parsed
inside aiohttp's reader as it is delivered: ``_HookedReader``; no task wakes up per chunk) and with
its token count (from per-chunk usage/timings where the server gives them, otherwise derived from
the final ``usage`` and labelled). Per chunk the hot path is bytes only: SSE framing on bytes,
orjson on the payload, no object per event. Each finished request is handed to ``on_record`` at once, so the caller can append
it to disk before the next one finishes. Failures are classified (``FailureKind``), never raised.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import NoneType
from typing import Any

import aiohttp
import orjson

from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.sse import MalformedSSE, SSEEvent, SSEParser
from specgauge.records import Chunk, FailureKind, RequestRecord, SpecCounts, TokenCountSource
from specgauge.workload.schema import ApiKind, Request

ENDPOINTS = {ApiKind.chat: "/v1/chat/completions", ApiKind.completion: "/v1/completions"}
_FINAL_KEYS = ("usage", "metrics", "timings", "meta_info")
SPIN_S = 0.0015  #: the last stretch before a send time is yield-spun (``_spin_until``), not slept
_loads = orjson.loads  # reads bytes, checks UTF-8; ~3x json's speed on a stream chunk
_new_chunk = partial(tuple.__new__, Chunk)
_perf = time.perf_counter
HOOK_READER = True  #: parse response bodies inside aiohttp's reader (``_HookedReader``); False: read them


@dataclass
class RunnerSettings:
    base_url: str
    model: str | None = None
    endpoint: str | None = None  #: None: by request kind (chat / completions)
    max_concurrency: int | None = None
    timeout: float = 600.0  #: seconds for one whole request
    api_key: str | None = field(default=None, repr=False)  #: never printed
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    def url_for(self, req: Request) -> str:
        return self.base_url.rstrip("/") + (self.endpoint or ENDPOINTS[req.api])

    def request_headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", **self.headers}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


def _merge_body(body: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    for k, v in extras.items():
        if k == "stream_options" and isinstance(body.get(k), dict):
            body[k] = {**body[k], **v}
        elif k not in body:
            body[k] = v
    return body


def build_body(req: Request, settings: RunnerSettings, dialect: Dialect) -> dict[str, Any]:
    return _merge_body(req.body(model=settings.model, stream=True), dialect.body_extras())


@dataclass(slots=True)
class _Stream:
    """What one response has shown so far."""

    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  #: -1 where the chunk's count is not known yet
    text: list[str] = field(default_factory=list)
    prev_cum: int = 0
    counted_by: TokenCountSource | None = None
    final: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    final_usage: bool = False  #: usage seen on a choice-less or finishing event (not just per-chunk)
    retried: bool = False  #: the first POST met a stale keep-alive connection
    done: bool = False
    token_ids: list[int] = field(default_factory=list)  #: output token ids, where the server streams them
    prompt_ids: list[int] | None = None  #: prompt token ids, where the server returns them


StreamState = _Stream  #: public name: the canary proxy fills one per proxied response


def _output_of(choices: list[Any], st: _Stream) -> bool:
    """Appends this event's text; True when it carried output (text, reasoning or tool calls)."""
    has = False
    for c in choices:
        if type(c) is not dict:
            continue
        d = c.get("delta")
        if d is not None and type(d) is dict:
            piece = d.get("content")
            if piece:
                st.text.append(piece)
                has = True
            elif d.get("reasoning_content") or d.get("reasoning") or d.get("tool_calls"):
                has = True
        else:
            piece = c.get("text")
            if piece:
                st.text.append(piece)
                has = True
        ids = c.get("token_ids")  # vLLM / embedded with return_token_ids
        if ids:
            st.token_ids.extend(ids)
        if st.prompt_ids is None and c.get("prompt_token_ids") is not None:  # completions: in the choice
            st.prompt_ids = c["prompt_token_ids"]
        fr = c.get("finish_reason")
        if fr:
            st.finish_reason = fr
    return has


class RequestFailed(Exception):
    def __init__(self, kind: FailureKind, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status


def _assign_counts(st: _Stream, completion_tokens: int | None) -> TokenCountSource:
    """Fill unknown per-chunk counts. Exact when per-chunk usage summed to the total or chunks == tokens."""
    if completion_tokens is None:
        return st.counted_by or TokenCountSource.none
    known = min(st.counts, default=0) >= 0
    if known and st.counted_by is not None and sum(st.counts) == completion_tokens:
        return st.counted_by
    n = len(st.counts)
    if n == 0:
        return TokenCountSource.none
    if n == completion_tokens:
        st.counts[:] = [1] * n
        return TokenCountSource.one_per_chunk
    base, rem = divmod(completion_tokens, n)  # largest remainder, extra tokens to the earliest chunks
    st.counts[:] = [base + (1 if i < rem else 0) for i in range(n)]
    return TokenCountSource.spread


async def _read_error_body(resp: aiohttp.ClientResponse) -> str:
    try:
        raw = await asyncio.wait_for(resp.content.read(2048), timeout=2.0)
    except (asyncio.TimeoutError, aiohttp.ClientError):
        return ""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            return str(msg or obj.get("detail") or text)[:300]
    except ValueError:
        pass
    return text[:300]


def _error_message(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(err)[:300]


def _decode(payload: bytes | str, status: int) -> Any:
    """The slow path of one event's JSON: what orjson refused. Bytes that are not UTF-8 are a
    malformed stream; JSON that only the standard library reads (NaN, integers past 64 bits) is
    taken; anything else is ``invalid_json``."""
    if type(payload) is bytes:
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedSSE(f"bytes that are not UTF-8 in the event stream: {payload[:60]!r}") from e
    else:
        text = payload  # type: ignore[assignment]
    try:
        return json.loads(text)
    except ValueError:
        raise RequestFailed(FailureKind.invalid_json, f"SSE data is not JSON: {text[:80]!r}", status) from None


def apply_events(events: list[SSEEvent], t: float, st: _Stream, status: int,
                 cumulative: Callable[[dict[str, Any]], int | None]) -> None:
    """Applies stream events that arrived together at ``t`` (s after send) to ``st``; raises
    ``RequestFailed`` on an event that is not JSON or carries an error. ``cumulative`` is the
    dialect's token counter. (The runner itself uses :func:`apply_payloads` on raw bytes.)"""
    apply_payloads([ev.data for ev in events], t, st, status, cumulative)


def apply_payloads(payloads: Sequence[bytes | str], t: float, st: _Stream, status: int,
                   cumulative: Callable[[dict[str, Any]], int | None]) -> None:
    """``apply_events`` on the events' ``data`` payloads (bytes from ``SSEParser.feed_data``, or
    text)."""
    for payload in payloads:
        _apply_one(payload, t, st, status, cumulative)


def _apply_one(payload: bytes | str, t: float, st: _Stream, status: int,
               cumulative: Callable[[dict[str, Any]], int | None]) -> None:
    """One event's payload. The hot path: one JSON decode, the rest dict lookups."""
    if not st.done:
        if payload == b"[DONE]" or payload == "[DONE]":
            st.done = True
            return
        try:
            obj = _loads(payload)
        except ValueError:
            obj = _decode(payload, status)
        if type(obj) is not dict:
            text = payload.decode("utf-8", "replace") if type(payload) is bytes else payload
            raise RequestFailed(FailureKind.invalid_json, f"SSE data is not a JSON object: {text[:80]!r}", status)
        choices = obj.get("choices")
        if st.prompt_ids is None and "prompt_token_ids" in obj:  # chat: top level, first chunk
            st.prompt_ids = obj["prompt_token_ids"]
        if "error" in obj and not choices:
            raise RequestFailed(FailureKind.error_payload, _error_message(obj), status)
        has_out = _output_of(choices, st) if choices else False
        cum = cumulative(obj)
        n = -1
        if cum is not None and (choices or st.counted_by is not None):  # a lone final total is no chunk
            n = cum - st.prev_cum
            st.prev_cum = cum
            if st.counted_by is None:
                st.counted_by = TokenCountSource.timings if "timings" in obj and "usage" not in obj else TokenCountSource.usage
        if has_out or n > 0:
            st.times.append(t)
            st.counts.append(n)
        if not choices or st.finish_reason is not None:  # terminal events carry usage and the extras
            if type(obj.get("usage")) is dict:
                st.final_usage = True
            final = st.final
            for k in _FINAL_KEYS:
                v = obj.get(k)
                if v is not None:
                    final[k] = v
            if choices and ((b"meta_info" in payload) if type(payload) is bytes else ("meta_info" in payload)):
                final["choices"] = choices
        elif "usage" in obj:
            st.final["usage"] = obj["usage"]  # per-chunk usage: the latest totals


def classify_failure(e: BaseException, timeout: float) -> tuple[FailureKind, str, int | None]:
    """(kind, message, HTTP status) for an exception met while sending one request and reading its
    response; ``timeout`` is the whole-request limit a ``TimeoutError`` means."""
    if isinstance(e, RequestFailed):
        return e.kind, e.message, e.status
    if isinstance(e, TimeoutError):
        return FailureKind.timeout, f"no complete response within {timeout:g} s", None
    if isinstance(e, MalformedSSE):
        return FailureKind.malformed_sse, str(e), None
    if isinstance(e, aiohttp.ClientConnectorError):
        return FailureKind.connection_error, f"cannot connect: {e}", None
    if isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError, ConnectionError)):
        return FailureKind.connection_reset, f"connection closed mid-response: {type(e).__name__}: {e}", None
    if isinstance(e, aiohttp.ClientResponseError):
        return FailureKind.malformed_sse, f"bad HTTP response: {e.message}", e.status
    return FailureKind.connection_error, f"{type(e).__name__}: {e}", None


def stream_record(st: _Stream, dialect: Dialect, *, failure: FailureKind | None, error: str | None,
                  http_status: int | None, e2e_s: float | None, elapsed_s: float, **ids: Any) -> RequestRecord:
    """The ``RequestRecord`` of one response as ``st`` saw it. ``ids``: id, segment, index,
    scheduled_s, sent_s, ready_s, started_at."""
    usage = st.final.get("usage") if isinstance(st.final.get("usage"), dict) else {}
    out_tokens = usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) else None
    source = _assign_counts(st, out_tokens) if failure is None else (st.counted_by or TokenCountSource.none)
    counts = st.counts if min(st.counts, default=0) >= 0 else [n if n > 0 else 0 for n in st.counts]
    chunks = list(map(_new_chunk, zip(st.times, counts)))  # Chunk(t, n) without a Python call per chunk
    spec: SpecCounts | None = None
    extra: dict[str, Any] = {}
    if st.final:
        spec = dialect.request_spec(st.final)
        extra = dialect.request_extra(st.final)
    if st.retried:
        extra["retried_stale_connection"] = True
    if st.token_ids:  # what the replay check and the output comparison read (equivalence.token_ids)
        extra["output_token_ids"] = st.token_ids
        if isinstance(st.prompt_ids, list):
            extra["prompt_token_ids"] = st.prompt_ids
    return RequestRecord.model_construct(  # every value is built here, typed; validating 1000s of chunks costs more than the rest
        **ids,
        ok=failure is None,
        failure=failure,
        error=error,
        http_status=http_status,
        ttft_s=st.times[0] if st.times else None,
        e2e_s=e2e_s,
        elapsed_s=elapsed_s,
        chunks=chunks,
        token_counts=source,
        prompt_tokens=usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None,
        output_tokens=out_tokens,
        finish_reason=st.finish_reason,
        text="".join(st.text),
        spec=spec,
        extra=extra,
    )


class _Sink:
    """Where the hooked body reader delivers one response's bytes: parsed on arrival, stamped with
    the moment the connection handed them over; ``done`` resolves at the end of the body or at the
    first problem (kept in ``error``; raised by the reading task, never inside aiohttp)."""

    __slots__ = ("cumulative", "done", "error", "parser", "sent", "st", "status")

    def __init__(self, parser: SSEParser, st: _Stream, sent: float, status: int,
                 cumulative: Callable[[dict[str, Any]], int | None]) -> None:
        self.parser, self.st, self.sent, self.status, self.cumulative = parser, st, sent, status, cumulative
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: BaseException | None = None

    def feed(self, data: bytes) -> None:
        if self.error is None:
            try:
                apply_payloads(self.parser.feed_data(data), _perf() - self.sent, self.st, self.status, self.cumulative)
            except (RequestFailed, MalformedSSE) as e:
                self.fail(e)

    def fail(self, e: BaseException) -> None:
        if self.error is None:
            self.error = e
        if not self.done.done():
            self.done.set_result(None)

    def eof(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


_SINKS: dict[int, _Sink] = {}  #: id(reader) -> sink, while a hooked reader is being read


class _HookedReader(aiohttp.StreamReader):
    """aiohttp's body reader with the load generator's parser attached. Same layout (no new slots),
    so a response's reader is switched to it in place: each body piece the HTTP parser delivers is
    parsed right there instead of being buffered, so no task wakes up per chunk and each event is
    stamped when its bytes came off the connection."""

    __slots__ = ()

    # HTTP chunk boundaries only matter to readers of buffered chunks; ours buffers nothing. A type
    # as a class attribute is not bound, so the parser's per-chunk calls cost a C call, not a frame.
    begin_http_chunk_receiving = end_http_chunk_receiving = bool  # type: ignore[assignment]

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        sink = _SINKS.get(id(self))
        if sink is None:
            return super().feed_data(data, size)
        if sink.error is None:  # Sink.feed, inlined: this runs once per chunk
            p = sink.parser
            try:
                if (data[-2:] == b"\n\n" and data[:6] == b"data: " and not p._buf and not p._has_data
                        and data.count(b"\n") == 2 and b"\r" not in data):  # one whole one-line event, as servers send
                    _apply_one(data[6:-2], _perf() - sink.sent, sink.st, sink.status, sink.cumulative)
                else:
                    apply_payloads(p.feed_data(data), _perf() - sink.sent, sink.st, sink.status, sink.cumulative)
            except (RequestFailed, MalformedSSE) as e:
                sink.fail(e)
        return False

    def set_exception(self, exc: BaseException, *args: Any) -> None:
        super().set_exception(exc, *args)
        sink = _SINKS.get(id(self))
        if sink is not None:
            sink.fail(exc)


def _take_buffered(reader: aiohttp.StreamReader) -> bytes:
    """Everything ``reader`` holds, in order, leaving it empty. With aiohttp's known buffer layout
    this is one join; otherwise (another aiohttp) the public ``read_nowait``, which costs a call
    and a parser resume per HTTP chunk. The caller resumes reading afterwards."""
    buf = getattr(reader, "_buffer", None)
    off = getattr(reader, "_buffer_offset", None)
    splits = getattr(reader, "_http_chunk_splits", ())
    if (type(buf) is not collections.deque or type(off) is not int or type(getattr(reader, "_size", None)) is not int
            or type(getattr(reader, "_cursor", None)) is not int or not isinstance(splits, (collections.deque, NoneType))):
        pieces: list[bytes] = []
        while piece := reader.read_nowait():  # a resumed parser may refill the buffer: until it stays empty
            pieces.append(piece)
        return b"".join(pieces)
    data = b"".join(buf)
    if off:
        data = data[off:]
    buf.clear()
    reader._buffer_offset = 0
    reader._size = 0
    reader._cursor += len(data)
    if splits:
        splits.clear()
    return data


async def _read_hooked(reader: aiohttp.StreamReader, sink: _Sink) -> None:
    """Reads the body through ``sink`` until its end; raises what the stream or connection raised."""
    exc = reader.exception()
    if exc is not None:  # the connection failed before the body was read
        raise exc
    buffered = _take_buffered(reader)  # what arrived with the headers
    reader.__class__ = _HookedReader
    _SINKS[id(reader)] = sink
    try:
        if buffered:
            sink.feed(buffered)
        protocol = getattr(reader, "_protocol", None)
        if protocol is not None:  # a full buffer paused reading (and the parser): go on, into the hook
            protocol.resume_reading()
        reader.on_eof(sink.eof)  # at once when the body has already ended
        await sink.done
    finally:
        _SINKS.pop(id(reader), None)
        reader.__class__ = aiohttp.StreamReader
    if sink.error is not None:
        raise sink.error


class Runner:
    """Sends planned requests and reports a ``RequestRecord`` for each as it finishes."""

    def __init__(
        self,
        settings: RunnerSettings,
        dialect: Dialect,
        session: aiohttp.ClientSession,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.s = settings
        self.dialect = dialect
        self.session = session
        self.on_record = on_record
        self._sem = asyncio.Semaphore(settings.max_concurrency) if settings.max_concurrency else None
        self.t0_perf = time.perf_counter()
        self.t0_wall = time.time()

    # -- one request ---------------------------------------------------------------------------
    async def _stream(self, req: Request, st: _Stream, sent: float) -> tuple[int, dict[str, Any] | None]:
        body = build_body(req, self.s, self.dialect)
        async with await self._post(req, body, st) as resp:
            if resp.status >= 400 or resp.status < 200:
                raise RequestFailed(FailureKind.http_status, f"HTTP {resp.status}: {await _read_error_body(resp)}", resp.status)
            ctype = resp.headers.get("Content-Type", "")
            if "text/event-stream" not in ctype:
                raw = await resp.read()
                try:
                    obj = json.loads(raw)
                except ValueError:
                    raise RequestFailed(
                        FailureKind.invalid_json if "json" in ctype else FailureKind.malformed_sse,
                        f"expected an event stream, got {ctype or 'no Content-Type'}: {raw[:80]!r}",
                        resp.status,
                    ) from None
                if isinstance(obj, dict) and "error" in obj:
                    raise RequestFailed(FailureKind.error_payload, _error_message(obj), resp.status)
                raise RequestFailed(FailureKind.malformed_sse, f"expected an event stream, got {ctype!r}", resp.status)
            parser = SSEParser()
            perf, status, cumulative = time.perf_counter, resp.status, self.dialect.cumulative_tokens
            reader = resp.content
            if HOOK_READER and type(reader) is aiohttp.StreamReader:  # the fast path: parse where the bytes arrive
                await _read_hooked(reader, _Sink(parser, st, sent, status, cumulative))
            else:  # any other body reader: read what is buffered, stamp it at the read
                feed, read = parser.feed_data, reader.readany
                while True:  # readany: everything buffered so far (b"" at the end of the body)
                    data = await read()
                    if not data:
                        break
                    apply_payloads(feed(data), perf() - sent, st, status, cumulative)
            tail, left = parser.close_data()
            apply_payloads(tail, perf() - sent, st, status, cumulative)
            if not st.done:
                why = "a partial event" if left else "no [DONE]"
                raise RequestFailed(FailureKind.stream_cut_short, f"stream ended with {why}", resp.status)
            if not st.final_usage:
                raise RequestFailed(FailureKind.stream_cut_short, "stream ended without the final usage", resp.status)
            return resp.status, st.final

    async def _post(self, req: Request, body: dict[str, Any], st: _Stream) -> aiohttp.ClientResponse:
        """POST, retrying once when a pooled keep-alive connection turns out to be closed before
        any response byte (llama.cpp's server closes connections after a stream; the next request
        can race the FIN). Nothing was processed by the server then, so the retry is safe."""
        url, headers = self.s.url_for(req), self.s.request_headers()
        try:
            return await self.session.post(url, json=body, headers=headers)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            if isinstance(e, aiohttp.ClientConnectorError):
                raise
            st.retried = True
            return await self.session.post(url, json=body, headers=headers)

    async def send(self, req: Request, index: int, scheduled_s: float, at: float | None = None) -> RequestRecord:
        """Waits for its send time ``at`` (a ``perf_counter()`` value; None: now) and a slot, sends,
        classifies. Never raises except on cancellation."""
        if at is not None:
            await _spin_until(at)
        ready_s = time.perf_counter() - self.t0_perf
        if self._sem is not None:
            await self._sem.acquire()
        try:
            return await self._send_now(req, index, scheduled_s, ready_s)
        finally:
            if self._sem is not None:
                self._sem.release()

    async def _send_now(self, req: Request, index: int, scheduled_s: float, ready_s: float | None = None) -> RequestRecord:
        st = _Stream()
        sent = time.perf_counter()
        sent_s = sent - self.t0_perf
        started_at = self.t0_wall + sent_s
        failure: FailureKind | None = None
        error: str | None = None
        status: int | None = None
        e2e: float | None = None
        try:
            async with asyncio.timeout(self.s.timeout):
                status, _ = await self._stream(req, st, sent)
            e2e = time.perf_counter() - sent
        except (RequestFailed, TimeoutError, MalformedSSE, aiohttp.ClientError, ConnectionError) as e:
            failure, error, status = classify_failure(e, self.s.timeout)
        elapsed = time.perf_counter() - sent
        rec = stream_record(st, self.dialect, id=req.id, segment=req.segment, index=index, scheduled_s=scheduled_s,
                            sent_s=sent_s, ready_s=ready_s, started_at=started_at, failure=failure, error=error,
                            http_status=status, e2e_s=e2e, elapsed_s=elapsed)
        if self.on_record is not None:
            self.on_record(rec)
        return rec

    # -- a planned run -------------------------------------------------------------------------
    async def run(self, plan: Sequence[tuple[int, Request, float]]) -> list[RequestRecord]:
        """Sends ``(index, request, scheduled offset)`` items on schedule; returns records in plan order.

        ``t0`` is reset here, so scheduled offsets count from the call. The cyclic garbage collector
        is paused for the run, as ``timeit`` does: a collection over thousands of records' chunks
        stalls the event loop for milliseconds (late sends, smeared chunk times). Reference counting
        frees everything else; the few cycles a run leaves (about one per ten requests, measured)
        are collected after it.
        """
        with _gc_paused():
            return await self._run(plan)

    async def _run(self, plan: Sequence[tuple[int, Request, float]]) -> list[RequestRecord]:
        self.t0_perf = time.perf_counter()
        self.t0_wall = time.time()
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[RequestRecord]] = []
        try:
            for index, req, at in plan:
                when = self.t0_perf + at
                delay = when - time.perf_counter() - SPIN_S
                if delay > 0:  # the loop's timer wakes up to ~1 ms late (epoll's millisecond timeout)
                    await asyncio.sleep(delay)
                # the task is made before its time and spins to it itself: no loop hop after the time
                tasks.append(loop.create_task(self.send(req, index, at, when)))
            return list(await asyncio.gather(*tasks))
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


_gc_holds = [0, False]  #: runs in progress that paused the collector; whether it was on before the first


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector; overlapping runs resume it when the last one ends."""
    if _gc_holds[0] == 0:
        _gc_holds[1] = gc.isenabled()
        gc.disable()
    _gc_holds[0] += 1
    try:
        yield
    finally:
        _gc_holds[0] -= 1
        if _gc_holds[0] == 0 and _gc_holds[1]:
            gc.enable()


async def _spin_until(when: float) -> None:
    """Yield-spin until ``perf_counter() >= when``: each ``sleep(0)`` is one pass of the event loop,
    so other requests' streams keep being read while this one waits. Callers sleep first and call
    this only for the last ``SPIN_S`` before a send time, which bounds the spinning."""
    perf, yield_ = time.perf_counter, asyncio.sleep
    while perf() < when:
        await yield_(0)


def new_session(max_concurrency: int | None) -> aiohttp.ClientSession:
    conn = aiohttp.TCPConnector(limit=max_concurrency or 0, limit_per_host=max_concurrency or 0, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None), trust_env=False)
