"""The newcomer's first hour (issue 40), played through the real entry point (``python -m specgauge``): a
small chat log of their own — text replies, replies that are OpenAI tool calls only, Korean — then
profile → simulate → serve (the embedded server, without and with speculation, as vLLM runs by default:
no per-request metrics) → bench each → compare → report, asserting what the person reads: the labels
(approximate, never EXACT without token ids; tool calls counted and replayed; Korean counted as Korean;
the speedup a guess until calibrated), the verdict (too few pairs is INCONCLUSIVE, exit 3; greedy outputs
unchanged under speculation), the report written. Nothing here depends on this machine's speed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.models import available, target_dir
from specgauge.servers import embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="shipped tiny models missing")]

ROOT = Path(__file__).parents[2]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]


def _chat(i: int, messages: list[dict], reply: dict, tools: bool = False) -> dict:
    """One logged exchange as an OpenAI chat completion log line: the request, and the response as returned."""
    req = {"id": f"req-{i}", "model": "tiny-target", "temperature": 0, "max_tokens": 64, "messages": messages}
    if tools:
        req["tools"] = TOOLS
    finish = "tool_calls" if reply.get("tool_calls") else "stop"
    return {"request": req, "response": {"id": f"chatcmpl-{i}", "object": "chat.completion", "model": "tiny-target",
                                         "choices": [{"index": 0, "message": {"role": "assistant", **reply}, "finish_reason": finish}]}}


def newcomer_log(path: Path) -> Path:
    """Eight exchanges: English text replies that copy from their prompt (two with a "Context:" system
    message), two replies that are tool calls only (content null), three Korean questions with Korean
    replies. No token ids: what most logs hold."""
    policy = ("Refunds are issued to the original payment method within 3 business days after the warehouse "
              "inspects the item. Return shipping is free for orders over $100.")
    rows = [
        _chat(0, [{"role": "system", "content": "Answer from the context only.\n\nContext:\n" + policy},
                  {"role": "user", "content": "How long do refunds take?"}],
              {"content": "Refunds are issued to the original payment method within 3 business days after the warehouse "
                          "inspects the item."}),
        _chat(1, [{"role": "user", "content": "Where is order ORD-2419?"}],
              {"content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                "function": {"name": "get_order", "arguments": '{"order_id": "ORD-2419"}'}}]},
              tools=True),
        _chat(2, [{"role": "user", "content": "환불은 언제 되나요?"}],
              {"content": "환불은 창고에서 상품을 검수한 뒤 영업일 기준 3일 안에 원래 결제 수단으로 처리됩니다."}),
        _chat(3, [{"role": "user", "content": "Summarise: the cat sat on the mat. the cat sat on the mat."}],
              {"content": "The cat sat on the mat, twice."}),
        _chat(4, [{"role": "user", "content": "And order ORD-3321?"}],
              {"content": None, "tool_calls": [{"id": "call_2", "type": "function",
                                                "function": {"name": "get_order", "arguments": '{"order_id": "ORD-3321"}'}}]},
              tools=True),
        _chat(5, [{"role": "user", "content": "배송지를 바꿀 수 있나요?"}],
              {"content": "네, 출고 전이라면 주문 상세 화면에서 배송지를 바꿀 수 있습니다."}),
        _chat(6, [{"role": "system", "content": "Context:\n" + policy},
                  {"role": "user", "content": "Is return shipping free?"}],
              {"content": "Return shipping is free for orders over $100."}),
        _chat(7, [{"role": "user", "content": "주문 ORD-2419 상태 알려줘"}],
              {"content": "주문 ORD-2419는 배송 중입니다."}),
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "specgauge", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env=env)


def _read(r: subprocess.CompletedProcess[str]) -> str:
    """What the person reads: stdout and stderr, table wrapping undone."""
    return " ".join((r.stdout + "\n" + r.stderr).split())


def _figure(text: str, label: str) -> float:
    m = re.search(re.escape(label) + r"\s+([\d.,]+)", text)
    assert m, f"{label!r} not in the bench summary"
    return float(m.group(1).replace(",", ""))


def test_my_logs_then_my_server(tmp_path: Path) -> None:
    log = newcomer_log(tmp_path / "my_logs.jsonl")

    # 1. what does my traffic look like?
    prof = cli("profile", str(log))
    assert prof.returncode == 0, prof.stderr
    seen = _read(prof)
    assert "en:5 ko:3" in seen  # the short Korean question with an order id counts as Korean
    assert "2 as OpenAI tool_calls (2 with well-formed JSON arguments), 0 as text" in seen
    # T=0, top_p<1, tools offered, tool calls, RAG context (the two "Context:" system messages)
    assert "│ overall │ 100.0% │ 0.0% │ 25.0% │ 25.0% │ 25.0% │" in seen
    (tmp_path / "profile.json").write_text(cli("profile", str(log), "--json").stdout)

    # 2. what would speculation accept on it? (no token ids: approximate, and said so)
    sim = cli("simulate", str(log), "-m", "ngram,suffix", "-k", "2,4")
    assert sim.returncode == 0, sim.stderr
    seen = _read(sim)
    assert "(8 replayed)" in seen and "EXACT" not in seen and "acceptance APPROXIMATE" in seen
    assert "2 logged response(s) held OpenAI tool_calls: replayed as the text hf:tiny-target's chat template" in seen
    assert "empty logged output" not in seen and "guess B=1" in seen and "speedup B=" not in seen
    sim_json = cli("simulate", str(log), "-m", "ngram,suffix", "-k", "2,4", "--json")
    res = json.loads(sim_json.stdout)
    assert res["exact"] is False and res["requests_replayed"] == 8
    (tmp_path / "sim.json").write_text(sim_json.stdout)

    # 3. my server, without and with speculation (the embedded one: specgauge serve, vLLM's flags)
    base_out, spec_out = tmp_path / "baseline", tmp_path / "ngram-k3"
    with embedded_server(target_dir(), tmp_path / "base.log", None, max_batch=2, per_request_metrics=None) as base, \
            embedded_server(target_dir(), tmp_path / "spec.log", NGRAM, max_batch=2, per_request_metrics=None) as spec:
        for url, out in ((base.base_url, base_out), (spec.base_url, spec_out)):
            b = cli("bench", "--base-url", url, "-w", str(log), "-o", str(out), "--num-prompts", "8", "--max-tokens", "16",
                    "--max-concurrency", "2")
            assert b.returncode == 0, b.stderr
            seen = _read(b)
            assert _figure(seen, "Peak output token throughput (tok/s):") >= _figure(seen, "Output token throughput (tok/s):")
            assert "Total generated tokens:" in seen and _figure(seen, "Total generated tokens:") <= 8 * 16
    assert "Replay check (ngram, k=3): the run's totals agree with the replay of its outputs" in seen
    assert not re.search(r"\b0 of \d+ requests equal", seen)

    # 4. does it pay? too few pairs to judge is INCONCLUSIVE (exit 3), whatever this machine's speed
    cmp = cli("compare", str(base_out), str(spec_out))
    assert cmp.returncode == 3, cmp.stdout + cmp.stderr
    seen = _read(cmp)
    assert "INCONCLUSIVE" in seen and "only 8 paired requests; at least 10 are needed to judge" in seen
    assert "all 8 temperature-0 outputs match the baseline exactly" in seen  # lossless: greedy outputs unchanged
    (tmp_path / "compare.json").write_text(cli("compare", str(base_out), str(spec_out), "--json").stdout)

    # 5. one page to share
    rep = cli("report", str(base_out), str(spec_out), str(tmp_path / "compare.json"), str(tmp_path / "sim.json"),
              str(tmp_path / "profile.json"), "-o", str(tmp_path / "report.html"))
    assert rep.returncode == 0, rep.stderr
    from tests.unit.test_report_ko_sections import page_text

    page = " ".join(page_text((tmp_path / "report.html").read_text(encoding="utf-8")).split())
    assert "INCONCLUSIVE" in page and "all 8 temperature-0 outputs match the baseline exactly" in page
    assert "APPROXIMATE: re-tokenised text)" in page and "EXACT" not in page  # the acceptance table says approximate
    assert "uncalibrated guess" in (tmp_path / "report.html").read_text(encoding="utf-8")  # the predicted-speedup figure
