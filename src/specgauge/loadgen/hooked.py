"""Reading a streamed response body inside aiohttp's reader: each piece the HTTP parser delivers is
parsed where it is delivered (:mod:`specgauge.loadgen.stream`), stamped with the moment its bytes
came off the connection, and never buffered, so no task wakes up per chunk.

The reader of one response is switched in place to :class:`_HookedReader` (a subclass with the
same layout) once its headers are read; what aiohttp buffered before that is taken in one piece.
Both rely on aiohttp's ``StreamReader``; the runner uses this path only for that exact type, and
:func:`_take_buffered` falls back to the public per-chunk read when the buffer's layout is not the
known one (a test says which path the installed aiohttp takes).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from types import NoneType
from typing import Any

import aiohttp

from specgauge.loadgen.sse import MalformedSSE, SSEParser
from specgauge.loadgen.stream import RequestFailed, StreamState, apply_payload, apply_payloads, counts_by_usage

_perf = time.perf_counter
_Stream = StreamState


class Sink:
    """Where the hooked body reader delivers one response's bytes: parsed on arrival, stamped with
    the moment the connection handed them over; ``done`` resolves at the end of the body or at the
    first problem (kept in ``error``; raised by the reading task, never inside aiohttp)."""

    __slots__ = ("by_usage", "cumulative", "done", "error", "parser", "sent", "st", "status")

    def __init__(self, parser: SSEParser, st: _Stream, sent: float, status: int,
                 cumulative: Callable[[dict[str, Any]], int | None]) -> None:
        self.parser, self.st, self.sent, self.status, self.cumulative = parser, st, sent, status, cumulative
        self.by_usage = counts_by_usage(cumulative)  #: the token counter can be inlined
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


_SINKS: dict[int, Sink] = {}  #: id(reader) -> sink, while a hooked reader is being read


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
                line, _, rest = data.partition(b"\n")  # one whole one-line event (what servers send)?
                if (rest == b"\n" and line[:6] == b"data: " and line.find(b"\r") < 0  # find: faster than `in`
                        and not p._buf and not p._has_data):
                    apply_payload(line[6:], _perf() - sink.sent, sink.st, sink.status, sink.cumulative, sink.by_usage)
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


async def read_hooked(reader: aiohttp.StreamReader, sink: Sink) -> None:
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
