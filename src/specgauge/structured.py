"""Structured outputs checked against the request's own schema: tool calls and JSON responses.

What a request asks for (``expectation``):

* ``tools``: every tool call of the response names one of the offered functions and carries
  arguments that parse as one JSON object valid against that function's ``parameters`` schema;
  ``tool_choice`` ``"required"`` or a named function also asks for at least one call (``"auto"``:
  an answer in plain text is no call, and nothing is checked);
* ``response_format`` ``{"type": "json_object"}``: the content is one JSON object;
  ``{"type": "json_schema", "json_schema": {"schema": S}}`` (or vLLM's ``guided_json`` /
  ``structured_outputs.json``): one JSON document valid against S.

Tool calls are read from both places servers put them: OpenAI ``tool_calls`` (a server with a tool
parser) and text ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes / Qwen
style: what a server without a parser streams as content). Validation is the ``jsonschema``
library's, with the validator class the schema declares (``$schema``; Draft 2020-12 otherwise). A
schema that is not one (``SchemaError``) is the request's fault, not the server's: that request is
not judged (``valid`` None, the reason kept).

Pure: a request body and a response in, an ``OutputCheck`` (``records``) out; messages are English
(``en``), stored, translated when shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema import validators
from jsonschema.exceptions import SchemaError, best_match

from specgauge.i18n import en
from specgauge.records import OutputCheck, ToolCall

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_TAG = re.compile(r"<tool_call>|</tool_call>")
MAX_ERROR_CHARS = 160  #: a stored error message is cut here (a schema error can quote a whole document)


@dataclass(frozen=True)
class Expectation:
    """What one request asks of its response's structure."""

    tools: Mapping[str, Any] | None = None  #: function name -> its ``parameters`` schema (None: no tools offered)
    call_required: bool = False  #: ``tool_choice`` "required" or a named function: no call is a failure
    json_schema: Any = None  #: the JSON document's schema (``json_object``: ``{"type": "object"}``)

    @property
    def kind(self) -> str:
        return "json" if self.json_schema is not None else "tool_call"


def expectation(body: Mapping[str, Any] | None) -> Expectation | None:
    """What ``body`` (an OpenAI chat / completions request) asks for; None when nothing structured."""
    if not isinstance(body, Mapping):
        return None
    schema = _response_schema(body)
    tools = _tool_schemas(body.get("tools"))
    if schema is None and tools is None:
        return None
    choice = body.get("tool_choice")
    required = tools is not None and (choice == "required" or isinstance(choice, Mapping))
    return Expectation(tools=tools, call_required=required, json_schema=schema)


def _response_schema(body: Mapping[str, Any]) -> Any:
    rf = body.get("response_format")
    if isinstance(rf, Mapping):
        if rf.get("type") == "json_object":
            return {"type": "object"}
        if rf.get("type") == "json_schema":
            js = rf.get("json_schema")
            if isinstance(js, Mapping):
                return js.get("schema", {})  # a json_schema without a schema asks for any JSON document
    guided = body.get("guided_json")  # vLLM's own extra parameters
    if guided is None and isinstance(body.get("structured_outputs"), Mapping):
        guided = body["structured_outputs"].get("json")
    if isinstance(guided, str):
        try:
            guided = json.loads(guided)
        except ValueError:
            return None
    return guided if isinstance(guided, (Mapping, bool)) else None


