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

_IDS = rb"\[[-\d,\s]*\]"  # a flat list of integers: [1, 2, 3]
_KEY = rb'"(?:prompt_token_ids|token_ids)"\s*:\s*'
# ', "token_ids": [1, 2]' before "}" or ", ...": the comma and the pair go
_AFTER_COMMA = re.compile(rb",\s*" + _KEY + _IDS)
# '{"token_ids": [1], "index": 0}': the pair and the comma after it go, "{" stays
_FIRST = re.compile(rb"(\{\s*)" + _KEY + _IDS + rb"(?:\s*,\s*)?")
# the list becomes null
_AS_NULL = re.compile(rb"([,{]\s*" + _KEY + rb")" + _IDS)


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
    """``obj`` (a parsed body or chunk) as the server writes it when the ids were not asked for."""
    if not isinstance(obj, dict):
        return obj
    out = _without(obj, absent)
    choices = out.get("choices")
    if isinstance(choices, list):
        out["choices"] = [_without(c, absent) if isinstance(c, dict) else c for c in choices]
    return out


def _without(d: dict[str, Any], absent: Absent) -> dict[str, Any]:
    if absent is Absent.drop:
        return {k: v for k, v in d.items() if k not in KEYS}
    return {k: (None if k in KEYS and isinstance(v, list) else v) for k, v in d.items()}


def strip_json(raw: bytes, absent: Absent) -> bytes:
    """One JSON document (a body, one SSE payload) without the ids; ``raw`` itself when it has none
    or when the byte rewrite does not check out (see the module doc)."""
    if b"token_ids" not in raw:
        return raw
    if absent is Absent.drop:
        out = raw
        while True:  # adjacent pairs: '{"token_ids": [1], "prompt_token_ids": [2], ...' needs two passes
            new = _FIRST.sub(rb"\1", _AFTER_COMMA.sub(b"", out))
            if new == out:
                break
            out = new
    else:
        out = _AS_NULL.sub(rb"\1null", raw)
    if out == raw:
        return raw
    try:
        ok = orjson.loads(out) == _expected(orjson.loads(raw), absent)
    except orjson.JSONDecodeError:
        ok = False
    return out if ok else raw


def _only_asked_for(payload: bytes) -> bool:
    """A streamed chat chunk vLLM sends only because token ids were asked: every choice an empty
    delta, no finish reason, no logprobs (``payload`` already stripped)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
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
        new = strip_json(payload, self.absent)
        if new is payload:
            return line
        if self.absent is Absent.null and _only_asked_for(new):
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
