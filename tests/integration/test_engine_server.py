"""The real embedded server on a free loopback port, driven by the official ``openai`` client and raw
HTTP: streamed and not, usage, token ids, per-request spec metrics vs ``/metrics`` counters, isolation
of concurrent clients, a disconnecting client, and 4xx JSON errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from specgauge.engine.serve import build_app  # noqa: E402
from specgauge.testing.engine import make_tiny_model, make_tiny_tokenizer  # noqa: E402
from tests.integration._http import serve_in_thread  # noqa: E402

KEY = "sk-test"
K = 3
NOEOS = {"ignore_eos": True, "return_token_ids": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("srv")
    vocab = make_tiny_tokenizer(root / "target")
    make_tiny_model(root / "target", vocab_size=vocab, seed=2)
    make_tiny_model(root / "draft", vocab_size=vocab, seed=2, perturb_from=root / "target", perturb_scale=0.05)
    app = build_app(
        root / "target", json.dumps({"model": str(root / "draft"), "num_speculative_tokens": K}), api_key=KEY,
        max_batch=4, max_model_len=512, served_model_name="tiny", per_request_spec_decode_metrics="detailed",
        max_request_bytes=20_000,
    )
    with serve_in_thread(app, log_level="warning") as url:
        yield url


def client(url: str) -> Any:
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine")))
            out[(s.name, labels)] = s.value
    return out


def test_completions_non_streamed_and_streamed_agree(server: str) -> None:
    c = client(server)
    r = c.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=24, temperature=0, extra_body=NOEOS)
    ch = r.choices[0]
    assert r.usage.completion_tokens == 24 and ch.finish_reason == "length"
    ids = ch.model_extra["token_ids"]
    assert len(ids) == 24 and ch.model_extra["prompt_token_ids"]
    spec = r.model_extra["metrics"]["speculative_decoding"]
    assert spec["num_spec_tokens"] == K and len(spec["acceptance_histogram"]) == K + 1
    assert sum(spec["per_step_drafted"]) == spec["num_draft_tokens"], spec

    chunks = list(c.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=24, temperature=0,
                                       stream=True, stream_options={"include_usage": True}, extra_body=NOEOS))
    body = [x for x in chunks if x.choices]
    assert "".join(x.choices[0].text for x in body) == ch.text
    streamed_ids = [t for x in body for t in x.choices[0].model_extra["token_ids"]]
    assert streamed_ids == ids  # greedy: identical tokens either way
    assert any(len(x.choices[0].model_extra["token_ids"]) > 1 for x in body), spec  # a step's tokens share a chunk
    assert chunks[-1].usage.completion_tokens == 24
    assert chunks[-1].model_extra["metrics"]["speculative_decoding"]["num_spec_tokens"] == K


def test_chat_completions_streamed_and_not(server: str) -> None:
    c = client(server)
    msgs = [{"role": "user", "content": "안녕하세요"}]
    r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, temperature=0, extra_body=NOEOS)
    assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 12
    assert r.model_extra["prompt_token_ids"]
    chunks = list(c.chat.completions.create(
        model="tiny", messages=msgs, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}, extra_body=NOEOS))
    text = "".join(x.choices[0].delta.content or "" for x in chunks if x.choices)
    assert text == r.choices[0].message.content
    used = [x.usage.completion_tokens for x in chunks if x.usage is not None]
    assert used == sorted(used) and used[-1] == 12
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with_tools = c.chat.completions.create(model="tiny", messages=msgs, tools=tools, max_tokens=2, extra_body=NOEOS)
    assert with_tools.usage.prompt_tokens > r.usage.prompt_tokens  # tools were rendered into the prompt


def test_seeded_sampling_reproduces(server: str) -> None:
    c = client(server)
    kw = {"model": "tiny", "prompt": "The quick", "max_tokens": 16, "temperature": 0.9, "top_p": 0.95, "seed": 7,
          "extra_body": NOEOS}
    a, b = c.completions.create(**kw), c.completions.create(**kw)
    assert a.choices[0].model_extra["token_ids"] == b.choices[0].model_extra["token_ids"]


def test_stop_string_cuts_the_text(server: str) -> None:
    c = client(server)
    full = c.completions.create(model="tiny", prompt="import json", max_tokens=30, temperature=0, extra_body=NOEOS)
    text = full.choices[0].text
    stop = text[10:13]
    assert len(stop) == 3
    r = c.completions.create(model="tiny", prompt="import json", max_tokens=30, temperature=0, stop=[stop],
                             extra_body=NOEOS)
    assert r.choices[0].text == text[: text.index(stop)]
    assert r.choices[0].finish_reason == "stop" and r.choices[0].model_extra["stop_reason"] == stop


def test_metrics_counters_equal_sum_of_per_request_metrics(server: str) -> None:
    before = scrape(server)
    c = client(server)

    async def many() -> list[Any]:
        ac = openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0)
        return await asyncio.gather(*[
            ac.completions.create(model="tiny", prompt=f"def f{i}(x):", max_tokens=10 + 3 * i, temperature=0.7 * (i % 2),
                                  seed=i, extra_body=NOEOS) for i in range(6)])

    rs = asyncio.run(many())
    del c
    after = scrape(server)

    def d(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    specs = [r.model_extra["metrics"]["speculative_decoding"] for r in rs]
    assert d("vllm:spec_decode_num_drafts_total") == sum(s["num_spec_steps"] for s in specs) > 0
    assert d("vllm:spec_decode_num_draft_tokens_total") == sum(s["num_draft_tokens"] for s in specs)
    assert d("vllm:spec_decode_num_accepted_tokens_total") == sum(s["num_accepted_draft_tokens"] for s in specs)
    for pos in range(K):
        want = sum(sum(1 for a in s["per_step_accepted"] if a > pos) for s in specs)
        assert d("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(pos)) == want
    assert d("vllm:generation_tokens_total") == sum(r.usage.completion_tokens for r in rs)
    assert d("vllm:prompt_tokens_total") == sum(r.usage.prompt_tokens for r in rs)
    assert d("vllm:request_success_total", finished_reason="length") == 6
    assert d("vllm:e2e_request_latency_seconds_count") == 6
    assert after[("vllm:num_requests_running", ())] == 0


def test_concurrent_clients_never_see_each_others_tokens(server: str) -> None:
    c = client(server)
    prompts = [f"print({i} * {i})" for i in range(6)]
    solo = [c.completions.create(model="tiny", prompt=p, max_tokens=20, temperature=0, extra_body=NOEOS)
            .choices[0].model_extra["token_ids"] for p in prompts]

    async def together() -> list[list[int]]:
        ac = openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0)

        async def one(p: str) -> list[int]:
            ids: list[int] = []
            stream = await ac.completions.create(model="tiny", prompt=p, max_tokens=20, temperature=0, stream=True,
                                                 extra_body=NOEOS)
            async for ch in stream:
                ids += ch.choices[0].model_extra["token_ids"]
            return ids

        return await asyncio.gather(*[one(p) for p in prompts])

    assert asyncio.run(together()) == solo


def test_disconnecting_client_frees_its_slot_and_does_not_stall_others(server: str) -> None:
    before = scrape(server)
    body = {"model": "tiny", "prompt": "def", "max_tokens": 400, "stream": True, "ignore_eos": True}
    hdr = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", server + "/v1/completions", json=body, headers=hdr) as resp:
            assert resp.status_code == 200
            next(resp.iter_lines())  # read a little, then hang up mid-stream
    r = client(server).completions.create(model="tiny", prompt="abc", max_tokens=8, extra_body=NOEOS)
    assert r.usage.completion_tokens == 8
    for _ in range(100):
        after = scrape(server)
        if after[("vllm:num_requests_running", ())] == 0:
            break
        time.sleep(0.05)
    assert after[("vllm:num_requests_running", ())] == 0
    key = ("vllm:request_success_total", (("finished_reason", "abort"),))
    assert after.get(key, 0) - before.get(key, 0) == 1
    gen = after[("vllm:generation_tokens_total", ())] - before[("vllm:generation_tokens_total", ())]
    assert gen < 400  # the abandoned request stopped well before its max_tokens


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        (b"{not json", 400, "JSON"),
        (json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 100000}).encode(), 400, "maximum context length"),
        (json.dumps({"model": "tiny", "prompt": "x", "temperature": -1}).encode(), 400, "temperature"),
        (json.dumps({"model": "nope", "prompt": "x"}).encode(), 404, "does not exist"),
        (json.dumps({"model": "tiny", "prompt": "x" * 30000}).encode(), 413, "limit"),
        (json.dumps({"model": "tiny", "prompt": "x", "n": 2}).encode(), 400, "n=1"),
    ],
)
def test_bad_requests_get_json_errors(server: str, payload: bytes, status: int, needle: str) -> None:
    r = httpx.post(server + "/v1/completions", content=payload,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert needle in err["message"] and err["code"] == status


def test_api_key_is_enforced_and_models_listed(server: str) -> None:
    assert httpx.get(server + "/v1/models").status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0).models.list()
    assert [m.id for m in client(server).models.list().data] == ["tiny"]
    assert httpx.get(server + "/health").status_code == 200  # health and metrics stay open, as in vLLM
