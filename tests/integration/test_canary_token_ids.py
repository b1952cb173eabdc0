"""The canary asks the candidate for token ids itself (``canary --ask-token-ids``, on with
``--speculative-config``), so ``guardrail:acceptance_replay`` runs on real clients' traffic, which
never asks ``return_token_ids``:

- the real embedded server (``specgauge serve``, the shipped tiny target speculating with n-gram
  drafts, real HTTP): a client that did not ask gets the bytes it gets from the server directly —
  chat and completions, streamed and not; the two responses differ only in the response id and
  ``created`` second and the engine step it was admitted at, which the server makes per request and
  which are masked before comparing — a
  client that asked gets its ids as before, and the window's replay guardrail judges every request;
- a server that refuses the field (HTTP 400 naming it; the fake server's ``refuse_token_ids``, since
  no real server here refuses it): the request is sent again without the field, the client gets the
  candidate's answer, the proxy stops asking, and the guardrail says why it cannot run (en and ko).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specgauge.canary import CanaryConfig, CanaryThread, JudgeConfig
from specgauge.canary.proxy import TAG_HEADER
from specgauge.i18n import translate
from specgauge.models import available, target_dir
from specgauge.records import RequestRecord, ResultsFile
from specgauge.testing.fakeserver import FakeServer

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
MODEL = "tiny-target"
HEADERS = {"Accept-Encoding": "identity"}


def _masked(raw: bytes) -> bytes:
    """The response with its per-request serial values masked (nothing else): the response id, the
    ``created`` second, and the engine step and admission count the request started at (the embedded
    server's own keys in ``metrics.speculative_decoding``)."""
    raw = re.sub(rb'("id":\s*")(?:chat)?cmpl-[^"]+(")', rb"\1ID\2", raw)
    return re.sub(rb'("(?:created|specgauge_prefill_step|specgauge_admitted)":\s*)\d+', rb"\g<1>0", raw)


def _replay_check(cy: CanaryThread) -> dict[str, Any]:
    event = cy.call(cy.service.evaluate())
    return next(c for c in event["judgement"]["checks"] if c["name"] == "guardrail:acceptance_replay")


@pytest.fixture(scope="module")
def candidate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("torch")
    if not available():
        pytest.skip("shipped tiny models missing")
    from specgauge.servers import embedded_server

    srv = embedded_server(target_dir(), tmp_path_factory.mktemp("tokids") / "candidate.log", max_batch=2, speculative_config=SPEC)
    srv.start()
    try:
        yield srv.base_url
    finally:
        srv.stop()


def through_the_canary(url: str, model: str, spec: dict[str, Any], tmp: Path) -> tuple[dict[str, Any], list[RequestRecord]]:
    """Five requests no client asked token ids for (chat and completions, streamed and not) and one that
    asked, each through a canary whose candidate is ``url`` (weight 100; the baseline is the same server,
    only probed) and sent directly: equal bytes (masked), ids only for the one that asked. Returns the
    window's replay guardrail and the candidate's records. Also run on real vLLM (``test_bench_vllm``)."""
    # prompts whose greedy outputs the n-gram drafter drafts on (and partly accepts) with the tiny target
    chat = {"model": model, "messages": [{"role": "user", "content": "Summarise: the printer on floor 3 jams every morning."}],
            "max_tokens": 24, "temperature": 0}
    comp = {"model": model, "prompt": "List the errors in: timeout, timeout, refused.", "max_tokens": 24, "temperature": 0}
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    cases = [("/v1/chat/completions", chat), ("/v1/chat/completions", {**chat, **usage}),
             ("/v1/completions", comp), ("/v1/completions", {**comp, **usage}), ("/v1/completions", {**comp, "stream": True})]
    cfg = CanaryConfig(baseline=url, candidate=url, port=0, out_dir=tmp / "o", interval_s=600.0, steps=[100.0],
                       judge=JudgeConfig(min_samples=2), speculative_config=spec)
    assert cfg.asks_token_ids()
    ids = re.compile(rb'"(?:prompt_)?token_ids":\s*\[')
    with CanaryThread(cfg) as cy, httpx.Client(timeout=120, headers=HEADERS) as http:
        for path, body in cases:
            raw = json.dumps(body).encode()
            direct = http.post(url + path, content=raw, headers={"Content-Type": "application/json"})
            proxied = http.post(cy.base_url + path, content=raw, headers={"Content-Type": "application/json"})
            assert proxied.status_code == direct.status_code == 200 and proxied.headers[TAG_HEADER] == "candidate"
            assert not ids.search(proxied.content), (path, body)
            assert _masked(proxied.content) == _masked(direct.content), (path, body, proxied.content, direct.content)
            assert proxied.headers["content-type"] == direct.headers["content-type"]
        # a client that asks gets the ids, as the server writes them
        asked = {**chat, **usage, "return_token_ids": True}
        direct = http.post(url + "/v1/chat/completions", json=asked)
        proxied = http.post(cy.base_url + "/v1/chat/completions", json=asked)
        assert ids.search(proxied.content) and _masked(proxied.content) == _masked(direct.content)
        check = _replay_check(cy)
        assert cy.service.status()["token_ids"] == {"asked": len(cases), "refused": None}
    recs = ResultsFile(tmp / "o" / "candidate" / "results.jsonl").existing()
    # every record has the ids (the one stream without include_usage has no per-request counts to compare)
    assert len(recs) == len(cases) + 1 and all(r.ok and r.extra.get("output_token_ids") and r.extra.get("prompt_token_ids")
                                               for r in recs)
    return check, recs


def test_the_guardrail_runs_without_the_client_asking_and_clients_get_their_bytes(candidate: str, tmp_path: Path) -> None:
    check, _ = through_the_canary(candidate, MODEL, SPEC, tmp_path)
    # the replay (its own outputs through its own n-gram drafter) is held against the server's per-request
    # counts, which all but the stream without include_usage carry: 5 of 6, and they agree exactly (greedy)
    ev = check["evidence"]
    assert check["status"] == "pass" and ev["requests"] == 5, check
    assert ev["bands"][0]["server_draft_tokens"] > 0 and ev["server_rate"] == ev["replay_rate"], check


@pytest.fixture
def refusing() -> Iterator[tuple[FakeServer, FakeServer]]:
    with FakeServer(model="m") as b, FakeServer(model="m", refuse_token_ids=True) as c:
        yield b, c


def test_a_candidate_refusing_the_field_is_asked_once_and_the_guardrail_says_why(refusing: tuple[FakeServer, FakeServer],
                                                                                   tmp_path: Path) -> None:
    b, c = refusing
    body = {"model": "m", "messages": [{"role": "user", "content": "tokens:6 per:2"}], "stream": True, "temperature": 0}
    direct = httpx.post(c.base_url + "/v1/chat/completions", json=body, timeout=10).content
    cfg = CanaryConfig(baseline=b.base_url, candidate=c.base_url, port=0, out_dir=tmp_path / "o", interval_s=600.0, steps=[100.0],
                       judge=JudgeConfig(min_samples=2), speculative_config=SPEC, first_byte_timeout_s=5.0, timeout_s=30.0)
    with CanaryThread(cfg) as cy:
        for _ in range(3):
            r = httpx.post(cy.base_url + "/v1/chat/completions", json=body, timeout=10)
            # the candidate answered (sent again without the field), nothing was retried on the baseline
            assert r.status_code == 200 and r.headers[TAG_HEADER] == "candidate" and r.content == direct
        check = _replay_check(cy)
        status = cy.service.status()
    assert c.refused == 1 and c.requests == 1 + 1 + 3 and b.requests == 0  # direct + refused + 3 sent without it
    assert status["token_ids"]["asked"] == 0 and "HTTP 400" in status["token_ids"]["refused"]
    assert status["totals"]["client_visible_failures"] == 0
    assert check["status"] == "skipped", check
    assert "refused return_token_ids (HTTP 400: " in check["reason"] and "Extra inputs are not permitted" in check["reason"]
    assert "후보가 return_token_ids를 거부함" in translate(check["reason"], "ko")
    recs = ResultsFile(tmp_path / "o" / "candidate" / "results.jsonl").existing()
    assert len(recs) == 3 and all(r.ok and not r.extra["canary"]["retried_on_baseline"] for r in recs)
