"""The embedded engine behind the OpenAI API, shaped as vLLM answers (``EngineService``).

A request's life: ``parse`` (size limit, pydantic validation, the served model's name) → ``job``
(vLLM's sampling rules: greedy below 1e-5, temperature floor, top_k within the vocabulary) →
``submit`` to the engine thread → ``pieces`` (one per engine step, stop strings applied, the request
aborted when the client leaves) → one JSON body, or one SSE chunk per engine step (under speculation
a chunk carries every token of its step, as vLLM's do). Tokenisation and chat templates live here; the
engine sees token ids only. ``engine/server.py`` wires these methods to routes.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError

from specgauge.config import format_validation_error
from specgauge.engine.core import Engine, RequestError
from specgauge.engine.detok import IncrementalDetokenizer
from specgauge.engine.metrics import EngineMetrics
from specgauge.engine.protocol import ApiError, ChatCompletionRequest, CompletionRequest
from specgauge.engine.runner import Event, EngineRunner
from specgauge.engine.sampling import SamplingParams

#: vLLM's limits on temperature: below _SAMPLING_EPS greedy, below _MAX_TEMP raised to it (numerical safety)
_SAMPLING_EPS, _MAX_TEMP = 1e-5, 1e-2


@dataclass
class ServerSettings:
    model_name: str
    api_key: str | None = None
    max_request_bytes: int = 1 << 20
    per_request_spec_metrics: str | None = None  # None | "summary" | "detailed"
    #: the speculative config served with (vLLM's JSON keys), stated on /v1/models for bench's replay check
    speculative_config: dict[str, Any] | None = None


@dataclass
class _Piece:
    """What one engine step adds to one response."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    spec: dict[str, Any] | None = None


@dataclass
class _Job:
    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    stop: list[str]
    created: int = field(default_factory=lambda: int(time.time()))


def _usage(j: _Job, n_out: int) -> dict[str, int]:
    return {"prompt_tokens": len(j.prompt_ids), "total_tokens": len(j.prompt_ids) + n_out, "completion_tokens": n_out}


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def _chunk(base: dict[str, Any], obj: str, chat: bool, p: _Piece, token_ids: bool, prompt_ids: list[int] | None) -> dict[str, Any]:
    """One streamed chunk of a step's piece; ``prompt_ids`` on the first chunk that states token ids."""
    c: dict[str, Any] = {"index": 0}
    if chat:
        c["delta"] = {"content": p.text} if p.text or p.finish_reason is None else {}
    else:
        c["text"] = p.text
    c.update(logprobs=None, finish_reason=p.finish_reason, stop_reason=p.stop_reason)
    chunk: dict[str, Any] = {**base, "object": obj, "choices": [c]}
    if token_ids:
        c["token_ids"] = p.token_ids
        if prompt_ids is not None:
            if chat:
                chunk["prompt_token_ids"] = prompt_ids
            else:
                c["prompt_token_ids"] = prompt_ids
    return chunk


