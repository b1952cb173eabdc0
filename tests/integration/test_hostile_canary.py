"""Hostile clients and broken files against the canary proxy (issue 26, items 3, 5, 6, 7 and 8's canary
parts), over real loopback HTTP. Upstreams: the scripted fault server (``testing/fakeserver.py``) where
a fault must be exact, and a small recording upstream (aiohttp, in this file) where the test must see
the headers and bytes the proxy sent. Each case: a clean 4xx/5xx JSON answer or a one-line error, the
request recorded, the proxy still serving."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgauge.canary import CanaryConfig, CanaryThread
from specgauge.canary.controller import CanaryStateError
from specgauge.canary.eventlog import read_events
from specgauge.canary.intake import split_credentials
from specgauge.canary.proxy import TAG_HEADER
from specgauge.testing.fakeserver import FakeServer
from specgauge.records import ResultsFile

COMPLETION = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class Recorder:
    """An upstream that records what reached it: headers and body sizes; JSON bodies get a completion,
    anything else a 400 JSON error (as a real server would)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append({"authorization": request.headers.get("Authorization"), "bytes": len(body)})
        try:
            ok = isinstance(json.loads(body), dict)
        except (ValueError, RecursionError):
            ok = False
        if not ok:
            return web.json_response({"error": {"message": "bad body", "type": "BadRequestError", "param": None, "code": 400}},
                                     status=400)
        return web.json_response(COMPLETION)

    def url(self, creds: str = "") -> str:
        return f"http://{creds}127.0.0.1:{self.port}"

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture
def rec_pair() -> Iterator[tuple[Recorder, Recorder]]:
    a, b = Recorder(), Recorder()
    yield a, b
    a.close()
    b.close()


def cfg(base: str, cand: str, out: Path, **kw: object) -> CanaryConfig:
    d = dict(baseline=base, candidate=cand, port=0, out_dir=out, interval_s=600.0, first_byte_timeout_s=2.0,
             stall_timeout_s=10.0, timeout_s=20.0, steps=[100.0])
    d.update(kw)
    return CanaryConfig(**d)  # type: ignore[arg-type]


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}


def assert_json_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["code"] == status
    return str(err["message"])


def records(out: Path, side: str) -> list[Any]:
    return ResultsFile(out / side / "results.jsonl").existing()


# ---------------------------------------------------------------- 3. credentials in an upstream URL


def test_split_credentials() -> None:
    assert split_credentials("http://127.0.0.1:8000") == ("http://127.0.0.1:8000", None)
    url, auth = split_credentials("http://u%40x:p%3Aw@[::1]:8002/base")
    assert url == "http://[::1]:8002/base" and auth == "Basic " + base64.b64encode(b"u@x:p:w").decode()


def test_url_credentials_with_a_client_authorization(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    """Before: aiohttp refused to combine them, the client got a bare 500, nothing was recorded and the
    candidate was never charged. Now the client's Authorization passes through, the URL's credentials
    are the upstream's Basic auth when the client has none."""
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url("u:pw@"), out)) as cy:
        r = httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer K"}, timeout=10)
        assert r.status_code == 200 and r.headers[TAG_HEADER] == "candidate", r.text
        r2 = httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10)
        assert r2.status_code == 200 and r2.headers[TAG_HEADER] == "candidate"
    assert [s["authorization"] for s in cand.seen] == ["Bearer K", "Basic " + base64.b64encode(b"u:pw").decode()]
    (c1, c2) = records(out, "candidate")
    assert c1.ok and c2.ok
    for f in out.rglob("*"):
        if f.is_file():
            assert "pw" not in f.read_text(errors="replace").replace("pwd", ""), f


