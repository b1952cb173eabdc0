"""LiteLLM request logs: the ``StandardLoggingPayload`` its callbacks write (custom loggers, GCS /
S3 / Pub/Sub buckets: ``messages`` and ``response`` as JSON) and rows of the proxy's spend logs
(``LiteLLM_SpendLogs``: ``messages``, ``response`` and ``proxy_server_request`` as JSON text).

Spend logs hold prompts only when the proxy was told to keep them (``store_prompts_in_spend_logs``);
a row without one is an error saying so. Keys, key hashes, IPs and the proxy's metadata are never
carried over: only the model call itself is.

What the payload keeps and where (LiteLLM 1.110, ``litellm/types/utils.py::StandardLoggingPayload``):
``tools`` / ``tool_choice`` sit in ``model_parameters`` (the request's optional parameters) and stay on
the request, so the chat template renders the schemas into the prompt as the server did; the
finish reason is the response's ``choices[0].finish_reason``. ``prompt_tokens`` / ``completion_tokens``
are the server's ``usage`` except on a stream without ``stream_options.include_usage``: the server
then sends no usage and LiteLLM counts the tokens itself (its ``token_counter``, tiktoken's
``cl100k_base`` for models it does not know), an estimate kept in ``metadata.litellm_estimated_usage``
and never as ``usage``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from specgauge.workload.formats import FieldError, _jtype
from specgauge.workload.importers.common import build_item, json_text, otel_messages
from specgauge.workload.importers.docs import documents
from specgauge.workload.importers.langfuse import _output
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

MODEL_CALLS = {"completion", "acompletion", "text_completion", "atext_completion", "chat_completion"}
_PARAMS = ("temperature", "top_p", "top_k", "seed", "stop", "max_tokens", "max_completion_tokens",
           "frequency_penalty", "presence_penalty")


def usage_is_estimated(obj: dict[str, Any], params: dict[str, Any], body: dict[str, Any]) -> bool:
    """True when LiteLLM counted the tokens itself: a stream whose request did not ask the server for
    usage (``stream_options.include_usage``)."""
    streamed = any(d.get("stream") is True for d in (obj, params, body))
    opts = params.get("stream_options") or body.get("stream_options")
    return streamed and not (isinstance(opts, dict) and opts.get("include_usage") is True)


def _finish_reason(resp: Any) -> str | None:
    if isinstance(resp, dict) and isinstance(resp.get("choices"), list) and resp["choices"]:
        c0 = resp["choices"][0]
        if isinstance(c0, dict) and isinstance(c0.get("finish_reason"), str):
            return str(c0["finish_reason"])
    return None


def item_from_payload(obj: dict[str, Any], default_id: str) -> WorkloadItem:
    call = str(obj.get("call_type", ""))
    text_completion = "text_completion" in call
    body = json_text(obj.get("proxy_server_request"), "proxy_server_request")
    body = body if isinstance(body, dict) else {}
    messages = json_text(obj.get("messages"), "messages")
    msgs: list[dict[str, Any]] | None = None
    prompt: str | None = None
    if isinstance(messages, str) and messages:
        if text_completion:
            prompt = messages
        else:
            msgs = [{"role": "user", "content": messages}]
    elif isinstance(messages, list) and messages:
        msgs = otel_messages(messages, "messages")
    elif isinstance(body.get("messages"), list) and body["messages"]:
        msgs = otel_messages(body["messages"], "proxy_server_request.messages")
    elif isinstance(body.get("prompt"), str) and body["prompt"]:
        prompt = body["prompt"]
    if msgs is None and prompt is None:
        raise FieldError("messages", "no prompt stored (LiteLLM keeps prompts in spend logs only with "
                                     "general_settings.store_prompts_in_spend_logs: true)")
    params: dict[str, Any] = {}
    mp = json_text(obj.get("model_parameters"), "model_parameters")
    mp = mp if isinstance(mp, dict) else {}
    for src in (body, mp):
        params.update({k: src[k] for k in _PARAMS if src.get(k) is not None})
    tools = mp.get("tools") if mp.get("tools") is not None else body.get("tools")
    tool_choice = mp.get("tool_choice") if mp.get("tool_choice") is not None else body.get("tool_choice")
    text, calls, reason = None, None, None
    if obj.get("status", "success") == "success":
        resp = json_text(obj.get("response"), "response")
        if resp not in (None, {}, ""):
            text, calls = _output(resp, "response")
            reason = _finish_reason(resp)
    input_tokens, output_tokens = obj.get("prompt_tokens"), obj.get("completion_tokens")
    meta = {k: v for k, v in (("request_id", obj.get("request_id", obj.get("id"))), ("call_type", call or None),
                              ("status", obj.get("status")), ("model_group", obj.get("model_group") or None),
                              ("provider", obj.get("custom_llm_provider")), ("start_time", obj.get("startTime")),
                              ("completion_start_time", obj.get("completionStartTime"))) if v is not None}
    if usage_is_estimated(obj, mp, body):
        meta["litellm_estimated_usage"] = {"prompt_tokens": input_tokens, "completion_tokens": output_tokens}
        input_tokens = output_tokens = None
    model = body.get("model") or obj.get("model_group") or obj.get("model")
    resp_model = obj.get("model") if isinstance(obj.get("model"), str) else None
    return build_item(item_id=str(obj.get("request_id") or obj.get("id") or default_id), messages=msgs,
                      prompt=prompt, params=params, model=model if isinstance(model, str) else None,
                      output_text=text, output_tool_calls=calls, finish_reason=reason, input_tokens=input_tokens,
                      output_tokens=output_tokens, response_model=resp_model, metadata=meta, where_prompt="messages",
                      tools=tools, tool_choice=tool_choice)


def records(f: WorkloadFile) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    stem = f.path.name
    for where, doc in documents(f, {}):
        if isinstance(doc, WorkloadError):
            yield where, doc
            continue
        if not isinstance(doc, dict):
            yield where, WorkloadError(where, f"expected a LiteLLM log object, got {_jtype(doc)}")
            continue
        if str(doc.get("call_type", "")) not in MODEL_CALLS:
            continue  # embeddings, image, moderation and pass-through calls are not completions
        try:
            yield where, item_from_payload(doc, f"{stem}:{where.rsplit(':', 1)[-1]}")
        except FieldError as e:
            yield where, WorkloadError(where, e.message, e.field)


def looks_like(obj: Any) -> bool:
    return isinstance(obj, dict) and "call_type" in obj and ("messages" in obj or "response" in obj)
