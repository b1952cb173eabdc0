"""Recorded (or, where the server cannot run here, synthesized and labelled) server responses
replayed byte for byte through the scripted server into a full bench run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.testing.fakeserver import FakeServer

DATA = Path(__file__).resolve().parents[1] / "data" / "recorded"


def replay(name: str, tmp: Path) -> dict:
    rec = json.loads((DATA / name).read_text())
    w = tmp / "w.jsonl"
    n = len(rec["responses"])
    w.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "p", "max_tokens": 64}) + "\n" for i in range(n)))
    with FakeServer(recording=rec) as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp / "o", max_concurrency=1, progress=False))
    return res.summary


def test_sglang_synthesized(tmp_path: Path) -> None:
    s = replay("sglang_synthesized.json", tmp_path)
    g = s["specgauge"]
    assert g["dialect"] == "sglang" and s["failed"] == 0
    tot = g["acceptance"]["per_request_total"]
    assert (tot["draft_tokens"], tot["accepted_tokens"]) == (18 + 20 + 16, 8 + 5 + 12)
    assert tot["source"] == "sglang:usage.completion_tokens_details"
    assert not g["acceptance"]["counters"]["available"]  # SGLang has gauges, not counters
    assert g["acceptance"]["server_gauges"] == {"sglang:spec_accept_length": 2.5, "sglang:spec_accept_rate": 0.4}
    assert s["spec_decode_accepted_tokens"] == 25 and s["spec_decode_num_drafts"] is None
    assert s["total_output_tokens"] == 12 + 20 + 16
    assert g["latency"]["token_count_sources"] == {"usage": 3}
    assert g["memory"]["kv_cache"]["kv_cache_usage"] == 0.03


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json") if not p.name.startswith("sglang_synth")))
def test_real_recordings_acceptance_equals_counters(name: str, tmp_path: Path) -> None:
    s = replay(name, tmp_path)
    acc = s["specgauge"]["acceptance"]
    assert s["failed"] == 0
    assert acc["agreement"]["compared"] and acc["agreement"]["equal"], acc["agreement"]


def _llamacpp_chat_events(n_content: int) -> list[str]:
    """The shape llama-server b11434 streams for a chat that ends on a stop token (seen live): one
    event per token with ``timings.predicted_n``, a finish event without timings, then a choice-less
    event whose usage and ``predicted_n`` count the stop token too."""
    ev = []
    for i in range(1, n_content + 1):
        ev.append({"choices": [{"finish_reason": None, "index": 0, "delta": {"content": f"w{i} "}}], "object": "chat.completion.chunk",
                   "timings": {"predicted_n": i, "draft_n": 4 * (i // 3), "draft_n_accepted": i // 3}})
    ev.append({"choices": [{"finish_reason": "stop", "index": 0, "delta": {}}], "object": "chat.completion.chunk"})
    ev.append({"choices": [], "object": "chat.completion.chunk",
               "usage": {"completion_tokens": n_content + 1, "prompt_tokens": 9, "total_tokens": n_content + 10},
               "timings": {"predicted_n": n_content + 1, "draft_n": 8, "draft_n_accepted": 2}})
    return ["data: " + json.dumps(e) + "\n\n" for e in ev] + ["data: [DONE]\n\n"]


def test_llamacpp_stop_token_counted_as_a_token_only_chunk(tmp_path: Path) -> None:
    from specgauge.records import ResultsFile, TokenCountSource

    rec = {"metrics_before": "", "metrics_after": "", "get": {"/v1/models": {"data": [{"id": "m"}]}},
           "responses": [{"chunks": _llamacpp_chat_events(6)}]}
    w = tmp_path / "w.jsonl"
    w.write_text(json.dumps({"id": "c", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}) + "\n")
    with FakeServer(recording=rec) as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", progress=False, dialect="llamacpp"))
    (r,) = ResultsFile(tmp_path / "o" / "results.jsonl").existing()
    assert res.summary["failed"] == 0
    assert r.token_counts is TokenCountSource.timings  # exact, not "spread"
    assert [c.n for c in r.chunks] == [1] * 7 and r.output_tokens == 7
    assert r.text == "w1 w2 w3 w4 w5 w6 " and r.finish_reason == "stop"
    assert r.spec is not None and (r.spec.draft_tokens, r.spec.accepted_tokens) == (8, 2)