def test_any_failure_to_send_to_the_candidate_falls_back_and_counts(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    """Whatever the client library raises before the first byte (here a ValueError, aiohttp's kind for
    a request it refuses): the baseline answers, the candidate's failure is recorded and counted."""
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url(), out)) as cy:
        assert cy.service.proxy is not None
        session = cy.service.proxy.candidate.session

        def refuse(*a: Any, **k: Any) -> Any:
            raise ValueError("Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in URL")

        session.request = refuse  # type: ignore[method-assign]  (the proxy sends through session.request)
        r = httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10)
        assert r.status_code == 200 and r.headers[TAG_HEADER] == "baseline"
        totals = httpx.get(cy.base_url + "/canary/status").json()["totals"]
        assert totals["retried_on_baseline"] == 1 and totals["client_visible_failures"] == 0
    (c,) = records(out, "candidate")
    assert not c.ok and "could not send" in (c.error or "") and c.extra["canary"]["retried_on_baseline"]


# ---------------------------------------------------------------- 6. deeply nested bodies


@pytest.mark.parametrize("depth", [1100, 100_000])
def test_deeply_nested_body_is_forwarded_and_recorded(rec_pair: tuple[Recorder, Recorder], tmp_path: Path, depth: int) -> None:
    base, cand = rec_pair
    out = tmp_path / "o"
    raw = b'{"model": "m", "messages": [], "x": ' + b"[" * depth + b"]" * depth + b"}"
    with CanaryThread(cfg(base.url(), cand.url(), out)) as cy:
        r = httpx.post(cy.base_url + "/v1/chat/completions", content=raw, headers={"Content-Type": "application/json"}, timeout=20)
        assert_json_error(r, 400)  # the upstream's own answer, forwarded (before: the proxy's bare 500)
        assert r.headers[TAG_HEADER] == "baseline"
        assert httpx.get(cy.base_url + "/health").status_code == 200
    (b,) = records(out, "baseline")
    assert b.http_status == 400 and not b.ok
    assert base.seen[-1]["bytes"] == len(raw)


# ---------------------------------------------------------------- 7. sizes, in-flight cap, timeouts


def test_body_size_and_inflight_caps(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url(), out, max_body_bytes=200_000, max_inflight_bytes=300_000)) as cy:
        big = json.dumps(chat(pad="x" * 250_000)).encode()
        msg = assert_json_error(httpx.post(cy.base_url + "/v1/chat/completions", content=big, timeout=10), 413)
        assert "200000" in msg

        def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"model": "m", "pad": "'
            for _ in range(30):
                yield b"x" * 10_000
            yield b'"}'

        assert_json_error(httpx.post(cy.base_url + "/v1/chat/completions", content=chunked(), timeout=10), 413)
        # two slow 150 KB bodies in flight at once exceed the 300 KB cap: one of them is told to retry
        body = json.dumps(chat(pad="y" * 150_000)).encode()

        def slow() -> Iterator[bytes]:
            for i in range(0, len(body), 30_000):
                yield body[i:i + 30_000]
                time.sleep(0.2)

        with ThreadPoolExecutor(2) as ex:
            rs = list(ex.map(lambda _: httpx.post(cy.base_url + "/v1/chat/completions", content=slow(), timeout=20,
                                                  headers={"Content-Length": str(len(body))}), range(2)))
        codes = sorted(r.status_code for r in rs)
        assert codes == [200, 503], codes
        busy = next(r for r in rs if r.status_code == 503)
        assert busy.headers.get("Retry-After") == "1" and assert_json_error(busy, 503)
        assert cy.service.proxy is not None and cy.service.proxy.gate.inflight_bytes == 0  # every reservation released
        ok = httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10)
        assert ok.status_code == 200


