"""The one Server-Sent-Events parser every dialect shares.

Incremental: ``feed(bytes)`` returns the events completed by those bytes, so the caller can stamp
each event with the arrival time of the read that completed it. Follows the WHATWG event-stream
rules (LF, CRLF or CR line ends, a CR at the end of the body included; ``:`` comments; multi-line ``data``; one optional space after the
colon), with one strictness the spec does not have: a non-empty line whose field is not one of
``data``/``event``/``id``/``retry`` raises :class:`MalformedSSE`, because an OpenAI-compatible
server never sends one and such bytes mean the body is not an event stream at all.
"""

from __future__ import annotations

from typing import NamedTuple

_FIELDS = frozenset(("data", "event", "id", "retry"))
_BFIELDS = frozenset(f.encode() for f in _FIELDS)


class MalformedSSE(ValueError):
    """The bytes are not a Server-Sent-Events stream."""


class SSEEvent(NamedTuple):
    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Feed raw body bytes, get complete events back. ``close()`` flags an unterminated event."""

    __slots__ = ("_buf", "_data", "_event", "_id", "_has_data", "_max_line")

    def __init__(self, max_line: int = 16 * 1024 * 1024) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._has_data = False
        self._max_line = max_line

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        events: list[SSEEvent] = []
        if b"\r" not in buf:
            return self._feed_lf(buf, events)
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
            self._line(buf[start:end], events)
            start = nxt
        self._buf = buf[start:]
        if len(self._buf) > self._max_line:
            raise MalformedSSE(f"an SSE line longer than {self._max_line} bytes without a line end")
        return events

    def _feed_lf(self, buf: bytes, events: list[SSEEvent]) -> list[SSEEvent]:
        """Fast path for LF-only bytes (what servers send): split at event boundaries once; a
        one-line ``data:`` event (the usual case) is taken whole, anything else line by line.
        ``_buf`` keeps the whole unfinished event, so its lines are only read once it is complete."""
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        for part in parts:
            if part.startswith(b"data: ") and b"\n" not in part and not self._has_data:
                try:
                    events.append(SSEEvent(part[6:].decode("utf-8")))
                except UnicodeDecodeError as e:
                    raise MalformedSSE(f"bytes that are not UTF-8 in the event stream: {part[:60]!r}") from e
                continue
            for raw in part.split(b"\n"):
                self._line(raw, events)
            self._line(b"", events)
        tail = self._buf
        if b"\n" in tail:  # complete lines of the unfinished event: reject non-SSE bytes early
            for raw in tail.split(b"\n")[:-1]:
                if raw and raw[0] != 0x3A and raw.partition(b":")[0] not in _BFIELDS:
                    raise MalformedSSE(f"not an SSE line: {raw[:80].decode('utf-8', 'replace')!r}")
        if len(tail) > self._max_line:
            raise MalformedSSE(f"an SSE event longer than {self._max_line} bytes without an end")
        return events

    def close(self) -> tuple[list[SSEEvent], bool]:
        """End of body: events completed by a final lone CR, and whether a partial event was left."""
        events: list[SSEEvent] = []
        if self._buf.endswith(b"\r"):
            events = self.feed(b"\n")  # the CR was a line end, not half of a CRLF
        if b"\n" in self._buf:  # the fast path keeps a whole unfinished event: read its lines now
            *lines, self._buf = self._buf.split(b"\n")
            for raw in lines:
                self._line(raw, events)
        left = bool(self._buf.strip()) or self._has_data
        self._buf = b""
        self._reset()
        return events, left

    def _reset(self) -> None:
        self._data = []
        self._event = ""
        self._id = None
        self._has_data = False

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._has_data:
                events.append(SSEEvent("\n".join(self._data), self._event or "message", self._id))
            self._reset()
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedSSE(f"bytes that are not UTF-8 in the event stream: {raw[:60]!r}") from e
        if line[0] == ":":
            return  # comment / keep-alive
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field not in _FIELDS:
            raise MalformedSSE(f"not an SSE line: {line[:80]!r}")
        if field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value
