"""OpenTelemetry model calls joined across the OTLP exports given together: one workload item per call
(``traceId:spanId``), whichever signal holds its parts.

How instrumentations split one call (opentelemetry-instrumentation-openai-v2 as the example; others
write one of the same forms):
- content on the span (2.4b0 ``span_only``): the span alone is the call;
- content in a ``gen_ai.client.inference.operation.details`` log record (2.4b0 ``event_only``), the
  span beside it without content; ``span_and_event`` writes both with the same content: one call, not
  a duplicate request;
- the v1.30 conventions (2.3b0 and earlier, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``):
  one log record per prompt message (``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message``: content, tool calls and the tool call id in
  ``body``) and one ``gen_ai.choice`` per choice (``body.message``, ``body.finish_reason``); the span
  holds model, sampling, usage and finish reasons, and no content.

Two passes over the same open files (rewound: a file's first ``reader.PEEK_BYTES`` are replayed from
memory), each streamed: the first keeps per call only its attributes without content (model,
sampling, usage: what a span says) and how many per-message events it has; the second builds each call
when its content is read (the per-message events of a call are held until its last one), with the
first pass's attributes merged under its own. Memory grows with the number of calls, not their text.
A span with no content anywhere is an error saying how to turn capture on; a per-message event
without trace and span ids belongs to no call and is an error too. No form records the tool
definitions offered, so the prompt re-tokenised from these logs is shorter than the server's (see
``profile``: a count below the logged ``gen_ai.usage.input_tokens`` is not labelled exact).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from specgauge.i18n import en
from specgauge.workload.formats import FieldError
from specgauge.workload.importers.common import otel_message
from specgauge.workload.importers.otlp import Fragment, fragments, item_from_attributes
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

#: attributes that hold content: left out of what the first pass keeps per call
_CONTENT_PREFIXES = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.prompt",
                     "gen_ai.completion", "gen_ai.tool.definitions")


@dataclass
class _Call:
    """What the first pass knows of one call."""

    attrs: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    has_call: bool = False
    events: int = 0


def _index(files: list[WorkloadFile]) -> dict[str, _Call]:
    calls: dict[str, _Call] = {}
    for f in files:
        for frag in fragments(f):
            if isinstance(frag, WorkloadError) or frag.key is None:
                continue
            c = calls.setdefault(frag.key, _Call())
            if frag.kind in ("message", "choice"):
                c.events += 1
                continue
            c.has_call |= frag.kind == "call"
            c.attrs.update({k: v for k, v in frag.attrs.items() if not k.startswith(_CONTENT_PREFIXES)})
            if "span_name" in frag.meta or not c.meta:  # the span's name and times over a log record's
                c.meta = frag.meta
    return calls


def _tool_calls(value: Any) -> list[dict[str, Any]]:
    out = []
    for i, tc in enumerate(value if isinstance(value, list) else []):
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function") if isinstance(tc.get("function"), dict) else {}
        args = fn.get("arguments", "")
        out.append({"id": str(tc.get("id") or f"call_{i}"), "type": str(tc.get("type") or "function"),
                    "function": {"name": str(fn.get("name", "")),
                                 "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})
    return out


def _event_message(frag: Fragment) -> dict[str, Any]:
    """One ``gen_ai.<role>.message`` event as an OpenAI chat turn (``body``: content, tool_calls, id)."""
    body = frag.attrs.get("body")
    body = body if isinstance(body, dict) else {}
    msg = otel_message({"role": frag.attrs["role"], "content": body.get("content") or ""}, f"{frag.label}.body")
    calls = _tool_calls(body.get("tool_calls"))
    if calls:
        msg["tool_calls"] = calls
    if msg["role"] == "tool" and body.get("id") is not None:
        msg["tool_call_id"] = str(body["id"])
    return msg


def _choice(frags: list[Fragment]) -> dict[str, Any] | None:
    """Choice 0 among a call's ``gen_ai.choice`` events as an output message (with its finish reason)."""
    for f in frags:
        body = f.attrs.get("body")
        if not isinstance(body, dict) or int(body.get("index") or 0) != 0:
            continue
        m = body.get("message") if isinstance(body.get("message"), dict) else {}
        out: dict[str, Any] = {"role": "assistant", "content": m.get("content") or ""}
        calls = _tool_calls(m.get("tool_calls"))
        if calls:
            out["tool_calls"] = calls
        if isinstance(body.get("finish_reason"), str):
            out["finish_reason"] = body["finish_reason"]
        return out
    return None


def _from_events(key: str, frags: list[Fragment], call: _Call) -> WorkloadItem:
    """A call from its v1.30 per-message events (in emission order) and its span's attributes, built as
    if the span had carried the messages (one item builder for every form)."""
    msgs = [_event_message(f) for f in frags if f.kind == "message"]
    first = frags[0]
    if not any(m.get("content") or m.get("tool_calls") for m in msgs):
        raise FieldError(f"{first.label}.body", en("import.otlp.no_content"))
    attrs = {"gen_ai.operation.name": "chat", **call.attrs, "gen_ai.input.messages": msgs}
    choice = _choice([f for f in frags if f.kind == "choice"])
    if choice is not None:
        attrs["gen_ai.output.messages"] = [choice]
    return item_from_attributes(attrs, key, {**first.meta, **call.meta}, f"{first.label}.body.")


def _item(frag: Fragment, stem: str, call: _Call | None) -> WorkloadItem:
    attrs = {**call.attrs, **frag.attrs} if call is not None else frag.attrs
    meta = {**frag.meta, **(call.meta if call is not None else {})}
    item_id = frag.key or f"{stem}:{frag.where.rsplit(':', 1)[-1]}:{frag.label}"
    return item_from_attributes(attrs, item_id, meta, f"{frag.label}.")


def records_joined(files: list[WorkloadFile]) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    """Every model call of the OTLP exports ``files``, one item per call, in the order its content is read."""
    calls = _index(files)
    done: set[str] = set()
    held: dict[str, list[Fragment]] = {}
    for f in files:
        for frag in fragments(f):
            if isinstance(frag, WorkloadError):
                yield frag.source, frag
                continue
            call = calls.get(frag.key) if frag.key is not None else None
            try:
                got = _step(frag, f.path.name, call, done, held)
            except FieldError as e:
                got = WorkloadError(frag.where, e.message, e.field)
            if got is not None:
                yield frag.where, got


def _step(frag: Fragment, stem: str, call: _Call | None, done: set[str],
          held: dict[str, list[Fragment]]) -> WorkloadItem | WorkloadError | None:
    """What one fragment adds: a finished call, an error, or nothing yet (held, or already built)."""
    key = frag.key
    if frag.kind in ("message", "choice"):
        if key is None:
            return WorkloadError(frag.where, en("import.otlp.event_without_span"), frag.label)
        if call is None or call.has_call or key in done:
            return None  # the call's content came on its span or details event
        group = held.setdefault(key, [])
        group.append(frag)
        if len(group) < call.events:
            return None
        del held[key]
        done.add(key)
        return _from_events(key, group, call)
    if key is not None and key in done:
        return None  # span_and_event: the span and its details event are one call
    if frag.kind == "bare":
        if call is not None and (call.has_call or call.events):
            return None  # its content is in another record of the same call
        raise FieldError(f"{frag.label}.gen_ai.input.messages", en("import.otlp.no_content"))
    if key is not None:
        done.add(key)
    return _item(frag, stem, call)


def records(f: WorkloadFile) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    """One OTLP export on its own (its spans and log records joined within it)."""
    return records_joined([f])