def test_slowloris_idle_and_slow_body_connections_are_closed(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    """Before: no header or body read timeout; every such connection was held until the descriptors ran out."""
    base, cand = rec_pair
    with CanaryThread(cfg(base.url(), cand.url(), tmp_path / "o", header_timeout_s=1.0, body_timeout_s=1.0)) as cy:
        port = cy.service.port
        assert port is not None

        def closed_within(sock: socket.socket, trickle: bytes = b"", limit: float = 15.0) -> bytes:
            """Bytes the proxy sent before it closed the connection (trickling ``trickle`` a byte at a time)."""
            sock.settimeout(0.3)
            got, t0, i = b"", time.monotonic(), 0
            while time.monotonic() - t0 < limit:
                if i < len(trickle):
                    try:
                        sock.send(trickle[i:i + 1])
                    except OSError:
                        return got
                    i += 1
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return got
                if not data:
                    return got
                got += data
            raise AssertionError(f"the proxy held the connection for {limit} s")

        idle = socket.create_connection(("127.0.0.1", port))
        assert closed_within(idle) == b""
        slowloris = socket.create_connection(("127.0.0.1", port))
        closed_within(slowloris, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200)
        slow_body = socket.create_connection(("127.0.0.1", port))
        slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 1000\r\n\r\n{\"model\":")
        answer = closed_within(slow_body)
        assert answer.startswith(b"HTTP/1.1 408") and b'"error"' in answer, answer[:200]
        for s in (idle, slowloris, slow_body):
            s.close()
        assert httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10).status_code == 200


