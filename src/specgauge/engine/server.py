"""OpenAI-compatible HTTP server over the embedded engine (FastAPI), shaped as vLLM answers: the wiring.

``/v1/completions`` and ``/v1/chat/completions`` (streamed as SSE, one chunk per engine step),
``/v1/models``, ``/health`` and ``/metrics`` (Prometheus, vLLM names), each a thin route to
:class:`~specgauge.engine.service.EngineService`, which does the work. Here: the app's lifespan (the
engine thread), the API-key check and the error shield. Errors are JSON ``{"error": {...}}`` with a 4xx
status, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from specgauge.engine.core import Engine
from specgauge.engine.protocol import ApiError
from specgauge.engine.service import EngineService, ServerSettings

_log = logging.getLogger("specgauge.engine")


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
    service = EngineService(engine, tokenizer, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.runner.start(asyncio.get_running_loop())
        yield
        service.runner.stop()

    app = FastAPI(title="specgauge embedded engine", lifespan=lifespan)
    app.state.service, app.state.runner, app.state.metrics = service, service.runner, service.metrics

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    if settings.api_key:
        app.add_middleware(BearerAuth, api_key=settings.api_key)
    app.add_middleware(ErrorShield)  # added last: the outermost layer

    @app.get("/health")
    async def health() -> Response:
        return service.health()

    @app.get("/metrics")
    async def prom() -> Response:
        return service.prometheus()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return service.models()

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await service.completions(request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await service.chat_completions(request)

    return app