class EngineService:
    """One engine, its runner thread and its metrics behind the API (the module doc: a request's life)."""

    def __init__(self, engine: Engine, tokenizer: Any, settings: ServerSettings) -> None:
        self.engine, self.tokenizer, self.settings = engine, tokenizer, settings
        self.metrics = EngineMetrics(settings.model_name, engine.k)
        self.metrics.set_memory(engine.memory_bytes())
        self.runner = EngineRunner(engine, self.metrics, detailed_spec_metrics=settings.per_request_spec_metrics == "detailed")

    # -- the small routes ------------------------------------------------------------------------
    def health(self) -> Response:
        if not self.runner.healthy:
            return JSONResponse(ApiError(503, f"engine stopped: {self.runner.error!r}").body(), status_code=503)
        return Response(status_code=200)

    def prometheus(self) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    def models(self) -> dict[str, Any]:
        s = self.settings
        card = {"id": s.model_name, "object": "model", "created": int(time.time()), "owned_by": "specgauge",
                "root": s.model_name, "max_model_len": self.engine.max_model_len}
        if s.speculative_config:
            card["speculative_config"] = s.speculative_config
        return {"object": "list", "data": [card]}

    # -- a request in ----------------------------------------------------------------------------
    async def parse(self, request: Request, model: type[BaseModel]) -> Any:
        limit = self.settings.max_request_bytes
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > limit:
            raise ApiError(413, f"request body of {size} bytes exceeds the limit of {limit}")
        parts, n = [], 0
        async for part in request.stream():  # counted as it arrives: a chunked body cannot grow past the limit
            n += len(part)
            if n > limit:
                raise ApiError(413, f"request body exceeds the limit of {limit} bytes")
            parts.append(part)
        body = b"".join(parts)
        try:
            req = model.model_validate_json(body)
        except ValidationError as e:
            raise ApiError(400, format_validation_error(e)) from None
        name = getattr(req, "model", None)
        if name is not None and name != self.settings.model_name:
            raise ApiError(404, f"The model `{name}` does not exist.", "model")
        return req

    def job(self, prefix: str, req: CompletionRequest | ChatCompletionRequest, prompt_ids: list[int], max_tokens: int) -> _Job:
        top_k = req.top_k if req.top_k and req.top_k > 0 else 0
        vocab = self.engine.args.vocab_size
        if top_k > vocab:  # vLLM's v1 processor refuses it the same way
            raise ApiError(400, f"top_k cannot be greater than vocabulary size ({vocab}), but got {top_k}", "top_k")
        temperature = 1.0 if req.temperature is None else req.temperature
        if temperature < _SAMPLING_EPS:
            temperature = 0.0
        elif temperature < _MAX_TEMP:
            temperature = _MAX_TEMP
        try:
            params = SamplingParams(
                max_tokens=max_tokens, temperature=temperature,
                top_p=1.0 if req.top_p is None else req.top_p, top_k=top_k, seed=None if req.seed == -1 else req.seed,
                stop_token_ids=tuple(req.stop_token_ids or ()), ignore_eos=req.ignore_eos,
            )
        except ValidationError as e:
            raise ApiError(400, format_validation_error(e)) from None
        return _Job(f"{prefix}-{uuid.uuid4().hex}", prompt_ids, params, req.stop_list())

    def submit(self, j: _Job) -> asyncio.Queue[Event]:
        if not self.runner.healthy:
            raise ApiError(503, "engine is not running")
        try:
            return self.runner.submit(j.rid, j.prompt_ids, j.params)
        except RequestError as e:
            raise ApiError(400, str(e)) from None

    async def completions(self, request: Request) -> Response:
        req: CompletionRequest = await self.parse(request, CompletionRequest)
        p = req.prompt
        if isinstance(p, list) and p and isinstance(p[0], (list, str)):
            if len(p) != 1:
                raise ApiError(400, "only one prompt per request is supported", "prompt")
            p = p[0]
        if isinstance(p, str):
            ids = list(self.tokenizer.encode(p, add_special_tokens=True))
        else:
            ids = [int(t) for t in p]  # type: ignore[union-attr]
        if req.echo:
            raise ApiError(400, "echo is not supported by the embedded engine", "echo")
        return await self.respond("completion", req, self.job("cmpl", req, ids, req.max_tokens or 16), request)

    async def chat_completions(self, request: Request) -> Response:
        req: ChatCompletionRequest = await self.parse(request, ChatCompletionRequest)
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            raise ApiError(400, "the model's tokenizer has no chat template; use /v1/completions")
        try:
            text = tok.apply_chat_template(
                req.messages_for_template(), tools=req.tools, add_generation_prompt=req.add_generation_prompt,
                tokenize=False, **(req.chat_template_kwargs or {}),
            )
        except Exception as e:  # a template error is the request's fault (bad roles, bad tools)
            raise ApiError(400, f"chat template failed: {e}") from None
        ids = list(tok.encode(text, add_special_tokens=False))
        max_tokens = req.max_completion_tokens or req.max_tokens or max(1, self.engine.max_model_len - len(ids))
        return await self.respond("chat", req, self.job("chatcmpl", req, ids, max_tokens), request)

    # -- the engine's steps out ------------------------------------------------------------------
    async def pieces(self, j: _Job, q: asyncio.Queue[Event], request: Request) -> AsyncIterator[_Piece]:
        """One piece per engine step; applies stop strings; aborts the request if the client leaves."""
        detok = IncrementalDetokenizer(self.tokenizer, j.stop)
        done = False
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(q.get(), timeout=1.0)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                o = ev.out
                if ev.finish_reason == "error":
                    done = True
                    raise ApiError(500, "the engine failed while serving this request")
                if detok.stopped_by is not None:  # waiting for the abort to land; its stats are final
                    if o.finished:
                        done = True
                        yield _Piece("", [], "stop", detok.stopped_by, ev.spec)
                        return
                    continue
                text, kept = "", []
                for t in o.new_token_ids:
                    kept.append(t)
                    text += detok.add(t)
                    if detok.stopped_by is not None:
                        self.runner.abort(j.rid, reason="stop")
                        break
                if detok.stopped_by is not None:
                    if o.finished:
                        done = True
                        yield _Piece(text, kept, "stop", detok.stopped_by, ev.spec)
                        return
                    yield _Piece(text, kept)
                    continue
                if o.finished:
                    done = True
                    text += detok.flush()
                    stop_reason = kept[-1] if kept and kept[-1] in j.params.stop_token_ids else None
                    yield _Piece(text, kept, ev.finish_reason, stop_reason, ev.spec)
                    return
                yield _Piece(text, kept)
        finally:
            if not done:
                self.runner.abort(j.rid)

    def _with_metrics(self, body: dict[str, Any], spec: dict[str, Any] | None) -> dict[str, Any]:
        if self.settings.per_request_spec_metrics and spec is not None:
            body["metrics"] = {"speculative_decoding": spec}
        return body

    async def respond(self, kind: str, req: Any, j: _Job, request: Request) -> Response:
        q = self.submit(j)
        chat = kind == "chat"
        base = {"id": j.rid, "created": j.created, "model": self.settings.model_name}
        if not req.stream:
            return JSONResponse(await self._whole(req, j, q, request, chat, base))
        return StreamingResponse(self._sse(req, j, q, request, chat, base), media_type="text/event-stream")

    async def _whole(self, req: Any, j: _Job, q: asyncio.Queue[Event], request: Request, chat: bool,
                     base: dict[str, Any]) -> dict[str, Any]:
        """The non-streamed body: every step's piece joined."""
        text, ids, last = "", [], _Piece("", [])
        async for p in self.pieces(j, q, request):
            text, last = text + p.text, p
            ids += p.token_ids
        choice: dict[str, Any] = {"index": 0}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=last.finish_reason, stop_reason=last.stop_reason)
        obj = "chat.completion" if chat else "text_completion"
        body: dict[str, Any] = {**base, "object": obj, "choices": [choice], "usage": _usage(j, len(ids))}
        if req.return_token_ids:
            choice["token_ids"] = ids
            if chat:
                body["prompt_token_ids"] = j.prompt_ids
            else:
                choice["prompt_token_ids"] = j.prompt_ids
        return self._with_metrics(body, last.spec)

    async def _sse(self, req: Any, j: _Job, q: asyncio.Queue[Event], request: Request, chat: bool,
                   base: dict[str, Any]) -> AsyncIterator[str]:
        """The streamed body: a chat's role chunk, one chunk per step, the usage chunk, ``[DONE]``."""
        opts = req.stream_options
        include_usage = bool(opts and opts.include_usage)
        continuous = bool(opts and opts.include_usage and opts.continuous_usage_stats)
        obj = "chat.completion.chunk" if chat else "text_completion"
        n_out, first = 0, True
        try:
            if chat:
                head: dict[str, Any] = {**base, "object": obj, "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
                if req.return_token_ids:
                    head["prompt_token_ids"] = j.prompt_ids
                    first = False
                if continuous:
                    head["usage"] = _usage(j, 0)
                yield _event(head)
            async for p in self.pieces(j, q, request):
                n_out += len(p.token_ids)
                if not p.token_ids and p.finish_reason is None:
                    continue
                chunk = _chunk(base, obj, chat, p, bool(req.return_token_ids), j.prompt_ids if first else None)
                if req.return_token_ids:
                    first = False
                if continuous:
                    chunk["usage"] = _usage(j, n_out)
                yield _event(chunk)
                if p.finish_reason is not None and include_usage:
                    yield _event(self._with_metrics({**base, "object": obj, "choices": [], "usage": _usage(j, n_out)}, p.spec))
        except ApiError as e:
            yield _event(e.body())
        yield "data: [DONE]\n\n"
