"""What the trace importers share: OpenTelemetry GenAI message parts to OpenAI chat turns, one
``WorkloadItem`` from the fields every observability stack logs, and JSON held as a string.

Knows nothing about files: each importer walks its own format and calls ``build_item`` with what it
found; a problem is a ``FieldError(field, message)`` and the importer adds ``FILE:LINE``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError

from specgauge.config import format_validation_error
from specgauge.workload.formats import FieldError, _jtype
from specgauge.workload.schema import ApiKind, Request, Response, Usage, WorkloadItem

#: OTel GenAI role names that are not OpenAI's
_ROLES = {"system": "system", "developer": "developer", "user": "user", "human": "user", "assistant": "assistant",
          "model": "assistant", "ai": "assistant", "tool": "tool", "function": "tool"}
#: sampling parameters kept as request fields
SAMPLING = ("temperature", "top_p", "top_k", "seed", "stop", "max_tokens")
#: other logged parameters sent again as body fields; everything else a log holds (SDK options,
#: ``extra_body``, keys) goes to ``metadata.logged_parameters`` and never into a request body
BODY_PARAMS = ("frequency_penalty", "presence_penalty", "repetition_penalty", "min_p", "logit_bias")


def json_text(value: Any, field: str) -> Any:
    """A JSON document logged as a string (OTel attributes, LiteLLM spend-log columns), parsed; other
    values as they are."""
    if not isinstance(value, str):
        return value
    s = value.strip()
    if not s or s[0] not in "[{":
        return value
    try:
        return json.loads(s)
    except json.JSONDecodeError as e:
        raise FieldError(field, f"holds invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise FieldError(field, "holds JSON nested too deeply") from None


def _parts_text(parts: list[Any], field: str) -> tuple[str, list[dict[str, Any]], str | None]:
    """(text, OpenAI tool_calls, tool_call_id) of one message's OTel ``parts``."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    call_id: str | None = None
    for i, p in enumerate(parts):
        if isinstance(p, str):
            texts.append(p)
            continue
        if not isinstance(p, dict):
            raise FieldError(f"{field}.{i}", f"expected a part object, got {_jtype(p)}")
        kind = p.get("type", "text")
        if kind == "text":
            c = p.get("content", p.get("text", ""))
            if not isinstance(c, str):
                raise FieldError(f"{field}.{i}.content", f"expected a string, got {_jtype(c)}")
            texts.append(c)
        elif kind == "tool_call":
            args = p.get("arguments")
            calls.append({"id": str(p.get("id") or f"call_{i}"), "type": "function",
                          "function": {"name": str(p.get("name", "")),
                                       "arguments": args if isinstance(args, str) else json.dumps(args)}})
        elif kind == "tool_call_response":
            r = p.get("response", p.get("result", ""))
            texts.append(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False))
            call_id = str(p["id"]) if p.get("id") is not None else call_id
        # reasoning, blob, uri, file and server-tool parts carry no text a drafter reads in the prompt
    return "".join(texts), calls, call_id


def _content_parts(value: Any) -> Any:
    """A message's content: a list of parts logged as a JSON string (LiteLLM spend-log columns) parsed;
    any other text kept exactly as it is, JSON-looking or not (a user may send JSON, or text opening
    with a bracket)."""
    if not isinstance(value, str) or not value.lstrip().startswith("["):
        return value
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return value
    ok = isinstance(parsed, list) and parsed and all(isinstance(p, dict) and "type" in p for p in parsed)
    return parsed if ok else value


def otel_message(msg: Any, field: str) -> dict[str, Any]:
    """One OTel GenAI message (``{"role", "parts": [...]}``, or an OpenAI-style ``{"role", "content"}``
    as some instrumentations write) as an OpenAI chat turn."""
    if not isinstance(msg, dict):
        raise FieldError(field, f"expected a message object, got {_jtype(msg)}")
    role = _ROLES.get(str(msg.get("role", "")).lower())
    if role is None:
        raise FieldError(f"{field}.role", f"unknown role {msg.get('role')!r}")
    out: dict[str, Any] = {"role": role}
    if "parts" in msg:
        parts = msg["parts"]
        if not isinstance(parts, list):
            raise FieldError(f"{field}.parts", f"expected an array, got {_jtype(parts)}")
        text, calls, call_id = _parts_text(parts, f"{field}.parts")
        out["content"] = text
        if calls:
            out["tool_calls"] = calls
        if call_id is not None and role == "tool":
            out["tool_call_id"] = call_id
    else:
        content = _content_parts(msg.get("content"))
        if isinstance(content, list):
            content = _parts_text(content, f"{field}.content")[0]
        if content is not None and not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        out["content"] = content or ""
        if msg.get("tool_calls"):
            out["tool_calls"] = msg["tool_calls"]
        if msg.get("tool_call_id") is not None:
            out["tool_call_id"] = str(msg["tool_call_id"])
    if msg.get("name") is not None:
        out["name"] = str(msg["name"])
    return out


