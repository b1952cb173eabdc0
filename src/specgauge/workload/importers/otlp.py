"""OpenTelemetry GenAI traffic from OTLP JSON exports: spans (``resourceSpans``) and log records /
events (``resourceLogs``), as the collector's file exporter writes them (one export request per line)
or as one pretty-printed document.

What counts as a model call, and where its content sits (semantic conventions for GenAI, current and
the indexed form OpenLLMetry wrote before it):
- a span (or a ``gen_ai.client.inference.operation.details`` event / log record) whose
  ``gen_ai.operation.name`` is ``chat``, ``text_completion`` or ``generate_content``, or that carries
  prompt content with no operation named;
- prompt: ``gen_ai.system_instructions`` + ``gen_ai.input.messages`` (JSON string on spans,
  structured on events), else ``gen_ai.prompt.N.role/content``; output: ``gen_ai.output.messages``
  (the first choice), else ``gen_ai.completion.0.*``;
- model ``gen_ai.request.model`` (``gen_ai.response.model`` beside it), sampling
  ``gen_ai.request.{temperature,top_p,top_k,seed,max_tokens,stop_sequences,...}``, tokens
  ``gen_ai.usage.input_tokens/output_tokens`` (or the older ``prompt_tokens/completion_tokens``).
Other spans (embeddings, tools, agents, HTTP) are not requests and are passed over. A model-call span
without content (capture is off by default) is an error naming it. No format carries token ids, so
``simulate`` re-tokenises the text and labels it approximate; token counts from ``usage`` are exact.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from specgauge.i18n import en
from specgauge.workload.formats import FieldError, _jtype
from specgauge.workload.importers.common import build_item, json_text, otel_message, otel_messages, system_instructions
from specgauge.workload.importers.docs import documents
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
#: the v1.30 conventions' per-message log events (opentelemetry-instrumentation-openai-v2 up to 2.3b0)
LEGACY_CHOICE = "gen_ai.choice"
LEGACY_MESSAGES = {"gen_ai.system.message", "gen_ai.developer.message", "gen_ai.user.message",
                   "gen_ai.assistant.message", "gen_ai.tool.message", LEGACY_CHOICE}
_PARAMS = {
    "gen_ai.request.temperature": "temperature", "gen_ai.request.top_p": "top_p", "gen_ai.request.top_k": "top_k",
    "gen_ai.request.seed": "seed", "gen_ai.request.max_tokens": "max_tokens", "gen_ai.request.stop_sequences": "stop",
    "gen_ai.request.frequency_penalty": "frequency_penalty", "gen_ai.request.presence_penalty": "presence_penalty",
    "gen_ai.request.choice.count": "n",
}
_CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.prompt.0.content", "gen_ai.prompt.0.role", "gen_ai.prompt")


def any_value(v: Any, field: str) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value (int64 arrives as a string, bytes as base64)."""
    if not isinstance(v, dict):
        raise FieldError(field, f"expected an AnyValue object, got {_jtype(v)}")
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        try:
            return int(v["intValue"])
        except (TypeError, ValueError):
            raise FieldError(field, f"intValue {v['intValue']!r} is not an integer") from None
    if "doubleValue" in v:
        return float(v["doubleValue"]) if v["doubleValue"] is not None else None
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        vals = (v["arrayValue"] or {}).get("values") or []
        return [any_value(x, f"{field}.{i}") for i, x in enumerate(vals)]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values") or [], field)
    if "bytesValue" in v:
        return base64.b64decode(v["bytesValue"] or "")
    return None


def attributes(kvs: Any, field: str) -> dict[str, Any]:
    if not isinstance(kvs, list):
        raise FieldError(field, f"expected an array of key/value pairs, got {_jtype(kvs)}")
    out: dict[str, Any] = {}
    for i, kv in enumerate(kvs):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise FieldError(f"{field}.{i}", "expected {\"key\": ..., \"value\": ...}")
        out[kv["key"]] = any_value(kv.get("value", {}), f"{field}.{kv['key']}")
    return out


