"""What the proxy learns from one upstream response while forwarding it: the load generator's own
stream parsing (``loadgen.sse`` + ``loadgen.runner.apply_payloads``) applied to a copy of the bytes,
and the load generator's record type (``RequestRecord``), with the canary's facts in
``extra["canary"]``.

A parse failure never stops the forwarding: the bytes are the client's; the record is marked failed.
"""

from __future__ import annotations

import hashlib
import json
import time
from enum import Enum
from typing import Any

from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.runner import (
    RequestFailed,
    StreamState,
    _error_message,
    add_tool_deltas,
    apply_payloads,
    stream_record,
)
from specgauge.loadgen.sse import MalformedSSE, SSEParser
from specgauge.records import FailureKind, RequestRecord

#: body keys that do not change what a greedy request generates (ignored when pairing requests)
_PAIRING_IGNORED = ("user", "stream", "stream_options")


class Side(str, Enum):
    baseline = "baseline"
    candidate = "candidate"


class Role(str, Enum):
    live = "live"  #: served to the client
    retry = "retry"  #: the baseline serving a request the candidate failed before its first byte
    shadow = "shadow"  #: a mirrored copy; the client never sees it


def is_greedy(body: dict[str, Any] | None) -> bool:
    t = body.get("temperature") if body else None
    return isinstance(t, (int, float)) and not isinstance(t, bool) and t == 0


def pairing_key(body: dict[str, Any]) -> str:
    """Requests with equal keys generate the same greedy output (streamed or not, any user)."""
    core = {k: v for k, v in body.items() if k not in _PAIRING_IGNORED}
    return hashlib.sha256(json.dumps(core, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:20]


class Capture:
    """The parsed copy of one response. ``failure`` holds the first problem seen, if any."""

    __slots__ = ("st", "parser", "sent", "dialect", "failure", "status")

    def __init__(self, dialect: Dialect, sent: float) -> None:
        self.st = StreamState()
        self.parser = SSEParser()
        self.sent = sent  #: perf_counter() at send
        self.dialect = dialect
        self.failure: tuple[FailureKind, str] | None = None
        self.status: int | None = None

    def feed(self, data: bytes, t: float | None = None) -> bool:
        """Parse a piece of the stream that arrived at ``t`` (a ``perf_counter()`` value; None: now);
        False once the stream is known to be broken. Bytes all the way (``SSEParser.feed_data``,
        orjson on the payload), as the load generator's own hot path."""
        if self.failure is not None:
            return False
        try:
            apply_payloads(self.parser.feed_data(data), (time.perf_counter() if t is None else t) - self.sent, self.st,
                           self.status or 0, self.dialect.cumulative_tokens)
        except RequestFailed as e:
            self.failure = (e.kind, e.message)
        except MalformedSSE as e:
            self.failure = (FailureKind.malformed_sse, str(e))
        return self.failure is None

    def close(self) -> None:
        """End of body: a stream without ``[DONE]`` is cut short."""
        if self.failure is not None:
            return
        try:
            tail, left = self.parser.close_data()
            apply_payloads(tail, time.perf_counter() - self.sent, self.st, self.status or 0, self.dialect.cumulative_tokens)
        except RequestFailed as e:
            self.failure = (e.kind, e.message)
            return
        except MalformedSSE as e:
            self.failure = (FailureKind.malformed_sse, str(e))
            return
        if not self.st.done:
            self.failure = (FailureKind.stream_cut_short, f"stream ended with {'a partial event' if left else 'no [DONE]'}")

    def body(self, raw: bytes) -> None:
        """A whole non-streamed body: usage, text, finish reason and the dialect's extras."""
        try:
            obj = json.loads(raw)
        except ValueError:
            self.failure = (FailureKind.invalid_json, f"the response body is not JSON: {raw[:80]!r}")
            return
        if not isinstance(obj, dict):
            self.failure = (FailureKind.invalid_json, f"the response body is not a JSON object: {raw[:80]!r}")
            return
        choices = obj.get("choices")
        if "error" in obj and not choices:
            self.failure = (FailureKind.error_payload, _error_message(obj))
            return
        st = self.st
        for c in choices if isinstance(choices, list) else []:
            if not isinstance(c, dict):
                continue
            msg = c.get("message")
            piece = msg.get("content") if isinstance(msg, dict) else c.get("text")
            if isinstance(piece, str):
                st.text.append(piece)
            if isinstance(msg, dict):
                add_tool_deltas(st, msg.get("tool_calls"))
            if c.get("finish_reason"):
                st.finish_reason = c["finish_reason"]
            ids = c.get("token_ids")  # vLLM / embedded with return_token_ids, as the stream's ``_output_of`` reads them
            if isinstance(ids, list):
                st.token_ids.extend(ids)
            if st.prompt_ids is None and isinstance(c.get("prompt_token_ids"), list):  # completions: in the choice
                st.prompt_ids = c["prompt_token_ids"]
        if st.prompt_ids is None and isinstance(obj.get("prompt_token_ids"), list):  # chat: top level
            st.prompt_ids = obj["prompt_token_ids"]
        for k in ("usage", "metrics", "timings", "meta_info"):
            if obj.get(k) is not None:
                st.final[k] = obj[k]
        st.done = True


def build_record(cap: Capture, *, rid: str, seq: int, t0_perf: float, started_at: float, failure: tuple[FailureKind, str] | None,
                 http_status: int | None, e2e_s: float | None, canary: dict[str, Any]) -> RequestRecord:
    """The request's ``RequestRecord``; times relative to the proxy's start (``t0_perf``)."""
    sent_s = cap.sent - t0_perf
    kind, msg = failure if failure is not None else (None, None)
    rec = stream_record(cap.st, cap.dialect, failure=kind, error=msg, http_status=http_status, e2e_s=e2e_s,
                        elapsed_s=max(0.0, time.perf_counter() - cap.sent), id=rid, segment="default", index=seq,
                        scheduled_s=sent_s, sent_s=sent_s, ready_s=sent_s, started_at=started_at)
    rec.extra["canary"] = canary
    return rec
