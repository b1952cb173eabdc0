"""A scripted OpenAI-style streaming server on loopback, for fault tests and client benchmarks.

Raw asyncio sockets (no framework) so it can misbehave exactly: drop a connection mid-chunk, end
a body without ``[DONE]``, stall, send bytes that are not SSE or not JSON, never end. Each request
picks its behaviour from a directive in its prompt (last message for chat), e.g.
``"fault:http429"`` or ``"tokens:12 per:3 delay_ms:1"`` (``shape:vllm``: chunks laid out byte for byte
as vLLM 0.32's, not the minimal default); ``srv.override`` (same syntax, settable
while it runs) overrides every request's directive, to make a running server fail or slow down
(``fault:hang`` never answers; ``first_ms:N`` delays the first chunk; ``linger_ms:N`` the body's end
after ``[DONE]``; ``fault:stale`` drops, unanswered, every request that arrives on a connection which
already served one, on any path: a keep-alive connection the server closed as the request came). A well-behaved stream looks like vLLM's
with ``continuous_usage_stats`` and ``--per-request-spec-decode-metrics``: every chunk of n tokens
is one speculative step of k=``K`` drafted tokens with n-1 accepted, and ``/metrics`` exposes
``vllm:spec_decode_*`` counters that add up exactly those per-request numbers.

``FakeServer(refuse_token_ids=True)`` answers a body carrying ``return_token_ids`` HTTP 400 naming it, as a
strict server without the field does (pydantic's ``extra_forbidden``).

``FakeServer(recording=...)`` replays a real server's recorded responses instead (see
``tests/data/recorded/record.py``): the i-th completion request gets the i-th recorded body,
byte chunk by byte chunk, and ``/metrics`` answers the recorded snapshot from before the first
request until one has finished, the one from after the run from then on.

Runs in a thread with its own event loop: ``with FakeServer() as srv: srv.base_url``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from specgauge.testing._loop import ThreadedServer
from specgauge.testing.vllm_metrics import vllm_metrics_text

K = 4
FAULTS = ("http429", "http500", "drop", "cut", "stall", "malformed", "badjson", "endless", "error", "nousage", "hang")


def parse_directive(text: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+):(\w+)", text))


def vllm_chunk(cid: str, model: str, text: str, chat: bool, completion_tokens: int, prompt_tokens: int = 5) -> str:
    """One streamed chunk as ``vllm serve`` 0.32 writes it with ``continuous_usage_stats`` (key order,
    nulls and compact separators as recorded in ``tests/data/recorded/vllm_0.32.0_ngram.json``):
    what a client reading a real vLLM server parses per chunk (``shape:vllm``)."""
    if chat:
        c: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None, "token_ids": None}
    else:
        c = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None,
             "prompt_token_ids": None, "token_ids": None}
    o = {"id": cid, "object": "chat.completion.chunk" if chat else "text_completion", "created": 1796226299,
         "model": model, "choices": [c],
         "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                   "completion_tokens": completion_tokens}}
    return json.dumps(o, separators=(",", ":"))


class FakeServer(ThreadedServer):
    what = "fake server"

    def __init__(self, usage_per_chunk: bool = True, spec: bool = True, recording: dict[str, Any] | None = None,
                 close_after_stream: bool = False, model: str = "fake", refuse_token_ids: bool = False) -> None:
        self.recording = recording
        self.refuse_token_ids = refuse_token_ids
        self.refused = 0  #: requests answered 400 for carrying return_token_ids
        self.model = model  #: the name /v1/models and the /metrics labels give
        self.close_after_stream = close_after_stream  #: like llama.cpp: drop the connection after a stream
        self.replayed = 0
        self.usage_per_chunk = usage_per_chunk
        self.spec = spec
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "success": 0, "gen": 0}
        self.per_pos = [0] * K
        self.requests = 0
        self.override = ""  #: a directive applied on top of every request's own (fault injection mid-run)
        self.port = 0
        self._init_lifecycle()

    # -- lifecycle (``ThreadedServer``) ------------------------------------------------------------
    async def _start(self) -> asyncio.base_events.Server:
        server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    # -- HTTP ---------------------------------------------------------------------------------
    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        served = 0  # requests answered on this connection
        try:
            while True:
                try:
                    head = await r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await r.readexactly(int(hdrs.get("content-length", "0") or 0))
                if served and parse_directive(self.override).get("fault") == "stale":
                    w.transport.abort()  # a keep-alive connection closed under a request (uvicorn after 5 s idle)
                    return
                served += 1
                keep = await self._handle(method, path, body, w)
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            try:
                w.close()
            except RuntimeError:
                pass

    async def _plain(self, w: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> bool:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "X")
        w.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await w.drain()
        return True

    def metrics_text(self) -> str:
        return vllm_metrics_text(self.model, self.counters, self.per_pos, spec=self.spec)

    async def _handle(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> bool:
        if self.recording is not None:
            return await self._replay(path, w)
        if path == "/metrics":
            return await self._plain(w, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        if path == "/v1/models":
            return await self._plain(w, 200, json.dumps({"data": [{"id": self.model, "owned_by": "fake", "root": self.model}]}).encode())
        if path == "/version":
            return await self._plain(w, 200, b'{"version":"fake-1"}')
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return await self._plain(w, 404, b'{"error":{"message":"no such path"}}')
        self.requests += 1
        req = json.loads(body or b"{}")
        if self.refuse_token_ids and "return_token_ids" in req:
            self.refused += 1
            return await self._plain(w, 400, b'{"error":{"message":"return_token_ids: Extra inputs are not permitted",'
                                             b'"type":"BadRequestError","param":"return_token_ids","code":400}}')
        chat = path.endswith("chat/completions")
        prompt = req["messages"][-1]["content"] if chat else str(req.get("prompt", ""))
        d = {**parse_directive(prompt if isinstance(prompt, str) else ""), **parse_directive(self.override)}
        return await self._stream(w, d, chat)

    # -- streaming ----------------------------------------------------------------------------
    async def _stream(self, w: asyncio.StreamWriter, d: dict[str, str], chat: bool) -> bool:
        fault = d.get("fault", "")
        if fault == "http429":
            return await self._plain(w, 429, b'{"error":{"message":"rate limited"}}')
        if fault == "http500":
            return await self._plain(w, 500, b"Internal Server Error")
        if fault == "hang":
            await asyncio.sleep(3600)
        tokens, per = int(d.get("tokens", 8)), max(1, int(d.get("per", 1)))
        delay = float(d.get("delay_ms", 0)) / 1000.0
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def ev(data: str | bytes, raw: bool = False) -> None:
            b = data if isinstance(data, bytes) else data.encode()
            if not raw:
                b = b"data: " + b + b"\n\n"
            w.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            await w.drain()

        cid = f"{'chatcmpl' if chat else 'cmpl'}-9a9d33e3d1bb81d6"

        def piece(n: int, done_so_far: int) -> str:
            return self._piece(n, done_so_far, chat, cid, d.get("shape") == "vllm")

        if fault == "malformed":
            await ev(b"this is not an event stream\n\n", raw=True)
            return await self._end(w, False)
        if fault == "badjson":
            await ev("{not json")
            return await self._end(w, True)
        if fault == "error":
            await ev(json.dumps({"error": {"message": "model exploded", "code": 500}}))
            await ev("[DONE]")
            return await self._end(w, True)
        sent = 0
        steps: list[int] = []
        first = True
        if d.get("first_ms"):
            await asyncio.sleep(float(d["first_ms"]) / 1000.0)
        while sent < tokens or fault == "endless":
            n = 1 if first else min(per, tokens - sent) if fault != "endless" else per
            first = False
            if delay:
                await asyncio.sleep(delay)
            await ev(piece(n, sent))
            sent += n
            steps.append(n)
            if fault == "drop" and sent >= tokens // 2:
                w.transport.abort()  # mid-chunked-body: the client sees an incomplete payload
                return False
            if fault == "stall" and sent >= tokens // 2:
                await asyncio.sleep(3600)
            if fault == "endless":
                await asyncio.sleep(0.005)
        if fault == "cut":
            return await self._end(w, True)
        spec_steps = steps[1:]  # the first token comes from prefill; each later chunk is one step
        sd = self._spec_counts(spec_steps)
        final: dict[str, Any] = {"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": sent, "total_tokens": 5 + sent}}
        if self.spec:
            final["metrics"] = {"speculative_decoding": sd}
        if fault != "nousage":
            await ev(json.dumps(final))
        await ev("[DONE]")
        if d.get("linger_ms"):  # the body's chunked end comes late (a client may close before it)
            await asyncio.sleep(float(d["linger_ms"]) / 1000.0)
        self._count(sent, spec_steps, sd)
        return await self._end(w, True)

    def _piece(self, n: int, done_so_far: int, chat: bool, cid: str, vllm_shape: bool) -> str:
        """One chunk of ``n`` tokens after ``done_so_far``."""
        text = "".join(f"t{done_so_far + i} " for i in range(n))
        if vllm_shape:  # byte for byte the layout of vllm serve 0.32's chunks (tests/data/recorded)
            return vllm_chunk(cid, self.model, text, chat, done_so_far + n)
        c: dict[str, Any] = {"index": 0, "finish_reason": None}
        if chat:
            c["delta"] = {"content": text}
        else:
            c["text"] = text
        o: dict[str, Any] = {"id": "x", "choices": [c]}
        if self.usage_per_chunk:
            o["usage"] = {"prompt_tokens": 5, "completion_tokens": done_so_far + n, "total_tokens": 5 + done_so_far + n}
        return json.dumps(o)

    @staticmethod
    def _spec_counts(spec_steps: list[int]) -> dict[str, Any]:
        """vLLM's per-request ``speculative_decoding`` counts for steps that emitted these many tokens."""
        hist = [0] * (K + 1)
        for n in spec_steps:
            hist[n - 1] += 1
        return {
            "num_spec_steps": len(spec_steps), "num_draft_tokens": K * len(spec_steps),
            "num_accepted_draft_tokens": sum(n - 1 for n in spec_steps), "acceptance_histogram": hist, "num_spec_tokens": K,
        }

    def _count(self, sent: int, spec_steps: list[int], sd: dict[str, Any]) -> None:
        """A finished request into the /metrics counters."""
        self.counters["success"] += 1
        self.counters["gen"] += sent
        if self.spec:
            self.counters["drafts"] += sd["num_spec_steps"]
            self.counters["draft_tokens"] += sd["num_draft_tokens"]
            self.counters["accepted"] += sd["num_accepted_draft_tokens"]
            for n in spec_steps:
                for i in range(n - 1):
                    self.per_pos[i] += 1

    async def _replay(self, path: str, w: asyncio.StreamWriter) -> bool:
        rec = self.recording
        assert rec is not None
        if path == "/metrics":
            text = rec["metrics_after"] if self.replayed else rec["metrics_before"]
            return await self._plain(w, 200, text.encode(), "text/plain; version=0.0.4")
        if path in rec.get("get", {}):
            return await self._plain(w, 200, json.dumps(rec["get"][path]).encode())
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return await self._plain(w, 404, b'{"error":{"message":"not recorded"}}')
        resp = rec["responses"][self.requests % len(rec["responses"])]
        self.requests += 1
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in resp["chunks"]:
            b = piece.encode()
            w.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            await w.drain()
            await asyncio.sleep(0.001)
        self.replayed += 1
        return await self._end(w, True)

    async def _end(self, w: asyncio.StreamWriter, keep: bool) -> bool:
        w.write(b"0\r\n\r\n")
        await w.drain()
        return keep and not self.close_after_stream