def otel_messages(value: Any, field: str) -> list[dict[str, Any]]:
    value = json_text(value, field)
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if not isinstance(value, list):
        raise FieldError(field, f"expected an array of messages, got {_jtype(value)}")
    return [otel_message(m, f"{field}.{i}") for i, m in enumerate(value)]


def system_instructions(value: Any, field: str) -> list[dict[str, Any]]:
    """``gen_ai.system_instructions``: parts (or a plain string) as one system turn."""
    value = json_text(value, field)
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise FieldError(field, f"expected an array of parts, got {_jtype(value)}")
    text = _parts_text(value, field)[0]
    return [{"role": "system", "content": text}] if text else []


def _number(v: Any) -> Any:
    """A parameter some logs write as a string ("0.7", "256") as a number; anything else unchanged
    (the request's validation then names it)."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        if not math.isfinite(f):  # Langfuse SDKs log an unset max_tokens as "inf"
            return None
        return int(f) if f.is_integer() and "." not in v else f
    return v


def _int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise FieldError(field, f"expected an integer, got {_jtype(value)}")
    try:
        f = float(value)
    except ValueError:
        raise FieldError(field, f"expected an integer, got {value!r}") from None
    if f != int(f) or f < 0:
        raise FieldError(field, f"expected a non-negative integer, got {value!r}")
    return int(f)


def build_item(
    *,
    item_id: str,
    messages: list[dict[str, Any]] | None = None,
    prompt: str | list[int] | None = None,
    params: dict[str, Any] | None = None,
    model: str | None = None,
    output_text: str | None = None,
    output_tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    input_tokens: Any = None,
    output_tokens: Any = None,
    prompt_token_ids: list[int] | None = None,
    output_token_ids: list[int] | None = None,
    response_model: str | None = None,
    metadata: dict[str, Any] | None = None,
    where_prompt: str = "input",
    tools: Any = None,
    tool_choice: Any = None,
) -> WorkloadItem:
    """One workload item from what a trace logged. Token counts go to ``usage`` (exact in ``profile``):
    pass only counts the server made, never a logging library's estimate; text without token ids is
    re-tokenised by ``simulate`` and labelled approximate there. ``tools`` / ``tool_choice``, where the
    log kept them, stay on the request: the chat template renders the schemas into the prompt."""
    if not messages and not prompt:
        raise FieldError(where_prompt, "no prompt was logged (is content capture on in the instrumentation?)")
    data: dict[str, Any] = {"id": item_id, "metadata": metadata or {}}
    if messages:
        data.update(api=ApiKind.chat, messages=messages)
    else:
        data.update(api=ApiKind.completion, prompt=prompt)
    extra: dict[str, Any] = {}
    other: dict[str, Any] = {}
    for k, v in (params or {}).items():
        if v is None:
            continue
        if k == "max_completion_tokens":
            k = "max_tokens"
        if k in SAMPLING:
            data[k] = _number(v) if k != "stop" else v
        elif k in BODY_PARAMS:
            extra[k] = _number(v)
        else:
            other[k] = v
    if other:
        data["metadata"] = {**data["metadata"], "logged_parameters": other}
    if model:
        extra["model"] = model
    data["extra"] = extra
    if tools:
        data["tools"] = json_text(tools, "tools")
    if tool_choice is not None:
        data["tool_choice"] = json_text(tool_choice, "tool_choice")
    try:
        request = Request.model_validate(data)
    except ValidationError as e:
        raise FieldError(where_prompt, format_validation_error(e)) from None
    response = None
    if output_text is not None or output_tool_calls or output_token_ids is not None:
        usage = None
        it, ot = _int(input_tokens, "usage.input_tokens"), _int(output_tokens, "usage.output_tokens")
        if it is not None or ot is not None:
            usage = Usage(prompt_tokens=it, completion_tokens=ot,
                          total_tokens=(it + ot) if it is not None and ot is not None else None)
        r_extra = {"model": response_model} if response_model else {}
        response = Response(text=output_text or "", tool_calls=output_tool_calls or None, finish_reason=finish_reason,
                            usage=usage, prompt_token_ids=prompt_token_ids, output_token_ids=output_token_ids,
                            extra=r_extra)
    return WorkloadItem(request=request, response=response)
