"""What one streamed response says: its events applied to a :class:`StreamState` (text, per-chunk
arrival times and token counts, usage and the dialect's extras), failures classified
(:class:`RequestFailed`, :func:`classify_failure`), and its ``RequestRecord`` built
(:func:`stream_record`). No HTTP and no clock here: callers hand in each event's payload with the
time it arrived (the load generator's runner, the canary proxy's copy of a stream).

The per-event path is the load generator's hot loop: payloads are bytes (``SSEParser.feed_data``),
decoded by orjson (the standard library only for what orjson refuses), no object per event.
"""

from __future__ import annotations

import heapq
import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
import msgspec
import orjson

from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.sse import MalformedSSE, SSEEvent
from specgauge.records import (
    GAP_ENDS_KEPT, GAP_TEXT_CHARS, Chunk, FailureKind, GapEnd, RequestRecord, SpecCounts, TokenCountSource, ToolCall,
)

_FINAL_KEYS = ("usage", "metrics", "timings", "meta_info")
_loads = orjson.loads  # reads bytes, checks UTF-8; ~3x json's speed on a stream chunk
_new_chunk = partial(tuple.__new__, Chunk)


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
    calls: dict[int, list[Any]] = field(default_factory=dict)  #: tool call index -> [id, name, argument pieces]
    pieces: list[str] = field(default_factory=list)  #: per chunk (as ``times``): the text it carried (content, tool arguments)


StreamState = _Stream  #: public name: the canary proxy fills one per proxied response


def add_tool_deltas(st: _Stream, deltas: Any) -> str:
    """OpenAI streamed ``delta.tool_calls`` (or a whole message's ``tool_calls``) into ``st.calls``:
    per call ``index``, the id and name where they come, the argument text piece by piece. Returns
    the argument text these deltas carried."""
    got = ""
    if type(deltas) is not list:
        return got
    for i, d in enumerate(deltas):
        if type(d) is not dict:
            continue
        idx = d.get("index")
        entry = st.calls.setdefault(idx if type(idx) is int else i, [None, None, []])
        if d.get("id"):
            entry[0] = d["id"]
        fn = d.get("function")
        if type(fn) is dict:
            name = fn.get("name")
            if name and name != entry[1]:
                entry[1] = name if entry[1] is None else entry[1] + name
            args = fn.get("arguments")
            if args is not None and type(args) is not str:  # some servers send the arguments as an object
                args = json.dumps(args)
            if args:
                entry[2].append(args)
                got += args
    return got


def tool_calls_of(st: _Stream) -> list[ToolCall] | None:
    """The response's assembled tool calls, in index order; None when it made none."""
    if not st.calls:
        return None
    return [ToolCall(id=c[0], name=c[1], arguments="".join(c[2])) for _, c in sorted(st.calls.items())]


def _output_of(choices: list[Any], st: _Stream) -> str | None:
    """Appends this event's text; the output text it carried (content, tool-call arguments; "" for
    reasoning only), None when it carried no output."""
    has: str | None = None
    for c in choices:
        if type(c) is not dict:
            continue
        d = c.get("delta")
        if d is not None and type(d) is dict:
            piece = d.get("content")
            if piece:
                st.text.append(piece)
                has = (has or "") + (piece if type(piece) is str else "")
            elif d.get("reasoning_content") or d.get("reasoning") or d.get("tool_calls"):
                has = has or ""
            if d.get("tool_calls"):
                has = (has or "") + add_tool_deltas(st, d["tool_calls"])
        else:
            piece = c.get("text")
            if piece:
                st.text.append(piece)
                has = (has or "") + (piece if type(piece) is str else "")
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
    text), all stamped ``t``."""
    by_usage = counts_by_usage(cumulative)
    for payload in payloads:
        apply_payload(payload, t, st, status, cumulative, by_usage)


class _Delta(msgspec.Struct):
    """A chat chunk's ``delta``, as far as the fast path reads it (other keys are skipped)."""

    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: Any = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None  #: anything but an object or null: the reference path
    text: Any = None
    finish_reason: Any = None
    token_ids: Any = None
    prompt_token_ids: Any = None


