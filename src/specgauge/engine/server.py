"""OpenAI-compatible HTTP server over the embedded engine (FastAPI), shaped as vLLM answers.

``/v1/completions`` and ``/v1/chat/completions`` (streamed as SSE, one chunk per engine step — under
speculation a chunk carries every token of its step, as vLLM's do), ``/v1/models``, ``/health`` and
``/metrics`` (Prometheus, vLLM names). Tokenisation, chat templates and stop strings live here; the
engine sees token ids only. Errors are JSON ``{"error": {...}}`` with a 4xx status, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
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

_log = logging.getLogger("specgauge.engine")
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


class BearerAuth:
    """Pure ASGI middleware (keeps streaming and disconnects intact): ``/v1/*`` needs the API key."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            auth = dict(scope["headers"]).get(b"authorization")
            if auth != self.expected:
                await JSONResponse(ApiError(401, "Unauthorized").body(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ErrorShield:
    """Outermost pure ASGI middleware: an exception no handler turned into an answer becomes a 500 with
    the JSON error body (never a plain-text 500 or a traceback in the log: one line naming the path)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as e:  # the request's failure, not the server's
            _log.error("%s %s failed: %s: %s", scope.get("method"), scope.get("path"), type(e).__name__,
                       str(e).splitlines()[0] if str(e) else "")
            if not started:
                err = ApiError(500, f"internal error while serving this request ({type(e).__name__})")
                await JSONResponse(err.body(), status_code=500)(scope, receive, send)


def create_app(engine: Engine, tokenizer: Any, settings: ServerSettings) -> FastAPI:
    metrics = EngineMetrics(settings.model_name, engine.k)
    metrics.set_memory(engine.memory_bytes())
    runner = EngineRunner(engine, metrics, detailed_spec_metrics=settings.per_request_spec_metrics == "detailed")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runner.start(asyncio.get_running_loop())
        yield
        runner.stop()

    app = FastAPI(title="specgauge embedded engine", lifespan=lifespan)
    app.state.runner, app.state.metrics = runner, metrics

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    if settings.api_key:
        app.add_middleware(BearerAuth, api_key=settings.api_key)
    app.add_middleware(ErrorShield)  # added last: the outermost layer

    @app.get("/health")
    async def health() -> Response:
        if not runner.healthy:
            return JSONResponse(ApiError(503, f"engine stopped: {runner.error!r}").body(), status_code=503)
        return Response(status_code=200)

    @app.get("/metrics")
    async def prom() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": settings.model_name, "object": "model", "created": int(time.time()), "owned_by": "specgauge",
                "root": settings.model_name, "max_model_len": engine.max_model_len}
        if settings.speculative_config:
            card["speculative_config"] = settings.speculative_config
        return {"object": "list", "data": [card]}

    async def parse(request: Request, model: type[BaseModel]) -> Any:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > settings.max_request_bytes:
            raise ApiError(413, f"request body of {size} bytes exceeds the limit of {settings.max_request_bytes}")
        parts, n = [], 0
        async for part in request.stream():  # counted as it arrives: a chunked body cannot grow past the limit
            n += len(part)
            if n > settings.max_request_bytes:
                raise ApiError(413, f"request body exceeds the limit of {settings.max_request_bytes} bytes")
            parts.append(part)
        body = b"".join(parts)
        try:
            req = model.model_validate_json(body)
        except ValidationError as e:
            raise ApiError(400, format_validation_error(e)) from None
        name = getattr(req, "model", None)
        if name is not None and name != settings.model_name:
            raise ApiError(404, f"The model `{name}` does not exist.", "model")
        return req

    def job(prefix: str, req: CompletionRequest | ChatCompletionRequest, prompt_ids: list[int], max_tokens: int) -> _Job:
        top_k = req.top_k if req.top_k and req.top_k > 0 else 0
        vocab = engine.args.vocab_size
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

    def submit(j: _Job) -> asyncio.Queue[Event]:
        if not runner.healthy:
            raise ApiError(503, "engine is not running")
        try:
            return runner.submit(j.rid, j.prompt_ids, j.params)
        except RequestError as e:
            raise ApiError(400, str(e)) from None

    async def pieces(j: _Job, q: asyncio.Queue[Event], request: Request) -> AsyncIterator[_Piece]:
        """One piece per engine step; applies stop strings; aborts the request if the client leaves."""
        detok = IncrementalDetokenizer(tokenizer, j.stop)
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
                        runner.abort(j.rid, reason="stop")
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
                runner.abort(j.rid)

    def usage(j: _Job, n_out: int) -> dict[str, int]:
        return {"prompt_tokens": len(j.prompt_ids), "total_tokens": len(j.prompt_ids) + n_out, "completion_tokens": n_out}

    def with_metrics(body: dict[str, Any], spec: dict[str, Any] | None) -> dict[str, Any]:
        if settings.per_request_spec_metrics and spec is not None:
            body["metrics"] = {"speculative_decoding": spec}
        return body

    async def respond(kind: str, req: Any, j: _Job, request: Request) -> Response:
        q = submit(j)
        chat = kind == "chat"
        obj = "chat.completion" if chat else "text_completion"
        base = {"id": j.rid, "created": j.created, "model": settings.model_name}
        if not req.stream:
            text, ids, last = "", [], _Piece("", [])
            async for p in pieces(j, q, request):
                text, last = text + p.text, p
                ids += p.token_ids
            choice: dict[str, Any] = {"index": 0}
            if chat:
                choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            else:
                choice["text"] = text
            choice.update(logprobs=None, finish_reason=last.finish_reason, stop_reason=last.stop_reason)
            body: dict[str, Any] = {**base, "object": obj, "choices": [choice], "usage": usage(j, len(ids))}
            if req.return_token_ids:
                choice["token_ids"] = ids
                if chat:
                    body["prompt_token_ids"] = j.prompt_ids
                else:
                    choice["prompt_token_ids"] = j.prompt_ids
            return JSONResponse(with_metrics(body, last.spec))

        opts = req.stream_options
        include_usage = bool(opts and opts.include_usage)
        continuous = bool(opts and opts.include_usage and opts.continuous_usage_stats)

        async def sse() -> AsyncIterator[str]:
            n_out, first = 0, True
            chunk_obj = "chat.completion.chunk" if chat else "text_completion"
            try:
                if chat:
                    head: dict[str, Any] = {**base, "object": chunk_obj, "choices": [
                        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
                    if req.return_token_ids:
                        head["prompt_token_ids"] = j.prompt_ids
                        first = False
                    if continuous:
                        head["usage"] = usage(j, 0)
                    yield f"data: {json.dumps(head)}\n\n"
                async for p in pieces(j, q, request):
                    n_out += len(p.token_ids)
                    if not p.token_ids and p.finish_reason is None:
                        continue
                    c: dict[str, Any] = {"index": 0}
                    if chat:
                        c["delta"] = {"content": p.text} if p.text or p.finish_reason is None else {}
                    else:
                        c["text"] = p.text
                    c.update(logprobs=None, finish_reason=p.finish_reason, stop_reason=p.stop_reason)
                    chunk: dict[str, Any] = {**base, "object": chunk_obj, "choices": [c]}
                    if req.return_token_ids:
                        c["token_ids"] = p.token_ids
                        if first:
                            if chat:
                                chunk["prompt_token_ids"] = j.prompt_ids
                            else:
                                c["prompt_token_ids"] = j.prompt_ids
                            first = False
                    if continuous:
                        chunk["usage"] = usage(j, n_out)
                    yield f"data: {json.dumps(chunk)}\n\n"
                    if p.finish_reason is not None and include_usage:
                        tail = with_metrics({**base, "object": chunk_obj, "choices": [], "usage": usage(j, n_out)}, p.spec)
                        yield f"data: {json.dumps(tail)}\n\n"
            except ApiError as e:
                yield f"data: {json.dumps(e.body())}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req: CompletionRequest = await parse(request, CompletionRequest)
        p = req.prompt
        if isinstance(p, list) and p and isinstance(p[0], (list, str)):
            if len(p) != 1:
                raise ApiError(400, "only one prompt per request is supported", "prompt")
            p = p[0]
        if isinstance(p, str):
            ids = list(tokenizer.encode(p, add_special_tokens=True))
        else:
            ids = [int(t) for t in p]  # type: ignore[union-attr]
        if req.echo:
            raise ApiError(400, "echo is not supported by the embedded engine", "echo")
        return await respond("completion", req, job("cmpl", req, ids, req.max_tokens or 16), request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req: ChatCompletionRequest = await parse(request, ChatCompletionRequest)
        if not getattr(tokenizer, "chat_template", None):
            raise ApiError(400, "the model's tokenizer has no chat template; use /v1/completions")
        try:
            text = tokenizer.apply_chat_template(
                req.messages_for_template(), tools=req.tools, add_generation_prompt=req.add_generation_prompt,
                tokenize=False, **(req.chat_template_kwargs or {}),
            )
        except Exception as e:  # a template error is the request's fault (bad roles, bad tools)
            raise ApiError(400, f"chat template failed: {e}") from None
        ids = list(tokenizer.encode(text, add_special_tokens=False))
        max_tokens = req.max_completion_tokens or req.max_tokens or max(1, engine.max_model_len - len(ids))
        return await respond("chat", req, job("chatcmpl", req, ids, max_tokens), request)

    return app
