"""What the canary proxy takes in before routing: request bodies within their bounds, and the
errors the proxy writes itself (OpenAI / vLLM shape), and upstream URLs' credentials.

``BodyGate.read`` counts a body against ``max_body_bytes`` (413) and all bodies held at once against
``max_inflight_bytes`` (503 + ``Retry-After``) while it arrives, within ``body_timeout_s`` (408).
"""

from __future__ import annotations

import asyncio
import base64
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
from aiohttp import web


def error_response(status: int, message: str, kind: str = "upstream_error", headers: dict[str, str] | None = None) -> web.Response:
    """An answer the proxy writes itself, in the OpenAI / vLLM error shape."""
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": status}}, status=status,
                             headers=headers)


def split_credentials(url: str) -> tuple[str, str | None]:
    """``http://u:pw@host:port/p`` -> (``http://host:port/p``, ``Basic base64(u:pw)``); no credentials: (url, None).
    aiohttp refuses a request whose URL has credentials *and* an ``Authorization`` header."""
    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url, None
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{p.port}" if p.port is not None else "")
    token = base64.b64encode(f"{unquote(p.username or '')}:{unquote(p.password or '')}".encode()).decode()
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment)), f"Basic {token}"


class BodyGate:
    """Bounded request-body reads; ``inflight_bytes`` is what all readers hold right now."""

    def __init__(self, body_timeout_s: float = 60.0, max_body_bytes: int = 64 << 20, max_inflight_bytes: int = 256 << 20) -> None:
        self.body_timeout_s = body_timeout_s
        self.max_body_bytes, self.max_inflight_bytes = max_body_bytes, max_inflight_bytes
        self.inflight_bytes = 0  #: request bodies held right now (reserved while they arrive)
        self.refused = 0  #: requests answered here with a 4xx/5xx (bounds, not the upstreams)

    async def read(self, request: web.Request) -> bytes | web.Response:
        """The body, counted against ``max_body_bytes`` and the in-flight cap as it arrives, within
        ``body_timeout_s``; else the answer to send (413 / 503 / 408). On success the body's bytes stay
        reserved in ``inflight_bytes`` until ``release``."""
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:
            return self.refuse(413, f"request body of {declared} bytes exceeds the proxy's limit of {self.max_body_bytes} "
                                     "bytes", "invalid_request_error")
        held = 0

        def reserve(n: int) -> web.Response | None:
            nonlocal held
            if held + n > self.max_body_bytes:
                return self.refuse(413, f"request body exceeds the proxy's limit of {self.max_body_bytes} bytes",
                                    "invalid_request_error")
            if self.inflight_bytes + n > self.max_inflight_bytes:
                return self.refuse(503, f"the proxy holds {self.inflight_bytes} bytes of request bodies (limit "
                                         f"{self.max_inflight_bytes}); retry shortly", "server_busy", {"Retry-After": "1"})
            self.inflight_bytes += n
            held += n
            return None

        refused = reserve(declared or 0)
        if refused is not None:
            return refused
        parts: list[bytes] = []
        got = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while chunk := await request.content.read(1 << 16):
                    got += len(chunk)
                    if got > held and (refused := reserve(got - held)) is not None:
                        self.release(held)
                        return refused
                    parts.append(chunk)
        except TimeoutError:
            self.release(held)
            return self.refuse(408, f"the request body did not arrive within {self.body_timeout_s:g} s", "timeout")
        except (aiohttp.ClientError, ConnectionError, OSError, ValueError) as e:  # a client gone, a malformed chunked body
            self.release(held)
            return self.refuse(400, f"could not read the request body ({type(e).__name__})", "invalid_request_error")
        if got < held:
            self.release(held - got)
        return b"".join(parts)

    def release(self, n: int) -> None:
        self.inflight_bytes -= n

    def refuse(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> web.Response:
        self.refused += 1
        resp = error_response(status, f"specgauge canary: {message}", kind, headers)
        if status in (408, 413, 400):  # the rest of the body is not wanted: close rather than read it
            resp.force_close()
        return resp
