"""Langfuse generations: the public API's observations (``GET /api/public/observations``, a page
``{"data": [...]}`` or one per line), the UI's JSON / JSONL export, the blob-storage export
(snake_case columns, input/output as JSON text), traces with their ``observations``, and the
ingestion batches SDKs and LiteLLM send (``{"batch": [{"type": "generation-create", "body": ...}]}``,
a generation's ``-update`` events merged into its ``-create``).

Only observations of type ``GENERATION`` are model calls; spans, events and scores are passed over.
Token counts (``usageDetails`` / ``usage`` / ``promptTokens``) go to ``usage``; Langfuse keeps no
token ids, so ``simulate`` re-tokenises and labels the replay approximate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from specgauge.workload.formats import FieldError, _jtype
from specgauge.workload.importers.common import build_item, json_text, otel_message, otel_messages
from specgauge.workload.importers.docs import documents
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

_SNAKE = {"trace_id": "traceId", "start_time": "startTime", "end_time": "endTime",
          "completion_start_time": "completionStartTime", "provided_model_name": "model",
          "model_parameters": "modelParameters", "usage_details": "usageDetails", "prompt_tokens": "promptTokens",
          "completion_tokens": "completionTokens", "parent_observation_id": "parentObservationId"}


def _norm(obs: dict[str, Any]) -> dict[str, Any]:
    return {_SNAKE.get(k, k): v for k, v in obs.items()}


def _output(value: Any, field: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    value = json_text(value, field)
    if value is None:
        return None, None
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict) and isinstance(value.get("choices"), list) and value["choices"]:
        c0 = value["choices"][0] if isinstance(value["choices"][0], dict) else {}
        value = c0.get("message") or {"content": c0.get("text", "")}
    if isinstance(value, list):  # a list of messages: the assistant's reply is the last one
        if not value:
            return None, None
        value = value[-1]
    if not isinstance(value, dict):
        raise FieldError(field, f"expected text or a message, got {_jtype(value)}")
    if "role" not in value:
        value = {**value, "role": "assistant"}
    msg = otel_message(value, field)
    return msg.get("content") or "", msg.get("tool_calls")


def _input(value: Any, field: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    value = json_text(value, field)
    if isinstance(value, str):
        return ([{"role": "user", "content": value}] if value else None), None
    if isinstance(value, dict) and "messages" not in value and isinstance(value.get("prompt"), str):
        return None, value["prompt"]
    if value is None:
        return None, None
    return otel_messages(value, field), None


def _usage(obs: dict[str, Any]) -> tuple[Any, Any]:
    for key in ("usageDetails", "usage"):
        u = json_text(obs.get(key), key)
        if isinstance(u, dict) and (u.get("input") is not None or u.get("output") is not None):
            return u.get("input"), u.get("output")
        if isinstance(u, dict) and (u.get("promptTokens") is not None or u.get("completionTokens") is not None):
            return u.get("promptTokens"), u.get("completionTokens")
    return obs.get("promptTokens"), obs.get("completionTokens")


def item_from_observation(obs: dict[str, Any], default_id: str) -> WorkloadItem:
    obs = _norm(obs)
    msgs, prompt = _input(obs.get("input"), "input")
    text, calls = _output(obs.get("output"), "output")
    params = json_text(obs.get("modelParameters"), "modelParameters") or {}
    if not isinstance(params, dict):
        raise FieldError("modelParameters", f"expected an object, got {_jtype(params)}")
    it, ot = _usage(obs)
    meta = {k: v for k, v in (("trace_id", obs.get("traceId")), ("observation_id", obs.get("id")),
                              ("name", obs.get("name")), ("start_time", obs.get("startTime")),
                              ("completion_start_time", obs.get("completionStartTime"))) if v is not None}
    return build_item(item_id=str(obs.get("id") or default_id), messages=msgs, prompt=prompt, params=params,
                      model=obs.get("model") if isinstance(obs.get("model"), str) else None, output_text=text,
                      output_tool_calls=calls, input_tokens=it, output_tokens=ot, metadata=meta)


def _is_generation(obs: dict[str, Any]) -> bool:
    return str(obs.get("type", "")).upper() == "GENERATION"


def _generations(doc: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, observation) per generation a document holds."""
    if not isinstance(doc, dict):
        raise FieldError(None, f"expected a Langfuse object, got {_jtype(doc)}")
    if isinstance(doc.get("batch"), list):
        merged: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        for i, ev in enumerate(doc["batch"]):
            if not isinstance(ev, dict) or not str(ev.get("type", "")).startswith("generation-"):
                continue
            body = ev.get("body")
            if not isinstance(body, dict):
                raise FieldError(f"batch.{i}.body", f"expected an object, got {_jtype(body)}")
            key = str(body.get("id") or f"batch.{i}")
            if key not in merged:
                order.append(key)
                merged[key] = {"type": "GENERATION"}
            merged[key].update({k: v for k, v in body.items() if v is not None})
        for key in order:
            yield key, merged[key]
        return
    for key in ("data", "observations"):
        if isinstance(doc.get(key), list):
            for i, obs in enumerate(doc[key]):
                if isinstance(obs, dict) and _is_generation(obs):
                    yield f"{key}.{i}", obs
            return
    if _is_generation(doc):
        yield "", doc


def records(f: WorkloadFile) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    arrays = {"data": "data"}  # an ingestion batch is read whole: its -update events merge into -create
    stem = f.path.name
    for where, doc in documents(f, arrays):
        if isinstance(doc, WorkloadError):
            yield where, doc
            continue
        label_kind = where.rsplit(":", 1)[-1]
        try:
            gens = list(_generations(doc))
        except FieldError as e:
            yield where, WorkloadError(where, e.message, e.field)
            continue
        for label, obs in gens:
            try:
                yield where, item_from_observation(obs, f"{stem}:{label_kind}{':' + label if label else ''}")
            except FieldError as e:
                field = f"{label}.{e.field}" if label and e.field else (e.field or label or None)
                yield where, WorkloadError(where, e.message, field)


def looks_like(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("batch"), list):
        return any(isinstance(e, dict) and str(e.get("type", "")).endswith("-create") for e in obj["batch"])
    if isinstance(obj.get("data"), list) and isinstance(obj.get("meta"), dict):
        return True
    obj = _norm(obj)
    return str(obj.get("type", "")).upper() in ("GENERATION", "SPAN", "EVENT") and "traceId" in obj