def _indexed(attrs: dict[str, Any], base: str) -> list[dict[str, Any]]:
    """``base.N.field`` attributes (OpenLLMetry's indexed form) as a list of dicts, in index order."""
    rows: dict[int, dict[str, Any]] = {}
    for k, v in attrs.items():
        if not k.startswith(base + "."):
            continue
        idx, _, rest = k[len(base) + 1:].partition(".")
        if idx.isdigit() and rest:
            rows.setdefault(int(idx), {})[rest] = v
    return [rows[i] for i in sorted(rows)]


def _legacy_tool_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    calls = _indexed(row, "tool_calls")
    return [{"id": str(c.get("id") or f"call_{i}"), "type": "function",
             "function": {"name": str(c.get("name", "")), "arguments": str(c.get("arguments", ""))}}
            for i, c in enumerate(calls)]


def _prompt(attrs: dict[str, Any], field: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if attrs.get("gen_ai.system_instructions") is not None:
        msgs += system_instructions(attrs["gen_ai.system_instructions"], f"{field}gen_ai.system_instructions")
    if attrs.get("gen_ai.input.messages") is not None:
        return msgs + otel_messages(attrs["gen_ai.input.messages"], f"{field}gen_ai.input.messages")
    for i, row in enumerate(_indexed(attrs, "gen_ai.prompt")):
        m = otel_message({"role": row.get("role", "user"), "content": row.get("content", "")},
                         f"{field}gen_ai.prompt.{i}")
        if row.get("tool_call_id") is not None:
            m["tool_call_id"] = str(row["tool_call_id"])
        msgs.append(m)
    return msgs


def _output(attrs: dict[str, Any], field: str) -> tuple[str | None, list[dict[str, Any]], str | None]:
    """(text, tool_calls, finish_reason) of the first choice; text None when no output was logged."""
    reasons = attrs.get("gen_ai.response.finish_reasons")
    reason = reasons[0] if isinstance(reasons, list) and reasons else reasons if isinstance(reasons, str) else None
    if attrs.get("gen_ai.output.messages") is not None:
        raw = json_text(attrs["gen_ai.output.messages"], f"{field}gen_ai.output.messages")
        outs = otel_messages(raw, f"{field}gen_ai.output.messages")
        if not outs:
            return None, [], reason
        fr = raw[0].get("finish_reason") if isinstance(raw, list) and isinstance(raw[0], dict) else None
        return outs[0].get("content") or "", outs[0].get("tool_calls") or [], fr or reason
    rows = _indexed(attrs, "gen_ai.completion")
    if not rows:
        return None, [], reason
    row = rows[0]
    content = row.get("content", "")
    return (content if isinstance(content, str) else str(content)), _legacy_tool_calls(row), row.get("finish_reason") or reason


def is_model_call(attrs: dict[str, Any]) -> bool:
    op = attrs.get("gen_ai.operation.name", attrs.get("llm.request.type"))
    if op is not None:
        return str(op) in LLM_OPERATIONS
    return any(k in attrs for k in _CONTENT_KEYS) or any(k.startswith("gen_ai.prompt.") for k in attrs)


def item_from_attributes(attrs: dict[str, Any], item_id: str, meta: dict[str, Any], field: str = "") -> WorkloadItem:
    """One model call's attributes (span, its details event, or a log record merged) as a workload item."""
    params = {name: attrs[k] for k, name in _PARAMS.items() if attrs.get(k) is not None}
    if isinstance(params.get("stop"), str):
        params["stop"] = [params["stop"]]
    op = str(attrs.get("gen_ai.operation.name", attrs.get("llm.request.type", "chat")))
    msgs = _prompt(attrs, field)
    prompt: str | None = None
    if op in ("text_completion", "completion") and msgs:
        prompt, msgs = "\n".join(m.get("content") or "" for m in msgs), []
    if not msgs and prompt is None:
        raise FieldError(f"{field}gen_ai.input.messages", en("import.otlp.no_content"))
    text, calls, reason = _output(attrs, field)
    it = attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens"))
    ot = attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens"))
    meta = {**meta, **{k: v for k, v in (("provider", attrs.get("gen_ai.provider.name", attrs.get("gen_ai.system"))),
                                         ("operation", op),
                                         ("conversation_id", attrs.get("gen_ai.conversation.id")),
                                         ("response_id", attrs.get("gen_ai.response.id"))) if v is not None}}
    return build_item(item_id=item_id, messages=msgs or None, prompt=prompt, params=params,
                      model=attrs.get("gen_ai.request.model"), output_text=text, output_tool_calls=calls,
                      finish_reason=reason, input_tokens=it, output_tokens=ot,
                      response_model=attrs.get("gen_ai.response.model"), metadata=meta,
                      where_prompt=f"{field}gen_ai.input.messages")


def _spans(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], str | None]]:
    """(label, resource attributes, span, schema URL) per span of one ExportTraceServiceRequest (or one of
    its resourceSpans items)."""
    blocks = doc["resourceSpans"] if "resourceSpans" in doc else [doc]
    if not isinstance(blocks, list):
        raise FieldError("resourceSpans", f"expected an array, got {_jtype(blocks)}")
    for r, rs in enumerate(blocks):
        if not isinstance(rs, dict):
            raise FieldError(f"resourceSpans.{r}", f"expected an object, got {_jtype(rs)}")
        res = attributes((rs.get("resource") or {}).get("attributes") or [], f"resourceSpans.{r}.resource.attributes")
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans")) or []
        for s, ss in enumerate(scopes):
            schema = (ss or {}).get("schemaUrl") or rs.get("schemaUrl")
            for i, span in enumerate((ss or {}).get("spans") or []):
                if not isinstance(span, dict):
                    raise FieldError(f"resourceSpans.{r}.scopeSpans.{s}.spans.{i}", f"expected an object, got {_jtype(span)}")
                yield f"resourceSpans.{r}.scopeSpans.{s}.spans.{i}", res, span, schema