def _tool_schemas(tools: Any) -> dict[str, Any] | None:
    if not isinstance(tools, Sequence) or isinstance(tools, (str, bytes)) or not tools:
        return None
    out: dict[str, Any] = {}
    for t in tools:
        fn = t.get("function") if isinstance(t, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters", {"type": "object"})
    return out or None


# ---------------------------------------------------------------------------- validation


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    """The validator for one schema (its JSON text as the cache key): the class its ``$schema``
    names, checked once (``SchemaError`` when it is no schema)."""
    schema = json.loads(schema_json)
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _invalid_against(schema: Any, doc: Any) -> str | None:
    """Why ``doc`` does not validate against ``schema`` (None: it does). ``SchemaError`` passes up."""
    v = _validator(json.dumps(schema, sort_keys=True))
    err = best_match(v.iter_errors(doc))
    if err is None:
        return None
    where = "/".join(str(p) for p in err.absolute_path)
    return _short(f"{where}: {err.message}" if where else err.message)


def _json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except ValueError as e:
        return None, _short(str(e))


# ---------------------------------------------------------------------------- reading the calls


def text_tool_calls(text: str) -> tuple[list[ToolCall], str | None]:
    """The ``<tool_call>`` blocks of ``text`` as calls (arguments re-serialised as JSON text), and
    the first block that is not one ``{"name", "arguments"}`` object, as an error."""
    calls: list[ToolCall] = []
    pos = 0
    while True:
        start = text.find(_OPEN, pos)
        if start < 0:
            return calls, None
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:
            return calls, en("out.e.unclosed", n=len(calls) + 1)
        inner = text[start + len(_OPEN) : end].strip()
        pos = end + len(_CLOSE)
        obj, why = _json(inner)
        if why is not None:
            return calls, en("out.e.block_json", n=len(calls) + 1, error=why)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return calls, en("out.e.block_shape", n=len(calls) + 1)
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(ToolCall(name=obj["name"], arguments=args if isinstance(args, str) else json.dumps(args)))


def _check_call(call: ToolCall, tools: Mapping[str, Any], n: int) -> str | None:
    if call.name not in tools:
        return en("out.e.unknown_tool", n=n, name=call.name)
    args, why = _json(call.arguments or "{}")
    if why is not None:
        return en("out.e.args_json", n=n, name=call.name, error=why)
    bad = _invalid_against(tools[call.name], args)
    return None if bad is None else en("out.e.args_schema", n=n, name=call.name, error=bad)


def _cut(finish_reason: str | None, why: str) -> str:
    return en("out.e.cut", why=why) if finish_reason == "length" else why


def check_output(exp: Expectation | None, text: str, tool_calls: Sequence[ToolCall] | None = None,
                 finish_reason: str | None = None) -> OutputCheck | None:
    """The response (content ``text``, OpenAI ``tool_calls``) against ``exp``; None when the request
    asked for nothing structured. A response cut at ``max_tokens`` is judged as it is (the error says so)."""
    if exp is None:
        return None
    try:
        if exp.json_schema is not None:
            doc, why = _json(text.strip())
            if why is not None:
                return OutputCheck(kind="json", valid=False, items=1, error=_cut(finish_reason, en("out.e.not_json", error=why)))
            bad = _invalid_against(exp.json_schema, doc)
            return OutputCheck(kind="json", valid=bad is None, items=1,
                               error=None if bad is None else _cut(finish_reason, en("out.e.schema", error=bad)))
        assert exp.tools is not None
        calls = list(tool_calls or [])
        from_text, block_err = text_tool_calls(text)
        calls += from_text
        if block_err is not None:
            return OutputCheck(kind="tool_call", valid=False, items=len(calls) + 1, error=_cut(finish_reason, block_err))
        if not calls:
            if exp.call_required:
                return OutputCheck(kind="tool_call", valid=False, items=0, error=en("out.e.no_call"))
            return OutputCheck(kind="tool_call", valid=None, items=0, error=None)
        for i, call in enumerate(calls, 1):
            bad = _check_call(call, exp.tools, i)
            if bad is not None:
                return OutputCheck(kind="tool_call", valid=False, items=len(calls), error=_cut(finish_reason, bad))
        return OutputCheck(kind="tool_call", valid=True, items=len(calls))
    except SchemaError as e:
        return OutputCheck(kind=exp.kind, valid=None, items=0, error=en("out.e.bad_schema", error=_short(e.message)))  # type: ignore[arg-type]


def check_body(body: Mapping[str, Any] | None, text: str, tool_calls: Sequence[ToolCall] | None = None,
               finish_reason: str | None = None) -> OutputCheck | None:
    """``check_output`` for a request body as sent (the canary's view of a request)."""
    return check_output(expectation(body), text, tool_calls, finish_reason)
