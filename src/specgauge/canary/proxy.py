"""The OpenAI-compatible reverse proxy (aiohttp server, aiohttp client upstream). HTTP only: where
a request goes, how its bytes flow, what is recorded; the weights and the judging live elsewhere
(``ProxyHost``: the service).

``/v1/chat/completions`` and ``/v1/completions`` (streamed or not) are routed by weight and session
(``routing``); every other path (``/v1/models`` included) goes to the baseline untouched. The proxy
answers ``/health``, ``/metrics`` (its own) and ``/canary/status`` itself.

Bytes: the request body is sent upstream as received; response bytes are written to the client as
they arrive (each read is forwarded before it is parsed, nothing is buffered; only a retryable
candidate's first read is parsed first, see below), and a copy is parsed for the record
(``observe.Capture``, on bytes with orjson, as the load generator). Headers pass through except hop-by-hop ones; the client's
``Authorization`` reaches the upstream and nothing else (never a log, never a record). Upstreams
are asked for ``identity`` encoding, so the client gets what the server wrote.

No request lost to the experiment: a candidate attempt that fails before its first body byte — no
connection, an HTTP error, no first byte within ``first_byte_timeout_s``, a first event that is not
SSE/JSON or is an error — is answered by the baseline instead (the client's headers are only sent once the first byte
is in hand). A candidate stream that breaks after bytes were sent cannot be retried: the client's
connection is cut the same way (so the client sees a broken stream, not a short success) and the
failure counts against the candidate.

Bounds (docs/reliability.md): a client has ``header_timeout_s`` to send its request line and
headers (and an idle keep-alive connection is closed after it), ``body_timeout_s`` to send its body;
a body is at most ``max_body_bytes`` (413) and all bodies held at once at most ``max_inflight_bytes``
(503 with ``Retry-After``); JSON deeper than orjson's 1,024 levels is not parsed (routed as an
unkeyed, non-greedy request: the upstream answers it). Bodies over ``OFFLOAD_BYTES`` are parsed and
hashed in a worker thread, so one large body never stalls the streams. Credentials in an upstream URL
become that upstream's ``Authorization: Basic`` when the client sends no ``Authorization`` of its own
(the client's passes through, as always). Every error the proxy writes itself is an OpenAI-shaped JSON
body ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from specgauge.canary.exchange import (
    ProxyHost,
    Upstream,
    inspect_body,
    Opened,
    Pending,
    RelayedResponse,
    RoutedRequest,
    short_text,
    client_error,
)
from specgauge.canary.intake import BodyGate, error_response
from specgauge.canary.observe import Capture, Role, Side, build_record
from specgauge.canary.routing import Router, session_key, to_candidate
from specgauge.canary.token_ids import StreamStripper, TokenIdAsk, refused, strip_json
from specgauge.loadgen.runner import classify_failure, send_once_more_if_stale
from specgauge.records import FailureKind, RequestRecord
from specgauge.structured import check_body

TAG_HEADER = "X-Specgauge-Canary"
_REQ_DROP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
                       "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"))
_RESP_DROP = frozenset(("connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "date",
                        "server", "trailer"))
ROUTED = ("/v1/chat/completions", "/v1/completions")
#: bodies larger than this are parsed and hashed off the event loop
OFFLOAD_BYTES = 1 << 20
_log = logging.getLogger("specgauge.canary")


class Proxy:
    def __init__(self, host: ProxyHost, baseline: Upstream, candidate: Upstream, *, session_header: str, hash_seed: str,
                 timeout_s: float, first_byte_timeout_s: float, shadow_max_inflight: int, tag_responses: bool,
                 metrics_body: Any, metrics_type: str, stall_timeout_s: float | None = None,
                 body_timeout_s: float = 60.0, max_body_bytes: int = 64 << 20, max_inflight_bytes: int = 256 << 20,
                 token_ids: TokenIdAsk | None = None) -> None:
        self.host = host
        self.token_ids = token_ids  #: asking the candidate for token ids no client asked for (``token_ids``)
        self.baseline, self.candidate = baseline, candidate
        self.session_header = session_header
        self.router = Router(hash_seed)
        self.timeout_s = timeout_s
        self.first_byte_timeout_s = first_byte_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.gate = BodyGate(body_timeout_s, max_body_bytes, max_inflight_bytes)
        self.shadow_max_inflight = shadow_max_inflight
        self.tag_responses = tag_responses
        self._metrics_body = metrics_body
        self._metrics_type = metrics_type
        self._seq = 0
        self._shadow_inflight = 0
        self.shadow_skipped = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.t0_perf = time.perf_counter()

    # -- app ------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.gate.max_body_bytes)
        for path in ROUTED:
            app.router.add_post(path, self.completions)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/canary/status", self.status)
        app.router.add_route("*", "/{tail:.*}", self.passthrough)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self._metrics_body(), headers={"Content-Type": self._metrics_type})

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self.host.status())

    async def drain_shadows(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        for t in list(self._tasks):
            t.cancel()

    # -- routed requests --------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self.gate.read(request)
        if isinstance(body, web.Response):
            return body
        try:
            return await self._completions(request, body)
        finally:
            self.gate.release(len(body))

    async def _completions(self, request: web.Request, body: bytes) -> web.StreamResponse:
        seq = self._seq
        self._seq += 1
        if len(body) > OFFLOAD_BYTES:  # parsing and hashing a large body would stall every stream
            obj, greedy, body_key = await asyncio.to_thread(inspect_body, body)
        else:
            obj, greedy, body_key = inspect_body(body)
        point, keyed = self.router.point(session_key(request.headers, obj, self.session_header))
        req = RoutedRequest(seq=seq, rid=f"r{seq}", path_qs=request.path_qs, body=body, obj=obj,
                   headers=self._upstream_headers(request), stream=bool(obj is not None and obj.get("stream") is True),
                   point=point, keyed=keyed, greedy=greedy)
        req.weight, req.mirror_weight = self.host.live_weight(), self.host.mirror_weight()
        pending: Pending | None = None
        if obj is not None and to_candidate(point, req.weight):
            if req.greedy:
                req.pair_key = body_key
            served = await self._serve(request, req, self.candidate, Role.live, retryable=True)
            if isinstance(served, web.StreamResponse):
                return served
            pending = served
        if obj is not None and pending is None and req.mirror_weight > 0 and to_candidate(point, req.mirror_weight):
            req.mirrored = True
            req.pair_key = f"id:{req.rid}" if req.greedy else None
            self._mirror(req)
        elif req.greedy and obj is not None and req.pair_key is None:
            req.pair_key = body_key
        role = Role.retry if pending is not None else Role.live
        out = await self._serve(request, req, self.baseline, role, retryable=False, pending=pending)
        assert isinstance(out, web.StreamResponse)
        return out

    def _upstream_headers(self, request: web.Request) -> dict[str, str]:
        h = {k: v for k, v in request.headers.items() if k.lower() not in _REQ_DROP}
        h["Accept-Encoding"] = "identity"
        return h

    def _response_headers(self, up: aiohttp.ClientResponse, side: Side) -> dict[str, str]:
        h = {k: v for k, v in up.headers.items() if k.lower() not in _RESP_DROP}
        if self.tag_responses:
            h[TAG_HEADER] = side.value
        return h

    def _canary_facts(self, req: RoutedRequest, side: Side, role: Role, **more: Any) -> dict[str, Any]:
        return {"side": side.value, "role": role.value, "point": round(req.point, 6), "keyed": req.keyed,
                "stream": req.stream, "greedy": req.greedy, "weight": req.weight, "mirror_weight": req.mirror_weight, **more}

    async def _send(self, up: Upstream, req: RoutedRequest) -> tuple[aiohttp.ClientResponse, bool]:
        """Send the request; (response, whether the proxy added ``return_token_ids`` to it). A
        candidate that refuses the field (HTTP 400 naming it) gets the request again as the client
        sent it, and is not asked again this run: nothing was forwarded yet, the client never sees it."""
        ask = self.token_ids if up.side is Side.candidate else None
        data = ask.body(req.body, req.obj) if ask is not None else None
        # a pooled connection the upstream closed as this request left is retried, not failed: uvicorn
        # (vLLM, the embedded server) closes idle keep-alive connections after 5 s
        if ask is not None and data is not None:
            resp, _ = await send_once_more_if_stale(up.session, "POST", up.url + req.path_qs, data=data,
                                                    headers=up.headers(req.headers))
            if not refused(resp.status, await resp.read() if resp.status in (400, 422) else b""):
                ask.asked += 1
                return resp, True
            if ask.refused is None:
                ask.refused = f"HTTP {resp.status}: {short_text(await resp.read())}"
                _log.warning("canary: the candidate refused return_token_ids (%s); not asking again", ask.refused)
            resp.release()
        resp, _ = await send_once_more_if_stale(up.session, "POST", up.url + req.path_qs, data=req.body,
                                                headers=up.headers(req.headers))
        return resp, False

    async def _open(self, up: Upstream, req: RoutedRequest, cap: Capture, first_timeout: float, parse_first: bool = True) -> Opened:
        """Send, and read up to the first body bytes (a whole body when not streamed). With
        ``parse_first`` the first bytes are parsed here, before they are forwarded (a bad first
        event can still be retried); without it (nothing to retry) they are parsed after forwarding."""
        async with asyncio.timeout(first_timeout):
            resp, asked = await self._send(up, req)
            cap.status = resp.status
            try:
                if not 200 <= resp.status < 300:
                    raw = await resp.read()
                    return Opened(resp, raw=raw, failure=(FailureKind.http_status, f"HTTP {resp.status}: {short_text(raw)}"))
                if "text/event-stream" in resp.headers.get("Content-Type", ""):
                    first = await resp.content.readany()
                    t = time.perf_counter()
                    if not first:
                        return Opened(resp, stream=True, failure=(FailureKind.stream_cut_short, "an empty event stream"))
                    if not parse_first:
                        return Opened(resp, stream=True, first=first, first_t=t, parsed=False, asked=asked)
                    cap.feed(first, t)  # parsed *before* it is forwarded: a bad first event can still be retried
                    return Opened(resp, stream=True, first=first, first_t=t, failure=cap.failure, asked=asked)
                raw = await resp.read()
                cap.body(raw)
                return Opened(resp, raw=raw, failure=cap.failure, asked=asked)
            except BaseException:
                resp.close()
                raise

    async def _serve(self, request: web.Request, req: RoutedRequest, up: Upstream, role: Role, *, retryable: bool,
                     pending: Pending | None = None) -> web.StreamResponse | Pending:
        """Serve from ``up``. With ``retryable`` a failure before the first byte returns a ``Pending``
        (nothing was sent to the client); otherwise the client gets the upstream's answer or a 502/504."""
        cap = Capture(up.dialect, time.perf_counter())
        started = time.time()
        first_timeout = self.first_byte_timeout_s if (retryable and req.stream) else self.timeout_s
        try:
            op = await self._open(up, req, cap, first_timeout, parse_first=retryable)
        except Exception as e:  # any failure before the first byte: recorded, and retried when it can be
            failure = self._failure_before_first_byte(e, req, first_timeout)
            rec = self._record(req, cap, up.side, role, started, failure, None, None, retried=retryable, bytes_sent=False)
            if retryable:
                return Pending(rec, None)
            self._emit_pending(pending, None)
            self._emit(up.side, role, rec, req)
            status = 504 if failure[0] is FailureKind.timeout else 502
            return error_response(status, f"specgauge canary: the {up.side.value} failed: {failure[1]}")
        status = op.resp.status
        if op.failure is not None and retryable:
            op.resp.close()
            rec = self._record(req, cap, up.side, role, started, op.failure, status, None, retried=True, bytes_sent=False)
            return Pending(rec, status)
        self._emit_pending(pending, status)
        if not op.stream:
            e2e = time.perf_counter() - cap.sent
            headers = self._response_headers(op.resp, up.side)
            op.resp.release()
            rec = self._record(req, cap, up.side, role, started, op.failure, status, e2e if op.failure is None else None,
                               retried=False, bytes_sent=True)
            self._emit(up.side, role, rec, req, client_err=client_error(status))
            return web.Response(status=status, body=self._for_client(op), headers=headers)
        return await self._relay(request, req, up, role, op, cap, started)

    def _for_client(self, op: Opened) -> bytes:
        """A whole body as the client asked for it: without the token ids the proxy added."""
        return strip_json(op.raw, self.token_ids.absent) if op.asked and self.token_ids is not None else op.raw

    def _failure_before_first_byte(self, e: BaseException, req: RoutedRequest, first_timeout: float) -> tuple[FailureKind, str]:
        if isinstance(e, aiohttp.ServerTimeoutError) and self.stall_timeout_s is not None:
            what = "no response" if not req.stream else "no first byte"
            return FailureKind.timeout, f"{what} for {self.stall_timeout_s:g} s (--stall-timeout)"
        if isinstance(e, TimeoutError):
            flag = "--first-byte-timeout" if first_timeout == self.first_byte_timeout_s else "--timeout"
            return FailureKind.timeout, f"no first byte within {first_timeout:g} s ({flag})"
        if isinstance(e, (aiohttp.ClientError, ConnectionError, OSError)):
            kind, msg, _ = classify_failure(e, first_timeout)
            return kind, msg
        _log.error("canary: request %s could not be sent upstream: %s: %s", req.rid, type(e).__name__, str(e)[:200])
        return FailureKind.connection_error, f"the proxy could not send it ({type(e).__name__}: {str(e)[:200]})"

    def _timeout_message(self, e: BaseException) -> str:
        if isinstance(e, aiohttp.ServerTimeoutError) and self.stall_timeout_s is not None:
            return f"a silence longer than {self.stall_timeout_s:g} s inside the response (--stall-timeout)"
        return f"no complete response within {self.timeout_s:g} s (--timeout)"

    async def _relay(self, request: web.Request, req: RoutedRequest, up: Upstream, role: Role, op: Opened, cap: Capture,
                     started: float) -> web.StreamResponse:
        resp = op.resp
        out = RelayedResponse(status=resp.status, headers=self._response_headers(resp, up.side))
        failure: tuple[FailureKind, str] | None = None
        gone = False
        # the token ids the proxy added come out of what the client gets (nothing else changes)
        strip = StreamStripper(self.token_ids.absent) if op.asked and self.token_ids is not None else None
        try:
            await out.prepare(request)
            await out.write(op.first if strip is None else strip.feed(op.first))
        except (ConnectionError, RuntimeError):
            gone = True
        if not op.parsed:
            cap.feed(op.first, op.first_t)  # forwarded first, parsed now (stamped when it came in)
        if not gone:
            perf, read, feed = time.perf_counter, resp.content.readany, cap.feed
            try:
                async with asyncio.timeout(max(0.001, self.timeout_s - (perf() - cap.sent))):
                    while True:
                        data = await read()  # everything buffered so far; b"" at the end of the body
                        if not data:
                            break
                        t = perf()
                        try:
                            await out.write(data if strip is None else strip.feed(data))  # forwarded before it is parsed
                        except (ConnectionError, RuntimeError):
                            gone = True
                            break
                        feed(data, t)
            except TimeoutError as e:  # aiohttp's stall timer (sock_read) is a TimeoutError too
                failure = (FailureKind.timeout, self._timeout_message(e))
            except (aiohttp.ClientError, ConnectionError, OSError) as e:
                kind, msg, _ = classify_failure(e, self.timeout_s)
                failure = (kind, msg)
        # a client that closes once it has read [DONE] (the openai client does, without reading the
        # chunked end) had the whole answer: that is a finished request, not a client gone
        done_early = gone and cap.st.done
        if gone or failure is not None:
            resp.close()
        gone = gone and not done_early
        if failure is not None and not gone:
            tr = request.transport
            if tr is not None:
                tr.abort()  # the client must see a broken stream, not a clean end without [DONE]
        e2e: float | None = None
        if not gone and failure is None:
            cap.close()
            failure = cap.failure
            try:
                if not done_early:
                    if strip is not None:
                        await out.write(strip.close())  # a last line without its newline, as it came
                    await out.write_eof()
            except (ConnectionError, RuntimeError):
                gone = not cap.st.done
            e2e = time.perf_counter() - cap.sent if failure is None else None
            resp.release()
        if gone:
            failure = (FailureKind.connection_reset, "the client closed the connection (not judged)")
        rec = self._record(req, cap, up.side, role, started, failure, resp.status, e2e,
                           retried=False, bytes_sent=True, client_gone=gone)
        self._emit(up.side, role, rec, req, gone=gone)
        return out

    # -- shadow --------------------------------------------------------------------------------------
    def _mirror(self, req: RoutedRequest) -> None:
        if self._shadow_inflight >= self.shadow_max_inflight:
            self.shadow_skipped += 1
            return
        self._shadow_inflight += 1
        task = asyncio.get_running_loop().create_task(self._shadow(req))
        self._tasks.add(task)
        task.add_done_callback(self._shadow_done)

    def _shadow_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._shadow_inflight -= 1

    async def _shadow(self, req: RoutedRequest) -> None:
        up = self.candidate
        cap = Capture(up.dialect, time.perf_counter())
        started = time.time()
        failure: tuple[FailureKind, str] | None = None
        status: int | None = None
        e2e: float | None = None
        try:
            op = await self._open(up, req, cap, self.first_byte_timeout_s if req.stream else self.timeout_s)
            status = op.resp.status
            failure = op.failure
            if failure is None and op.stream:
                async with asyncio.timeout(max(0.001, self.timeout_s - (time.perf_counter() - cap.sent))):
                    async for data in op.resp.content.iter_any():
                        cap.feed(data)
                cap.close()
                failure = cap.failure
            op.resp.release()
            if failure is None:
                e2e = time.perf_counter() - cap.sent
        except TimeoutError as e:
            failure = (FailureKind.timeout, self._timeout_message(e) if isinstance(e, aiohttp.ServerTimeoutError)
                       else "no first byte or no complete response in time (--first-byte-timeout / --timeout)")
        except (aiohttp.ClientError, ConnectionError, OSError) as e:
            kind, msg, _ = classify_failure(e, self.timeout_s)
            failure = (kind, msg)
        except Exception as e:  # a mirrored copy must never disturb anything: whatever went wrong is its failure
            failure = (FailureKind.connection_error, f"{type(e).__name__}: {e}")
        rec = self._record(req, cap, up.side, Role.shadow, started, failure, status, e2e, retried=False, bytes_sent=False)
        self._emit(up.side, Role.shadow, rec, req, client_err=client_error(status))

    # -- records ---------------------------------------------------------------------------------------
    def _record(self, req: RoutedRequest, cap: Capture, side: Side, role: Role, started: float, failure: tuple[FailureKind, str] | None,
                status: int | None, e2e: float | None, *, retried: bool, bytes_sent: bool, client_gone: bool = False) -> RequestRecord:
        facts = self._canary_facts(req, side, role, retried_on_baseline=retried, bytes_sent=bytes_sent, client_gone=client_gone)
        rec = build_record(cap, rid=req.rid, seq=req.seq, t0_perf=self.t0_perf, started_at=started, failure=failure,
                           http_status=status, e2e_s=e2e, canary=facts)
        if rec.ok and req.obj is not None:
            rec.output_check = check_body(req.obj, rec.text, rec.tool_calls, rec.finish_reason)
        return rec

    def _emit(self, side: Side, role: Role, rec: RequestRecord, req: RoutedRequest, *, gone: bool = False, client_err: bool = False) -> None:
        client_err = client_err or (not rec.ok and client_error(rec.http_status) and side is Side.baseline)
        self.host.record(side, role, rec, counted=not gone and not client_err, pair_key=req.pair_key,
                         client_gone=gone, client_error=client_err)

    def _emit_pending(self, pending: Pending | None, baseline_status: int | None) -> None:
        """The candidate's failed attempt: a client error when the baseline refused the request too."""
        if pending is None:
            return
        both_refused = client_error(pending.status) and client_error(baseline_status)
        pending.rec.extra["canary"]["client_error"] = both_refused
        self.host.record(Side.candidate, Role.live, pending.rec, counted=not both_refused, pair_key=None,
                         client_gone=False, client_error=both_refused)

    # -- everything else: the baseline, untouched ---------------------------------------------------------
    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        body = await self.gate.read(request)
        if isinstance(body, web.Response):
            return body
        try:
            return await self._passthrough(request, body)
        finally:
            self.gate.release(len(body))

    async def _passthrough(self, request: web.Request, body: bytes) -> web.StreamResponse:
        up = self.baseline
        try:
            resp, _ = await send_once_more_if_stale(up.session, request.method, up.url + request.path_qs, data=body or None,
                                                    headers=up.headers(self._upstream_headers(request)))
        except Exception as e:  # an upstream down, or a request aiohttp refuses to send
            return error_response(502, f"specgauge canary: the baseline failed: {type(e).__name__}")
        try:
            out = web.StreamResponse(status=resp.status, headers=self._response_headers(resp, Side.baseline))
            await out.prepare(request)
            async for data in resp.content.iter_any():
                await out.write(data)
            await out.write_eof()
            return out
        except (aiohttp.ClientError, ConnectionError, RuntimeError, TimeoutError):
            tr = request.transport
            if tr is not None:
                tr.abort()
            return out
        finally:
            resp.close()