def _log_records(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], str | None]]:
    blocks = doc["resourceLogs"] if "resourceLogs" in doc else [doc]
    if not isinstance(blocks, list):
        raise FieldError("resourceLogs", f"expected an array, got {_jtype(blocks)}")
    for r, rl in enumerate(blocks):
        res = attributes(((rl or {}).get("resource") or {}).get("attributes") or [], f"resourceLogs.{r}.resource.attributes")
        for s, sl in enumerate((rl or {}).get("scopeLogs", (rl or {}).get("instrumentationLibraryLogs")) or []):
            schema = (sl or {}).get("schemaUrl") or (rl or {}).get("schemaUrl")
            for i, rec in enumerate((sl or {}).get("logRecords") or []):
                if isinstance(rec, dict):
                    yield f"resourceLogs.{r}.scopeLogs.{s}.logRecords.{i}", res, rec, schema


@dataclass(frozen=True)
class Fragment:
    """What one span or log record says about one model call; ``otlp_calls`` joins the fragments of a
    call (same ``key``) across the files given together.

    kind: ``call`` has the prompt (span attributes, or a ``gen_ai.client.inference.operation.details``
    event / log record); ``bare`` is a model-call span without content (capture off, or the content
    went to log records); ``message`` / ``choice`` are the v1.30 conventions' per-message log events
    (``gen_ai.<role>.message``: ``attrs = {"role", "body"}``; ``gen_ai.choice``: ``attrs = {"body"}``).
    """

    where: str
    label: str
    kind: Literal["call", "bare", "message", "choice"]
    key: str | None
    attrs: dict[str, Any]
    meta: dict[str, Any]


def _fragment(label: str, res: dict[str, Any], rec: dict[str, Any], is_log: bool, where: str) -> Fragment | None:
    attrs = attributes(rec.get("attributes") or [], f"{label}.attributes")
    tid, sid = _hex_id(rec.get("traceId")), _hex_id(rec.get("spanId"))
    key = f"{tid}:{sid}" if tid and sid else None
    meta = {k: v for k, v in (("trace_id", tid or None), ("span_id", sid or None), ("span_name", rec.get("name")),
                              ("service", res.get("service.name")),
                              ("start_time_unix_nano", _nano(rec.get("startTimeUnixNano", rec.get("timeUnixNano")))))
            if v is not None}
    if is_log:
        name = rec.get("eventName") or attrs.get("event.name")
        if isinstance(name, str) and name in LEGACY_MESSAGES:
            body = any_value(rec["body"], f"{label}.body") if isinstance(rec.get("body"), dict) else None
            if name == LEGACY_CHOICE:
                return Fragment(where=where, label=label, kind="choice", key=key, attrs={"body": body}, meta=meta)
            return Fragment(where=where, label=label, kind="message", key=key,
                            attrs={"role": name.split(".")[1], "body": body}, meta=meta)
        if name != DETAILS_EVENT:
            return None
    else:
        for j, ev in enumerate(rec.get("events") or []):
            if isinstance(ev, dict) and ev.get("name") == DETAILS_EVENT:
                attrs = {**attrs, **attributes(ev.get("attributes") or [], f"{label}.events.{j}.attributes")}
    if not is_model_call(attrs):
        return None
    has_prompt = any(attrs.get(k) is not None for k in _CONTENT_KEYS) or any(k.startswith("gen_ai.prompt.") for k in attrs)
    return Fragment(where=where, label=label, kind="call" if has_prompt else "bare", key=key, attrs=attrs, meta=meta)


