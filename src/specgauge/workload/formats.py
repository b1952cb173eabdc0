"""Per-format conversion of one parsed record into a ``WorkloadItem``.

Each converter takes the decoded JSON value of one record (or the text of one line) and a default
id, and raises ``FieldError(field, message)`` for anything wrong; the loader adds ``FILE:LINE``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from specgauge.config import format_validation_error
from specgauge.workload.schema import ApiKind, Request, Response, Usage, WorkloadItem

#: fields of a request line that are specgauge's, not part of the OpenAI body
SPECGAUGE_FIELDS = ("id", "segment", "arrival_time", "metadata", "tag")
#: body fields the runner sets itself; dropped from ``extra``
RUNNER_FIELDS = ("stream", "stream_options")
_BODY_FIELDS = ("messages", "prompt", "tools", "tool_choice", "temperature", "top_p", "top_k", "stop", "seed")


class FieldError(ValueError):
    def __init__(self, field: str | None, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}" if field else message)


def _validate(model: type, data: dict[str, Any], prefix: str = "") -> Any:
    try:
        return model.model_validate(data)  # type: ignore[attr-defined]
    except ValidationError as e:
        raise FieldError(prefix.rstrip(".") or None, format_validation_error(e)) from None


def _expect_dict(value: Any, field: str | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FieldError(field, f"expected a JSON object, got {_jtype(value)}")
    return value


def _jtype(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number"
    )


def request_from_body(body: dict[str, Any], default_id: str, api: ApiKind | None = None, prefix: str = "") -> Request:
    """An OpenAI chat or completions body (plus optional specgauge fields) as a ``Request``."""
    if api is None:
        if "messages" in body:
            api = ApiKind.chat
        elif "prompt" in body:
            api = ApiKind.completion
        else:
            raise FieldError(f"{prefix}messages", "missing: a request needs 'messages' (chat) or 'prompt' (completions)")
    data: dict[str, Any] = {"api": api, "id": str(body.get("id", default_id))}
    for k in _BODY_FIELDS:
        if k in body and body[k] is not None:
            data[k] = body[k]
    mt = body.get("max_completion_tokens", body.get("max_tokens"))
    if mt is not None:
        data["max_tokens"] = mt
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise FieldError(f"{prefix}metadata", f"expected a JSON object, got {_jtype(meta)}")
    data["metadata"] = meta
    segment = next((v for v in (body.get("segment"), meta.get("segment"), body.get("tag")) if v is not None), None)
    if segment is not None:
        if not isinstance(segment, (str, int)):
            raise FieldError(f"{prefix}segment", f"expected a string, got {_jtype(segment)}")
        data["segment"] = str(segment)
    if "arrival_time" in body:
        data["arrival_time"] = body["arrival_time"]
    skip = set(_BODY_FIELDS) | set(SPECGAUGE_FIELDS) | set(RUNNER_FIELDS) | {"max_tokens", "max_completion_tokens"}
    data["extra"] = {k: v for k, v in body.items() if k not in skip}
    return _validate(Request, data, prefix)


def _token_id(tok: str) -> int | None:
    # vLLM with return_tokens_as_token_ids writes tokens as "token_id:123"
    if isinstance(tok, str) and tok.startswith("token_id:"):
        try:
            return int(tok[9:])
        except ValueError:
            return None
    return None


def response_from_openai(resp: dict[str, Any], prefix: str = "response.") -> Response:
    """A ``chat.completion`` / ``text_completion`` JSON (vLLM extras kept) as a ``Response``."""
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        raise FieldError(f"{prefix}choices", "missing or empty")
    c0 = _expect_dict(choices[0], f"{prefix}choices.0")
    data: dict[str, Any] = {"finish_reason": c0.get("finish_reason")}
    if "message" in c0:
        msg = _expect_dict(c0["message"], f"{prefix}choices.0.message")
        data["text"] = msg.get("content") or ""
        if msg.get("tool_calls"):
            data["tool_calls"] = msg["tool_calls"]
    else:
        data["text"] = c0.get("text") or ""
    if not isinstance(data["text"], str):
        raise FieldError(f"{prefix}choices.0", f"content must be a string, got {_jtype(data['text'])}")
    if c0.get("token_ids") is not None:
        data["output_token_ids"] = c0["token_ids"]
    pti = resp.get("prompt_token_ids", c0.get("prompt_token_ids"))
    if pti is not None:
        data["prompt_token_ids"] = pti
    top = _top_logprobs(c0.get("logprobs"))
    if top is not None:
        data["top_logprobs"] = top
    if resp.get("usage") is not None:
        data["usage"] = _validate(Usage, _expect_dict(resp["usage"], f"{prefix}usage"), f"{prefix}usage.")
    if resp.get("timings") is not None:
        data["timings"] = resp["timings"]
    known = {"choices", "usage", "prompt_token_ids", "timings"}
    data["extra"] = {k: v for k, v in resp.items() if k not in known}
    return _validate(Response, data, prefix)


def _top_logprobs(lp: Any) -> list[dict[int, float]] | None:
    """Top-N logprobs keyed by token id, where the server wrote ids (else None: text keys are not ids)."""
    if not isinstance(lp, dict):
        return None
    out: list[dict[int, float]] = []
    if isinstance(lp.get("content"), list):  # chat
        for pos in lp["content"]:
            d = {}
            for alt in (pos or {}).get("top_logprobs") or []:
                tid = _token_id(alt.get("token", ""))
                if tid is None:
                    return None
                d[tid] = float(alt.get("logprob", float("-inf")))
            out.append(d)
        return out
    if isinstance(lp.get("top_logprobs"), list):  # completions
        for pos in lp["top_logprobs"]:
            d = {}
            for tok, v in (pos or {}).items():
                tid = _token_id(tok)
                if tid is None:
                    return None
                d[tid] = float(v)
            out.append(d)
        return out
    return None


def response_from_any(resp: Any, prefix: str = "response.") -> Response:
    """An OpenAI response JSON, or specgauge's own compact response (``text``, ``output_token_ids``…)."""
    resp = _expect_dict(resp, prefix.rstrip("."))
    if "choices" in resp:
        return response_from_openai(resp, prefix)
    return _validate(Response, resp, prefix)


