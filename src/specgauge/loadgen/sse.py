"""The one Server-Sent-Events parser every dialect shares.

Incremental: ``feed(bytes)`` returns the events completed by those bytes, so the caller can stamp
each event with the arrival time of the read that completed it. Follows the WHATWG event-stream
rules (LF, CRLF or CR line ends, a CR at the end of the body included; ``:`` comments; multi-line ``data``; one optional space after the
colon), with one strictness the spec does not have: a non-empty line whose field is not one of
``data``/``event``/``id``/``retry`` raises :class:`MalformedSSE`, because an OpenAI-compatible
server never sends one and such bytes mean the body is not an event stream at all.

Framing works on bytes. ``feed_data(bytes)`` is the load generator's hot path: it returns only the
events' ``data`` payloads, as bytes, without decoding them (the JSON decoder reads bytes and checks
UTF-8 itself) and without an event object per chunk; ``feed`` returns :class:`SSEEvent` objects
with decoded text for everyone else. One parser instance serves one stream through either method.
"""

from __future__ import annotations

from typing import NamedTuple

_BFIELDS = frozenset((b"data", b"event", b"id", b"retry"))


class MalformedSSE(ValueError):
    """The bytes are not a Server-Sent-Events stream."""


class SSEEvent(NamedTuple):
    data: str
    event: str = "message"
    id: str | None = None


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedSSE(f"bytes that are not UTF-8 in the event stream: {raw[:60]!r}") from e


class _Full(NamedTuple):
    """An event that needed the line-by-line path (several lines, or event/id fields)."""

    data: bytes
    event: bytes
    id: bytes | None


class SSEParser:
    """Feed raw body bytes, get complete events back. ``close()`` flags an unterminated event."""

    __slots__ = ("_buf", "_data", "_event", "_has_data", "_id", "_max_line")

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._event = b""
        self._id: bytes | None = None
        self._has_data = False
        self._max_line = max_line

    # -- public ------------------------------------------------------------------------------------
    def feed_data(self, chunk: bytes) -> list[bytes]:
        """The ``data`` payloads (bytes, not decoded) of the events these bytes complete."""
        buf = self._buf + chunk if self._buf else chunk
        # the usual cases, checked with a few C-level scans: whole one-line "data: " events, LF only
        # (one event per read is the commonest), then at most the first line of the next, unfinished
        if buf[:6] == b"data: " and not self._has_data and b"\r" not in buf:
            if buf[-2:] == b"\n\n":
                body, tail = buf[:-2], b""
            else:
                cut = buf.rfind(b"\n\n")
                body, tail = buf[:cut], buf[cut + 2 :]
                if cut < 0 or b"\n" in tail or len(tail) > self._max_line:
                    body = b""  # not the usual case: the general path below
            nl = body.count(b"\n")
            if body and nl == 0:
                self._buf = tail
                return [body[6:]]
            if body:
                parts = body.split(b"\n\n")
                if nl == 2 * (len(parts) - 1) and body.count(b"\n\ndata: ") == len(parts) - 1:
                    self._buf = tail
                    return [part[6:] for part in parts]
        self._buf = b""
        out = self._frames(buf)
        for x in out:
            if type(x) is not bytes:  # rare: an event that took the line-by-line path
                return [x if type(x) is bytes else x.data for x in out]
        return out  # type: ignore[return-value]

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events these bytes complete, with decoded text."""
        return [self._event_of(x) for x in self._frames(chunk)]

    def close(self) -> tuple[list[SSEEvent], bool]:
        """End of body: events completed by a final lone CR, and whether a partial event was left."""
        frames, left = self._close()
        return [self._event_of(x) for x in frames], left

    def close_data(self) -> tuple[list[bytes], bool]:
        """``close`` for ``feed_data`` users: the last payloads and whether a partial event was left."""
        frames, left = self._close()
        return [x if type(x) is bytes else x.data for x in frames], left

    # -- framing -----------------------------------------------------------------------------------
    @staticmethod
    def _event_of(x: bytes | _Full) -> SSEEvent:
        if type(x) is bytes:
            return SSEEvent(_text(x))
        assert isinstance(x, _Full)
        return SSEEvent(_text(x.data), _text(x.event) if x.event else "message",
                        None if x.id is None else _text(x.id))

    def _frames(self, chunk: bytes) -> list[bytes | _Full]:
        buf = self._buf + chunk if self._buf else chunk
        out: list[bytes | _Full] = []
        if b"\r" not in buf:
            return self._frames_lf(buf, out)
        start = 0
        n = len(buf)
        while start < n:
            nl = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, nl if nl >= 0 else n)
            if cr >= 0:
                end = cr
                if cr + 1 == n:
                    break  # a CR at the end may be the first half of CRLF: wait for more bytes
                nxt = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
            elif nl >= 0:
                end, nxt = nl, nl + 1
            else:
                break
            self._line(buf[start:end], out)
            start = nxt
        self._buf = buf[start:]
        if len(self._buf) > self._max_line:
            raise MalformedSSE(f"an SSE line longer than {self._max_line} bytes without a line end")
        return out

    def _frames_lf(self, buf: bytes, out: list[bytes | _Full]) -> list[bytes | _Full]:
        """Fast path for LF-only bytes (what servers send): split at event boundaries once; a
        one-line ``data:`` event (the usual case) is taken whole, anything else line by line.
        ``_buf`` keeps the whole unfinished event, so its lines are only read once it is complete."""
        parts = buf.split(b"\n\n")
        self._buf = tail = parts.pop()
        for part in parts:
            if part[:6] == b"data: " and b"\n" not in part and not self._has_data:
                out.append(part[6:])
                continue
            for raw in part.split(b"\n"):
                self._line(raw, out)
            self._line(b"", out)
        if b"\n" in tail:  # complete lines of the unfinished event: reject non-SSE bytes early
            for raw in tail.split(b"\n")[:-1]:
                if raw and raw[0] != 0x3A and raw.partition(b":")[0] not in _BFIELDS:
                    raise MalformedSSE(f"not an SSE line: {raw[:80].decode('utf-8', 'replace')!r}")
        if len(tail) > self._max_line:
            raise MalformedSSE(f"an SSE event longer than {self._max_line} bytes without an end")
        return out

    def _close(self) -> tuple[list[bytes | _Full], bool]:
        out: list[bytes | _Full] = []
        if self._buf.endswith(b"\r"):
            out = self._frames(b"\n")  # the CR was a line end, not half of a CRLF
        if b"\n" in self._buf:  # the fast path keeps a whole unfinished event: read its lines now
            *lines, self._buf = self._buf.split(b"\n")
            for raw in lines:
                self._line(raw, out)
        left = bool(self._buf.strip()) or self._has_data
        self._buf = b""
        self._reset()
        return out, left

    def _reset(self) -> None:
        self._data = []
        self._event = b""
        self._id = None
        self._has_data = False

    def _line(self, raw: bytes, out: list[bytes | _Full]) -> None:
        if not raw:
            if self._has_data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                if not self._event and self._id is None:
                    out.append(data)
                else:
                    out.append(_Full(data, self._event, self._id))
            self._reset()
            return
        if raw[0] == 0x3A:
            return  # comment / keep-alive
        field, sep, value = raw.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field not in _BFIELDS:
            raise MalformedSSE(f"not an SSE line: {_text(raw)[:80]!r}")
        if field == b"data":
            _text(value)  # a line that is not UTF-8 is refused where it is read
            self._data.append(value)
            self._has_data = True
        elif field == b"event":
            self._event = value
        elif field == b"id":
            self._id = value
