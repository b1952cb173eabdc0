"""The candidate's token ids when no client asks for them: the proxy adds ``"return_token_ids": true``
to what it forwards to a candidate that speaks vLLM's dialect (vLLM >= 0.10.2, the embedded engine),
so ``guardrail:acceptance_replay`` can replay its outputs, and takes out of the response what the
client did not ask for, on the raw bytes, so the client gets the bytes it would have got without us.

What "without us" looks like depends on the server (``Absent``):

* the embedded engine leaves the keys out: ``{"index": 0, ..., "stop_reason": null}``;
* vLLM (0.32, ``tests/data/recorded/vllm_0.32.0_ngram.json``) writes them as ``null``:
  ``..."prompt_token_ids":null,"token_ids":null}``; and in a streamed chat it sends a chunk with an
  empty delta only because token ids were asked (``chat_completion/serving.py``: a step that decoded
  no text is skipped unless ``return_token_ids``), so such a chunk is dropped whole.

Where: ``token_ids`` and ``prompt_token_ids`` in every choice, ``prompt_token_ids`` at the top
(a chat's first chunk, a chat's body). Only a flat list of integers is taken out, only where an
unescaped key starts (after ``{`` or ``,``), and every rewrite is checked by parsing both sides: the
result must equal the original with exactly those keys gone (or ``null``); if not, the original
bytes go out unchanged (the client then sees the ids, never a broken body).

A request that sets ``return_token_ids`` itself (true or false) or asks ``echo`` (vLLM drops the
echoed prompt text when token ids are returned) is forwarded as received.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

FIELD = "return_token_ids"
KEYS = ("token_ids", "prompt_token_ids")


class Absent(str, Enum):
    """How a server writes the token-id keys of a request that did not ask for them."""

    drop = "drop"  #: the keys are not there (the embedded engine)
    null = "null"  #: the keys are there, ``null`` (vLLM); empty-delta chat chunks are not sent


#: the dialects whose servers honour ``return_token_ids``, and how each writes the keys when not asked
ASKING_DIALECTS: dict[str, Absent] = {"vllm": Absent.null, "embedded": Absent.drop}

_INTS = re.compile(rb"[-0-9,\s]*")  # what a flat list of integers holds between its brackets
_WS = b" \t\r\n"


def _skip_ws(raw: bytes, i: int) -> int:
    while raw[i:i + 1] and raw[i] in _WS:
        i += 1
    return i


def _cuts(raw: bytes, absent: Absent) -> list[tuple[int, int, bytes]]:
    """Where the ids are in ``raw`` and what replaces each span (start, end, bytes), in order. A key
    counts where an unescaped quote starts it after ``{`` or ``,`` and a flat list of integers is its
    value; anything else is left (the caller's parse check catches what this cannot see).

    drop: ``, "token_ids": [1, 2]`` goes (the comma before it); a first key goes with the comma after
    it: ``{"token_ids": [1], "index": 0}`` -> ``{"index": 0}``; null: ``[1, 2]`` -> ``null``."""
    cuts: list[tuple[int, int, bytes]] = []
    done = 0  # raw[:done] is decided (a later cut never reaches before it)
    i = 0
    while (j := raw.find(b'token_ids"', i)) >= 0:
        i = j + 10
        if raw[j - 1:j] == b'"':
            q = j - 1
        elif raw[j - 8:j] == b'"prompt_':
            q = j - 8
        else:
            continue
        k = _skip_ws(raw, i)
        if raw[k:k + 1] != b":":
            continue
        k = _skip_ws(raw, k + 1)
        e = raw.find(b"]", k)
        if raw[k:k + 1] != b"[" or e < 0 or _INTS.fullmatch(raw, k + 1, e) is None:
            continue
        e += 1
        b = q
        while b > done and raw[b - 1] in _WS:
            b -= 1
        lead = raw[b - 1:b] if b > done else b"{"  # a comma an earlier cut took: this key now comes first
        if lead not in (b",", b"{") or (b == done and done == 0):
            continue
        if absent is Absent.null:
            cuts.append((k, e, b"null"))
        elif lead == b",":
            cuts.append((b - 1, e, b""))
        else:
            f = _skip_ws(raw, e)
            if raw[f:f + 1] == b",":
                e = _skip_ws(raw, f + 1)
            cuts.append((q, e, b""))
        done = i = e
    return cuts


def with_field(body: bytes, obj: dict[str, Any]) -> bytes | None:
    """``body`` with ``"return_token_ids":true`` added before its closing brace; None when the proxy
    must not ask (the client set the field or ``echo``; a body that does not end with ``}``).
    ``{"a":1}`` -> ``{"a":1,"return_token_ids":true}``; ``{}`` -> ``{"return_token_ids":true}``."""
    if FIELD in obj or obj.get("echo"):
        return None
    end = len(body.rstrip())
    if end == 0 or body[end - 1:end] != b"}":
        return None
    inner = body[body.index(b"{") + 1:end - 1]
    sep = b"," if inner.strip() else b""
    return body[:end - 1] + sep + b'"return_token_ids":true' + body[end - 1:]


def refused(status: int, raw: bytes) -> bool:
    """The upstream turned the request down because of the field (an older or strict server)."""
    return status in (400, 422) and FIELD.encode() in raw


def _expected(obj: Any, absent: Absent) -> Any:
    """``obj`` (a freshly parsed body or chunk, changed in place) as the server writes it when the ids
    were not asked for."""
    if isinstance(obj, dict):
        _without(obj, absent)
        for c in obj.get("choices") or ():
            if isinstance(c, dict):
                _without(c, absent)
    return obj


def _without(d: dict[str, Any], absent: Absent) -> None:
    for k in KEYS:
        if isinstance(d.get(k), list):
            if absent is Absent.drop:
                del d[k]
            else:
                d[k] = None


def strip_json(raw: bytes, absent: Absent) -> bytes:
    """One JSON document (a body, one SSE payload) without the ids; ``raw`` itself when it has none
    or when the byte rewrite does not check out (see the module doc)."""
    return _strip(raw, absent)[0]


def _strip(raw: bytes, absent: Absent) -> tuple[bytes, Any]:
    """(``strip_json``'s bytes, the stripped document parsed; None when ``raw`` comes back as it came)."""
    if b"token_ids" not in raw:
        return raw, None
    cuts = _cuts(raw, absent)
    if not cuts:
        return raw, None
    parts: list[bytes] = []
    pos = 0
    for start, end, new in cuts:
        parts += (raw[pos:start], new)
        pos = end
    parts.append(raw[pos:])
    out = b"".join(parts)
    try:
        obj = orjson.loads(out)
        ok = obj == _expected(orjson.loads(raw), absent)
    except orjson.JSONDecodeError:
        ok = False
    return (out, obj) if ok else (raw, None)


def _only_asked_for(obj: Any) -> bool:
    """A streamed chat chunk vLLM sends only because token ids were asked: every choice an empty
    delta, no finish reason, no logprobs (``obj``: the chunk without the ids)."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    return bool(choices) and all(isinstance(c, dict) and c.get("delta") == {} and c.get("finish_reason") is None
                                 and c.get("logprobs") is None for c in choices)


class StreamStripper:
    """An event stream without the ids, line by line: ``feed`` returns the complete lines received
    so far, rewritten (a ``data:`` line's JSON through ``strip_json``), and keeps a partial line for
    the next call; ``close`` returns what is left as it came."""

    __slots__ = ("absent", "_tail", "_skip_blank")

    def __init__(self, absent: Absent) -> None:
        self.absent = absent
        self._tail = b""
        self._skip_blank = False  #: the event just dropped still has its blank line to go

    def feed(self, data: bytes) -> bytes:
        buf = self._tail + data
        cut = buf.rfind(b"\n") + 1
        self._tail = buf[cut:]
        if not cut:
            return b""
        out: list[bytes] = []
        for line in buf[:cut].splitlines(keepends=True):
            if self._skip_blank:
                self._skip_blank = False
                if not line.strip():
                    continue
            out.append(self._line(line))
        return b"".join(out)

    def _line(self, line: bytes) -> bytes:
        if not line.startswith(b"data:") or b"token_ids" not in line:
            return line
        body = line[5:]
        lead = len(body) - len(body.lstrip())
        payload = body.strip()
        trail = body[lead + len(payload):]
        new, obj = _strip(payload, self.absent)
        if obj is None:
            return line
        if self.absent is Absent.null and _only_asked_for(obj):
            self._skip_blank = True
            return b""
        return b"data:" + body[:lead] + new + trail

    def close(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail


@dataclass
class TokenIdAsk:
    """The proxy asking one candidate for token ids (``canary --ask-token-ids``): how that server
    writes the keys when not asked, and whether it turned the field down."""

    absent: Absent
    refused: str | None = None  #: the candidate's answer ("HTTP 400: ...") once it refused the field
    asked: int = 0  #: requests sent with the field

    @classmethod
    def for_dialect(cls, dialect: str) -> TokenIdAsk | None:
        absent = ASKING_DIALECTS.get(dialect)
        return None if absent is None else cls(absent)

    def body(self, body: bytes, obj: dict[str, Any] | None) -> bytes | None:
        """The body to send with the field, or None (the candidate refused it before, the client set
        it or ``echo``, a body that is not a JSON object)."""
        if self.refused is not None or obj is None:
            return None
        return with_field(body, obj)