class _Event(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None | msgspec.UnsetType = msgspec.UNSET
    prompt_token_ids: Any = msgspec.UNSET
    timings: Any = msgspec.UNSET


#: typed decode of a stream event: ~2x orjson's speed on a vLLM chunk (unknown keys are skipped,
#: not built), and attribute reads instead of dict lookups
_decode_event = msgspec.json.Decoder(_Event).decode


def apply_payload(payload: bytes | str, t: float, st: _Stream, status: int,
                  cumulative: Callable[[dict[str, Any]], int | None], by_usage: bool) -> None:
    """One event's payload: the load generator's hot path. With ``by_usage`` (``cumulative`` is
    ``Dialect.cumulative_tokens``), an output chunk of one choice that does not finish the stream
    (nearly every event) is decoded into typed structs and applied here, in one frame; anything
    else (another shape, a type the structs do not take, a finishing or choice-less event, [DONE],
    JSON msgspec refuses) goes to ``_apply_one``, the reference, before anything is changed, so the
    state is always what ``_apply_one`` makes of it (a property test compares the two)."""
    if st.done:
        return
    if by_usage and st.finish_reason is None:
        try:
            ev = _decode_event(payload)
        except msgspec.DecodeError:  # ValidationError included
            ev = None
        if ev is not None:
            choices = ev.choices
            if choices is not None and len(choices) == 1:
                c = choices[0]
                if not c.finish_reason:  # not a finishing event
                    if st.prompt_ids is None and ev.prompt_token_ids is not msgspec.UNSET:  # chat: top level
                        st.prompt_ids = ev.prompt_token_ids
                    has_out = False
                    got = ""  # the text this chunk carried
                    d = c.delta  # _output_of, for the one choice
                    if d is not None:
                        piece = d.content
                        if piece:
                            st.text.append(piece)
                            has_out = True
                            got = piece if type(piece) is str else ""
                        elif d.reasoning_content or d.reasoning or d.tool_calls:
                            has_out = True
                        if d.tool_calls:
                            got += add_tool_deltas(st, d.tool_calls)
                    else:
                        piece = c.text
                        if piece:
                            st.text.append(piece)
                            has_out = True
                            got = piece if type(piece) is str else ""
                    ids = c.token_ids  # vLLM / embedded with return_token_ids
                    if ids:
                        st.token_ids.extend(ids)
                    if st.prompt_ids is None and c.prompt_token_ids is not None:  # completions: in the choice
                        st.prompt_ids = c.prompt_token_ids
                    usage = ev.usage
                    if type(usage) is dict:  # Dialect.cumulative_tokens, inlined
                        cum = usage.get("completion_tokens")
                        if type(cum) is int:
                            n = cum - st.prev_cum
                            st.prev_cum = cum
                            if st.counted_by is None:
                                st.counted_by = TokenCountSource.usage  # "usage" is in the event
                        else:
                            n = -1
                    else:
                        n = -1
                    if has_out or n > 0:
                        st.times.append(t)
                        st.counts.append(n)
                        st.pieces.append(got)
                    if usage is not msgspec.UNSET:
                        st.final["usage"] = usage  # per-chunk usage: the latest totals
                    return
    _apply_one(payload, t, st, status, cumulative)


def counts_by_usage(cumulative: Callable[[dict[str, Any]], int | None]) -> bool:
    """``cumulative`` is the base ``Dialect.cumulative_tokens`` (usage.completion_tokens), which the
    fast path of :func:`apply_payload` inlines; a dialect with its own counter (llama.cpp) is not."""
    return getattr(cumulative, "__func__", None) is Dialect.cumulative_tokens


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
        got = _output_of(choices, st) if choices else None
        has_out = got is not None
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
            st.pieces.append(got or "")
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
        tool_calls=tool_calls_of(st),
        output_check=None,
        gap_ends=gap_ends(st),
    )


def gap_ends(st: _Stream) -> list[GapEnd] | None:
    """The chunks that ended the ``GAP_ENDS_KEPT`` longest inter-chunk gaps, longest first, with the
    start of their text (None with fewer than two chunks)."""
    times, pieces = st.times, st.pieces
    if len(times) < 2 or len(pieces) != len(times):
        return None
    gaps = list(map(operator.sub, times[1:], times))  # gaps[j] ends at chunk j + 1
    idx = heapq.nlargest(GAP_ENDS_KEPT, range(len(gaps)), key=gaps.__getitem__)
    return [GapEnd(j + 1, pieces[j + 1][:GAP_TEXT_CHARS]) for j in idx]