def fragments(f: WorkloadFile) -> Iterator[Fragment | WorkloadError]:
    """Every model-call fragment of an OTLP JSON export, in file order; a broken document is a
    ``WorkloadError`` naming its place, and reading goes on with the next one."""
    console = console_export(f)
    if console is not None:
        yield WorkloadError(f.name, en("import.otlp.console", exporter=console))
        return
    arrays = {"resourceSpans": "resourceSpans", "resourceLogs": "resourceLogs"}
    for where, doc in documents(f, arrays):
        if isinstance(doc, WorkloadError):
            yield doc
            continue
        if where.rsplit(":", 1)[-1].startswith("resourceLogs"):
            doc = {"resourceLogs": [doc]}
        elif where.rsplit(":", 1)[-1].startswith("resourceSpans"):
            doc = {"resourceSpans": [doc]}
        if not isinstance(doc, dict):
            yield WorkloadError(where, f"expected an OTLP JSON object, got {_jtype(doc)}")
            continue
        if console_record(doc) is not None:
            yield WorkloadError(where, en("import.otlp.console", exporter=console_record(doc)))
            continue
        is_log = "resourceLogs" in doc or "scopeLogs" in doc
        try:
            recs = list(_log_records(doc) if is_log else _spans(doc))
        except FieldError as e:
            yield WorkloadError(where, e.message, e.field)
            continue
        for label, res, rec, _schema in recs:
            try:
                frag = _fragment(label, res, rec, is_log, where)
            except FieldError as e:
                yield WorkloadError(where, e.message, e.field)
                continue
            if frag is not None:
                yield frag


def _hex_id(v: Any) -> str:
    """A trace / span id as lower-case hex: OTLP JSON writes hex; protobuf's generic JSON mapping
    (``MessageToJson``) writes base64, taken too."""
    if not isinstance(v, str) or not v:
        return ""
    if all(c in "0123456789abcdefABCDEF" for c in v) and len(v) in (16, 32):
        return v.lower()
    try:
        raw = base64.b64decode(v, validate=True)
    except (ValueError, TypeError):
        return v
    return raw.hex() if len(raw) in (8, 16) else v


def _nano(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


#: top-level keys of the SDK's console exporters' records (``ReadableSpan.to_json``, ``LogRecord.to_json``)
_CONSOLE_SPAN = ("context", "kind", "start_time")
_CONSOLE_LOG = ("severity_number", "observed_timestamp")


def console_record(obj: Any) -> str | None:
    """The exporter's name (``ConsoleSpanExporter`` / ``ConsoleLogRecordExporter``) when ``obj`` is what
    the OpenTelemetry SDK's console exporters print for one record, else None."""
    if not isinstance(obj, dict):
        return None
    if all(k in obj for k in _CONSOLE_SPAN) and str(obj.get("kind", "")).startswith("SpanKind."):
        return "ConsoleSpanExporter"
    if all(k in obj for k in _CONSOLE_LOG):
        return "ConsoleLogRecordExporter"
    return None


def console_export(f: WorkloadFile) -> str | None:
    """The console exporter's name when the file is its output (records printed one after another,
    pretty-printed by default: no JSON document as a whole), else None."""
    try:
        kind, first = f.head.layout()
    except WorkloadError:
        return None
    if kind == "lines":
        return console_record(first)
    return console_record(f.top_keys()) if kind == "object" else None


def looks_like(obj: Any) -> bool:
    return isinstance(obj, dict) and ("resourceSpans" in obj or "resourceLogs" in obj or console_record(obj) is not None)
