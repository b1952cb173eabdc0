"""Hostile requests and faults against the real embedded server (issue 26, item 2): every request field
out of vLLM's range is a 400 with the JSON error body, an exception inside the engine's step fails that
request only, and ``/health`` is 200 after every one of them. Real uvicorn on a loopback port, a real
tiny target + draft model; the faults are injected by wrapping engine methods (the only way to make a
correct engine fail on purpose)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specgauge.engine.serve import build_app  # noqa: E402
from specgauge.testing.engine import make_tiny_model, make_tiny_tokenizer  # noqa: E402
from tests.integration._http import serve_in_thread  # noqa: E402

POISON_SEED = 424242


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("hostile-srv")
    vocab = make_tiny_tokenizer(root / "target")
    make_tiny_model(root / "target", vocab_size=vocab, seed=3)
    make_tiny_model(root / "draft", vocab_size=vocab, seed=3, perturb_from=root / "target", perturb_scale=0.05)
    app = build_app(root / "target", json.dumps({"model": str(root / "draft"), "num_speculative_tokens": 2}),
                    max_batch=4, max_model_len=256, served_model_name="tiny", max_request_bytes=50_000)
    with serve_in_thread(app, log_level="critical") as url:
        yield url, app.state.runner.engine


def post(url: str, body: Any, path: str = "/v1/completions", timeout: float = 60.0) -> httpx.Response:
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url + path, content=raw, headers={"Content-Type": "application/json"}, timeout=timeout)


def assert_json_error(r: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:300])
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["code"] == status
    assert "\n" not in err["message"] and "Traceback" not in err["message"]
    if param is not None:
        assert param in err["message"] or err["param"] == param, err
    return err  # type: ignore[no-any-return]


def assert_healthy(url: str) -> None:
    assert httpx.get(url + "/health").status_code == 200
    r = post(url, {"prompt": "hi", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1, r.text


# ---------------------------------------------------------------- the reproductions


def test_huge_top_k_is_a_400_and_the_engine_lives(served: tuple[str, Any]) -> None:
    url, _ = served
    r = post(url, {"prompt": "hi", "top_k": 1180591620717411303424, "max_tokens": 4})  # 2**70: killed the engine before
    assert_json_error(r, 400, "top_k")
    assert_json_error(post(url, {"prompt": "hi", "top_k": 100_000, "max_tokens": 4}), 400, "top_k")  # > vocab, as vLLM
    assert_healthy(url)
    ok = post(url, {"prompt": "hi", "top_k": 5, "max_tokens": 4, "temperature": 1.0, "seed": 1})
    assert ok.status_code == 200


@pytest.mark.parametrize("seed", [2**64, 2**63, -(2**63) - 1, 10**40])
def test_out_of_range_seed_is_a_json_400(served: tuple[str, Any], seed: int) -> None:
    url, _ = served
    assert_json_error(post(url, {"prompt": "hi", "seed": seed, "max_tokens": 4}), 400, "seed")
    assert_healthy(url)


def test_vllm_edges_are_served(served: tuple[str, Any]) -> None:
    """What vLLM accepts is served: seed -1 (none), int64 extremes, top_k -1/0/vocab, tiny temperatures."""
    url, engine = served
    for extra in ({"seed": -1}, {"seed": 2**63 - 1}, {"seed": -(2**63)}, {"top_k": -1}, {"top_k": 0},
                  {"top_k": engine.args.vocab_size}, {"temperature": 1e-9}, {"temperature": 1e-3}, {"temperature": 2.0}):
        r = post(url, {"prompt": "hi", "max_tokens": 3, **extra})
        assert r.status_code == 200, (extra, r.text)
    for bad, param in (({"temperature": 2.5}, "temperature"), ({"top_p": 0}, "top_p"), ({"stop": [""]}, "stop"),
                       ({"top_k": -2}, "top_k"), ({"max_tokens": 0}, "max_tokens"), ({"max_tokens": 2**70}, None)):
        assert_json_error(post(url, {"prompt": "hi", **bad}), 400, param)
    assert_healthy(url)


# ---------------------------------------------------------------- faults inside the step loop


def test_exception_in_one_request_fails_only_that_request(served: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault inside the sampled verification, for one request: it gets a 500 JSON error (a streamed one
    an error event), the greedy request batched with it is answered in full and equals its solo output,
    the next requests are served and /health stays 200."""
    url, engine = served
    greedy = {"prompt": "def add(a, b):", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    solo = post(url, greedy).json()["choices"][0]["text"]
    real = engine.verifier.sampled

    def faulty(reqs: Any, *a: Any, **k: Any) -> None:
        if any(r.params.seed == POISON_SEED for r in reqs):
            raise OverflowError("injected: value cannot be converted to type int64 without overflow")
        return real(reqs, *a, **k)  # type: ignore[no-any-return]

    monkeypatch.setattr(engine.verifier, "sampled", faulty)
    poison = {"prompt": "The quick", "max_tokens": 24, "temperature": 1.0, "seed": POISON_SEED, "ignore_eos": True}
    with ThreadPoolExecutor(4) as ex:
        fg = [ex.submit(post, url, greedy) for _ in range(2)]
        fp = ex.submit(post, url, poison)
        fs = ex.submit(post, url, {**poison, "stream": True})
        good = [f.result() for f in fg]
        bad, streamed = fp.result(), fs.result()
    assert_json_error(bad, 500)
    assert streamed.status_code == 200 and '"error"' in streamed.text and streamed.text.rstrip().endswith("data: [DONE]")
    for g in good:
        assert g.status_code == 200, g.text
        assert g.json()["choices"][0]["text"] == solo
    assert_healthy(url)
    assert engine.num_running == 0 and len(engine._free) == engine.max_batch  # every slot came back


def test_step_failure_outside_containment_keeps_the_loop(served: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A step that raises before any request's phase (the engine's own bookkeeping): the requests in
    flight get an error, the loop goes on, the next request is served."""
    url, engine = served
    real = engine.step
    calls = {"n": 0}

    def once(*a: Any, **k: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected step failure")
        return real(*a, **k)

    monkeypatch.setattr(engine, "step", once)
    r = post(url, {"prompt": "hi", "max_tokens": 4, "temperature": 0})
    assert_json_error(r, 500)
    monkeypatch.setattr(engine, "step", real)
    assert_healthy(url)


# ---------------------------------------------------------------- fuzz over every request field

wild_int = st.integers(-(2**70), 2**70) | st.sampled_from([2**63, 2**64, -(2**63) - 1, -1, 0, 1, 2**31, 10**30])
wild_float = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([1e-300, 1e-6, 0.009, 2.0, 2.0000001, 1e308])
junk = st.none() | st.booleans() | st.text(max_size=5) | st.lists(st.integers(-3, 3), max_size=3) | st.dictionaries(
    st.text(max_size=3), st.integers(), max_size=2)
FIELDS = {
    "max_tokens": st.integers(-2, 6) | wild_int | junk,
    "temperature": st.floats(0, 2.5) | wild_float | junk,
    "top_p": st.floats(-0.5, 1.5) | wild_float | junk,
    "top_k": st.integers(-3, 400) | wild_int | junk,
    "seed": wild_int | junk,
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=3) | junk,
    "stop_token_ids": st.lists(wild_int, max_size=3) | junk,
    "ignore_eos": st.booleans() | junk,
    "stream": st.booleans() | junk,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | junk,
                                                          "continuous_usage_stats": st.booleans() | junk}) | junk,
    "n": st.integers(-1, 3) | junk,
    "logprobs": st.integers(-1, 3) | junk,
    "return_token_ids": st.booleans() | junk,
    "echo": st.booleans() | junk,
    "model": st.sampled_from(["tiny", "other"]) | junk,
}
completion_bodies = st.fixed_dictionaries(
    {"prompt": st.text(max_size=20) | st.lists(wild_int, max_size=4) | st.lists(st.integers(0, 300), min_size=1, max_size=4)
     | st.lists(st.lists(st.integers(0, 300), max_size=3), max_size=2) | junk},
    optional={k: v.map(lambda x: x) for k, v in FIELDS.items()},
)
chat_bodies = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "x"]) | junk},
                                                optional={"content": st.text(max_size=10) | st.lists(
                                                    st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]) | junk},
                                                                          optional={"text": st.text(max_size=5) | junk}),
                                                    max_size=2) | junk}), max_size=2) | junk},
    optional={**FIELDS, "max_completion_tokens": st.integers(-1, 6) | wild_int | junk,
              "chat_template_kwargs": st.dictionaries(st.sampled_from(["tokenize", "x", "add_generation_prompt"]), junk, max_size=2) | junk,
              "tools": st.lists(st.dictionaries(st.text(max_size=3), junk, max_size=2), max_size=2) | junk},
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=completion_bodies | chat_bodies)
def test_any_request_is_answered_or_refused_in_json(served: tuple[str, Any], body: dict[str, Any]) -> None:
    url, _ = served
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    if isinstance(body.get("max_tokens"), int) and 0 < body["max_tokens"] < 2**20:
        body["max_tokens"] = min(body["max_tokens"], 6)  # keep each served request short
    if "messages" in body and "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = 4
    r = post(url, body, path)
    assert r.status_code in (200, 400, 404), (r.status_code, r.text[:300], body)
    if r.status_code != 200:
        assert_json_error(r, r.status_code)
    elif body.get("stream") is True:
        assert r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text, r.text[-300:]
    else:
        assert r.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(url + "/health").status_code == 200


@pytest.mark.parametrize("raw", [
    b'{"prompt": "hi", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # past the body limit: 413
    b'{"prompt": "hi", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # nested past the JSON parser's limit
    b'{"prompt": "\xff\xfe"}', b"\x00\x01", b"", b"[]", b'"str"', b'{"prompt": NaN}',
])
def test_bad_bodies_are_json_4xx(served: tuple[str, Any], raw: bytes) -> None:
    url, _ = served
    r = post(url, raw)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
    assert_json_error(r, r.status_code)
    assert_healthy(url)


def test_chunked_body_past_the_limit_is_refused(served: tuple[str, Any]) -> None:
    """No Content-Length (chunked): the body is counted while it arrives, 413 past the limit."""
    url, _ = served

    def gen() -> Iterator[bytes]:
        yield b'{"prompt": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}'

    r = httpx.post(url + "/v1/completions", content=gen(), headers={"Content-Type": "application/json"}, timeout=30)
    assert_json_error(r, 413)
    assert_healthy(url)