# ---------------------------------------------------------------- per-format converters


def from_openai_line(obj: Any, default_id: str) -> WorkloadItem:
    """A bare request body, or a ``{"request": …, "response": …}`` pair."""
    obj = _expect_dict(obj, None)
    if "request" in obj:
        req_body = _expect_dict(obj["request"], "request")
        # specgauge fields may sit beside "request"
        merged = {**{k: obj[k] for k in SPECGAUGE_FIELDS if k in obj}, **req_body}
        request = request_from_body(merged, default_id, prefix="request.")
        response = response_from_any(obj["response"]) if obj.get("response") is not None else None
        return WorkloadItem(request=request, response=response)
    return WorkloadItem(request=request_from_body(obj, default_id))


def api_from_url(url: Any) -> ApiKind:
    if url in ("/v1/chat/completions", "/chat/completions"):
        return ApiKind.chat
    if url in ("/v1/completions", "/completions"):
        return ApiKind.completion
    raise FieldError("url", f"unsupported batch endpoint {url!r} (expected /v1/chat/completions or /v1/completions)")


def from_batch_input(obj: Any, default_id: str, output: Any | None) -> WorkloadItem:
    """One OpenAI Batch API input line, joined with its output line when one was found."""
    obj = _expect_dict(obj, None)
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid:
        raise FieldError("custom_id", "missing or not a string")
    api = api_from_url(obj.get("url"))
    body = _expect_dict(obj.get("body"), "body")
    request = request_from_body({**body, "id": cid}, cid, api=api, prefix="body.")
    response = None
    if output is not None:
        r = _expect_dict(output.get("response"), "response") if output.get("response") is not None else None
        if r is not None and r.get("body") is not None and int(r.get("status_code", 200)) == 200:
            response = response_from_openai(_expect_dict(r["body"], "response.body"), "response.body.")
    return WorkloadItem(request=request, response=response)


_SHAREGPT_ROLES = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
    "bard": "assistant", "model": "assistant", "system": "system", "tool": "tool",
}


def from_sharegpt(obj: Any, default_id: str) -> WorkloadItem:
    """A ShareGPT conversation: the turns before the last assistant turn form the request, that turn
    is the logged response. A conversation ending on a user turn has no logged response."""
    obj = _expect_dict(obj, None)
    convo = obj.get("conversations", obj.get("conversation"))
    if not isinstance(convo, list) or not convo:
        raise FieldError("conversations", "missing or empty")
    msgs: list[dict[str, Any]] = []
    for i, turn in enumerate(convo):
        turn = _expect_dict(turn, f"conversations.{i}")
        who = turn.get("from", turn.get("role"))
        role = _SHAREGPT_ROLES.get(str(who).lower()) if who is not None else None
        if role is None:
            raise FieldError(f"conversations.{i}.from", f"unknown speaker {who!r} (expected human, gpt or system)")
        value = turn.get("value", turn.get("content"))
        if not isinstance(value, str):
            raise FieldError(f"conversations.{i}.value", f"expected a string, got {_jtype(value)}")
        msgs.append({"role": role, "content": value})
    response = None
    if msgs[-1]["role"] == "assistant" and len(msgs) > 1:
        response = Response(text=msgs.pop()["content"])
    if not any(m["role"] == "user" for m in msgs):
        raise FieldError("conversations", "no human turn")
    body: dict[str, Any] = {"messages": msgs, "id": str(obj.get("id", default_id))}
    for k in ("segment", "metadata", "tag"):
        if k in obj:
            body[k] = obj[k]
    return WorkloadItem(request=request_from_body(body, default_id), response=response)


def from_vllm_custom(obj: Any, default_id: str) -> WorkloadItem:
    """``vllm bench serve --dataset-name custom`` line: ``prompt`` and ``output_tokens``.

    vLLM sends the prompt as one user turn to a chat endpoint; so does specgauge."""
    obj = _expect_dict(obj, None)
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise FieldError("prompt", "missing, empty or not a string")
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "id": str(obj.get("id", default_id))}
    ot = obj.get("output_tokens")
    if ot is not None:
        if not isinstance(ot, int) or isinstance(ot, bool) or ot < 1:
            raise FieldError("output_tokens", f"expected a positive integer, got {ot!r}")
        body["max_tokens"] = ot
    for k in ("segment", "metadata", "tag"):
        if k in obj:
            body[k] = obj[k]
    return WorkloadItem(request=request_from_body(body, default_id))


def from_text_line(text: str, default_id: str) -> WorkloadItem:
    """A plain-text prompt, sent as one user turn."""
    return WorkloadItem(request=request_from_body({"messages": [{"role": "user", "content": text}]}, default_id))