def test_large_bodies_are_parsed_off_the_event_loop(rec_pair: tuple[Recorder, Recorder], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing and hashing a large greedy body ran on the event loop (every stream stalled ~300 ms)."""
    import specgauge.canary.proxy as proxy_mod

    threads: list[str] = []
    real = proxy_mod.inspect_body

    def spy(body: bytes) -> Any:
        threads.append(threading.current_thread().name)
        return real(body)

    monkeypatch.setattr(proxy_mod, "inspect_body", spy)
    base, cand = rec_pair
    with CanaryThread(cfg(base.url(), cand.url(), tmp_path / "o")) as cy:
        httpx.post(cy.base_url + "/v1/chat/completions", json=chat(temperature=0), timeout=10)
        httpx.post(cy.base_url + "/v1/chat/completions", json=chat(temperature=0, pad="z" * (2 << 20)), timeout=20)
    assert threads[0] == "specgauge-canary" and threads[1] != "specgauge-canary", threads


# ---------------------------------------------------------------- 8. timeout messages


def test_timeout_messages_name_the_timer_that_fired(tmp_path: Path) -> None:
    """A non-streamed candidate request is retried when no response came within --stall-timeout (its
    first byte is its whole answer), and the record says so; a stream silent past it says that."""
    out = tmp_path / "o"
    with FakeServer(model="m") as b, FakeServer(model="m") as c:
        with CanaryThread(cfg(b.base_url, c.base_url, out, stall_timeout_s=1.0, first_byte_timeout_s=30.0, timeout_s=60.0)) as cy:
            c.override = "fault:hang"
            r = httpx.post(cy.base_url + "/v1/chat/completions", json=chat(stream=False), timeout=30)
            assert r.status_code == 200 and r.headers[TAG_HEADER] == "baseline"
            c.override = "fault:stall tokens:6 per:1"
            with httpx.stream("POST", cy.base_url + "/v1/chat/completions", json=chat(stream=True), timeout=30) as s:
                try:
                    for _ in s.iter_raw():
                        pass
                except httpx.HTTPError:
                    pass
    hang, stall = records(out, "candidate")
    assert "no response for 1 s (--stall-timeout)" in (hang.error or ""), hang.error
    assert "silence longer than 1 s" in (stall.error or "") and "600" not in (stall.error or ""), stall.error


# ---------------------------------------------------------------- 5 and 8. files left by a crash or by hand


def test_restart_onto_a_torn_results_line(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url(), out)) as cy:
        httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10)
    path = out / "candidate" / "results.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 2])  # a crash in the middle of the next write
    with CanaryThread(cfg(base.url(), cand.url(), out)) as cy:
        httpx.post(cy.base_url + "/v1/chat/completions", json=chat(), timeout=10)
    recs = records(out, "candidate")  # raised 'not a specgauge request record' before (a glued line)
    assert len(recs) == 2 and all(r.ok for r in recs)


@pytest.mark.parametrize("state,problem", [({"weight": 1e9}, "weight"), ({"step": 7}, "step"), ({"weight": "NaN"}, "weight")])
def test_impossible_saved_state_is_one_line(rec_pair: tuple[Recorder, Recorder], tmp_path: Path, state: dict[str, Any],
                                            problem: str) -> None:
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url(), out, steps=[1.0, 50.0])):
        pass
    p = out / "state.json"
    saved = json.loads(p.read_text())
    text = json.dumps({**saved, **state}).replace('"NaN"', "NaN")
    p.write_text(text)
    with pytest.raises(CanaryStateError) as e:
        with CanaryThread(cfg(base.url(), cand.url(), out, steps=[1.0, 50.0])):
            pass
    assert problem in str(e.value) and "\n" not in str(e.value) and "state.json" in str(e.value)


def test_bad_bytes_in_the_decision_log_are_skipped(rec_pair: tuple[Recorder, Recorder], tmp_path: Path) -> None:
    base, cand = rec_pair
    out = tmp_path / "o"
    with CanaryThread(cfg(base.url(), cand.url(), out)):
        pass
    log = out / "decisions.jsonl"
    log.write_bytes(log.read_bytes() + b'{"seq": 9, "event": "x", "bad": "\xff\xfe"}\n{"seq": 10, "t": NaN, "event": "y"}\n')
    with CanaryThread(cfg(base.url(), cand.url(), out)):
        pass
    events = [e["event"] for e in read_events(log)]
    assert events[0] == "start" and events[-1] == "stop" and "x" not in events


# ---------------------------------------------------------------- fuzz: bodies and headers

header_names = st.sampled_from(["X-Session-Id", "Authorization", "Content-Type", "Accept-Encoding", "Connection", "TE",
                                "Expect", "X-Forwarded-For", "Cookie", "Transfer-Encoding", "Upgrade", "Host"])
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
scalars = st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | st.text(max_size=8)
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=10)
bodies = st.one_of(
    st.binary(max_size=200),
    st.fixed_dictionaries({"model": st.just("m") | values, "messages": st.just([{"role": "user", "content": "hi"}]) | values},
                          optional={"stream": values, "user": values, "temperature": values, "stream_options": values,
                                    "max_tokens": values}).map(lambda d: json.dumps(d, allow_nan=True).encode()),
    st.integers(1, 3000).map(lambda n: b'{"model":"m","x":' + b"[" * n + b"]" * n + b"}"),
    values.map(lambda v: json.dumps(v, allow_nan=True).encode()),
)


@pytest.fixture(scope="module")
def fuzz_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CanaryThread, Path]]:
    a, b = Recorder(), Recorder()
    out = tmp_path_factory.mktemp("fuzz") / "o"
    with CanaryThread(cfg(a.url(), b.url("u:pw@"), out, steps=[50.0])) as cy:
        yield cy, out
    a.close()
    b.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=bodies, headers=st.dictionaries(header_names, header_values, max_size=4),
       path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/x"]))
def test_any_body_and_headers(fuzz_proxy: tuple[CanaryThread, Path], body: bytes, headers: dict[str, str], path: str) -> None:
    """Whatever a client sends: the proxy answers (the upstream's answer or its own JSON error), never a
    bare 500 of its own; every routed request leaves a record; /health stays 200."""
    cy, _ = fuzz_proxy
    headers = {k: v for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding", "host", "expect",
                                                                         "upgrade", "connection", "te")}
    headers = {k: v.strip() for k, v in headers.items() if v.strip()}  # h11 (the client) refuses padded values
    before = copy.deepcopy(cy.service.totals.as_dict())
    try:
        r = httpx.post(cy.base_url + path, content=body, headers=headers, timeout=20)
    except httpx.RemoteProtocolError:
        r = None
    assert r is not None, "the proxy dropped the connection"
    assert r.status_code != 500, r.text[:200]
    if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
        assert "error" in r.json() or path == "/v1/x"
    after = cy.service.totals.as_dict()
    if path in ("/v1/chat/completions", "/v1/completions"):
        assert after != before  # the request was recorded
    assert httpx.get(cy.base_url + "/health").status_code == 200
