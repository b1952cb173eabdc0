"""Honest labels and tool calls in ``profile`` (and simulate's exactness note), on hand-made logs
with known answers: token counts are exact only from logged ids / usage or from the tokenizer of the
model each request names; which tokenizer counted is always said; tool calls count in OpenAI and
text form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specgauge.api import profile
from specgauge.simulate.run import SimulateConfig, simulate
from specgauge.workload.loaders import LoadOptions
from specgauge.workload.profile import profile_workload, text_tool_call_parses
from specgauge.workload.samples import sample_logged_path
from specgauge.workload.schema import ApiKind, Request, WorkloadItem
from specgauge.workload.tokenizer import ApproxTokenizer, HFTokenizer, model_match
from tests.unit.test_profile import make_hf_tokenizer_dir


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat(text: str, model: str | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], **extra}
    if model is not None:
        body["model"] = model
    return body


@pytest.fixture()
def tok_dir(tmp_path: Path) -> Path:
    d = tmp_path / "tok"
    d.mkdir()
    return make_hf_tokenizer_dir(d)


def test_the_named_models_tokenizer_counts_exactly(tmp_path: Path, tok_dir: Path) -> None:
    w = write(tmp_path / "w.jsonl", [{"request": chat("the cat", "org/tok"), "response": {"text": "hello"}},
                                     {"request": chat("hello world", "TOK")}])
    p, _ = profile([w], LoadOptions(), str(tok_dir))
    tc = p.token_counting
    assert p.exact_tokens and tc is not None and tc.label == "exact"
    assert tc.requests_counted_by_tokenizer == 2 and tc.tokenizer_is_models == {"own": 2}
    assert tc.tokenizer == "hf:tok" and "the tokenizer of the model they name" in tc.reason
    assert not any("approximate" in n for n in p.overall.notes)


def test_another_models_tokenizer_is_approximate_and_named(tmp_path: Path, tok_dir: Path) -> None:
    w = write(tmp_path / "w.jsonl", [{"request": chat("the cat", "meta-llama/Llama-3.1-8B-Instruct"), "response": {"text": "hello"}},
                                     {"request": chat("the cat", "tok")}])
    p, _ = profile([w], LoadOptions(), str(tok_dir))
    tc = p.token_counting
    assert not p.exact_tokens and tc is not None and tc.label == "approximate"
    assert tc.tokenizer_is_models == {"other": 1, "own": 1}
    assert tc.models == {"meta-llama/Llama-3.1-8B-Instruct": 1, "tok": 1}
    assert "hf:tok" in tc.reason and "another model (meta-llama/Llama-3.1-8B-Instruct)" in tc.reason
    assert any(n.startswith("token counts approximate") and "hf:tok" in n for n in p.overall.notes)


def test_no_model_named_is_unknown_hence_approximate(tmp_path: Path, tok_dir: Path) -> None:
    w = write(tmp_path / "w.jsonl", [{"request": chat("the cat"), "response": {"text": "hello"}}])
    p, _ = profile([w], LoadOptions(), str(tok_dir))
    tc = p.token_counting
    assert not p.exact_tokens and tc is not None and tc.tokenizer_is_models == {"unknown": 1} and tc.models == {}
    assert "name no model" in tc.reason and "hf:tok" in tc.reason


def test_logged_ids_and_usage_stay_exact_whatever_the_model(tmp_path: Path, tok_dir: Path) -> None:
    w = write(tmp_path / "w.jsonl", [
        {"request": chat("the cat", "someone-else"), "response": {"text": "x", "prompt_token_ids": [1, 2, 3], "output_token_ids": [4]}},
        # prompt ids logged, output counted by usage: nothing left to the tokenizer
        {"request": chat("the cat"), "response": {"text": "the cat", "prompt_token_ids": [1, 2], "usage": {"completion_tokens": 7}}},
    ])
    p, _ = profile([w], LoadOptions(), str(tok_dir))
    assert p.exact_tokens and p.token_counting is not None and p.token_counting.requests_counted_by_tokenizer == 0
    assert p.token_sources == {"prompt: log": 2, "output: log": 1, "output: usage": 1}
    assert p.overall.output_tokens.max == 7


def test_recorded_name_or_path_and_the_servers_model_field_identify_the_model(tmp_path: Path, tok_dir: Path) -> None:
    cfg = json.loads((tok_dir / "tokenizer_config.json").read_text())
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({**cfg, "name_or_path": "Qwen/Qwen3-8B"}))
    tok = HFTokenizer(tok_dir)
    assert model_match(tok, "qwen3-8b") and model_match(tok, "tok") and model_match(tok, "llama") is False
    assert model_match(tok, None) is None and model_match(ApproxTokenizer(), "tok") is False
    # no model in the request body: the logged chat.completion's own "model" names it
    resp = {"object": "chat.completion", "model": "Qwen3-8B",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}
    w = write(tmp_path / "w.jsonl", [{"request": chat("the cat"), "response": resp}])
    p, _ = profile([w], LoadOptions(), str(tok_dir))
    assert p.exact_tokens and p.token_counting is not None and p.token_counting.models == {"Qwen3-8B": 1}


def test_the_shipped_default_tokenizer_says_so_and_is_exact_only_for_the_shipped_model(tmp_path: Path) -> None:
    pytest.importorskip("specgauge.models")
    w = write(tmp_path / "w.jsonl", [{"request": chat("hello there", "meta-llama/Llama-3.1-8B-Instruct"), "response": {"text": "hi"}}])
    p, _ = profile([w], LoadOptions(), None)
    tc = p.token_counting
    if p.tokenizer == "approx:words":
        pytest.skip("the shipped tokenizer is absent")
    assert not p.exact_tokens and tc is not None and "shipped tiny model's tokenizer" in tc.tokenizer
    assert "another model" in tc.reason
    w2 = write(tmp_path / "w2.jsonl", [{"request": chat("hello there", "tiny-target"), "response": {"text": "hi"}}])
    p2, _ = profile([w2], LoadOptions(), None)
    assert p2.exact_tokens  # a log of the shipped model itself (e.g. from `specgauge serve`)


def test_approximation_tokenizer_is_approximate_even_for_a_named_model() -> None:
    r = Request(id="1", api=ApiKind.chat, messages=[{"role": "user", "content": "a b"}], extra={"model": "x"})  # type: ignore[list-item]
    p = profile_workload([WorkloadItem(request=r)], ApproxTokenizer())
    assert not p.exact_tokens and p.token_counting is not None and "approx:words" in p.token_counting.reason


def test_simulate_note_names_the_tokenizer_and_whose_it_is(tmp_path: Path, tok_dir: Path) -> None:
    w = write(tmp_path / "w.jsonl", [
        {"request": chat("hello world hello world", "tok"), "response": {"text": "hello world hello world"}},
        {"request": chat("hello world hello world", "llama"), "response": {"text": "hello world hello world"}},
        {"request": chat("hello world hello world"), "response": {"text": "hello world hello world"}},
    ])
    r = simulate(SimulateConfig(workload=[w], methods=["ngram"], ks=[2]), HFTokenizer(tok_dir))
    assert not r.exact and r.tokenizer == "hf:tok"
    note = next(n for n in r.notes if "re-tokenised" in n)
    assert "3 request(s)" in note and "hf:tok" in note
    assert "1 name its model" in note and "1 name another model" in note and "1 name no model" in note


# ---------------------------------------------------------------------------- tool calls

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def tool_rows() -> list[dict[str, Any]]:
    openai_call = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}}]}
    return [
        {"request": chat("weather?", tools=TOOLS), "response": openai_call},  # OpenAI form
        {"request": chat("weather?", tools=TOOLS),  # hermes, well-formed
         "response": {"text": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul"}}\n</tool_call>'}},
        {"request": chat("weather?", tools=TOOLS),  # hermes, cut at max_tokens before it closed
         "response": {"text": '<tool_call>\n{"name": "get_weather", "argum', "finish_reason": "length"}},
        {"request": chat("weather?", tools=TOOLS), "response": {"text": "It is sunny."}},  # offered, not called
        {"request": chat("weather?"), "response": {"text": '[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]'}},  # Mistral, not offered
        {"request": chat("what is a tool_call tag?"), "response": {"text": "A tool_call tag wraps JSON."}},  # no call: no tag
        {"request": chat("weather?", tools=TOOLS)},  # offered, no logged response
    ]


def test_tool_calls_in_openai_and_text_form_known_answers(tmp_path: Path) -> None:
    w = write(tmp_path / "w.jsonl", tool_rows())
    p, _ = profile([w], LoadOptions(), None)
    o = p.overall
    assert o.requests == 7 and o.with_logged_response == 6
    assert o.tools_share == pytest.approx(5 / 7)  # requests offering tools
    assert o.tool_call_share == pytest.approx(4 / 6)  # responses calling one: openai, hermes x2, mistral
    assert o.tool_call_share_when_offered == pytest.approx(3 / 4)  # 4 logged responses to offering requests
    assert (o.tool_calls_openai, o.tool_calls_text, o.tool_calls_text_parsed) == (1, 3, 1)


def test_text_tool_call_parsing() -> None:
    ok = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert text_tool_call_parses(ok) and text_tool_call_parses(ok + "\n" + ok)
    assert not text_tool_call_parses(ok + "<tool_call>{")  # the second one never closed
    assert not text_tool_call_parses('<tool_call>{"arguments": {}}</tool_call>')  # no name
    assert not text_tool_call_parses("<tool_call>not json</tool_call>")


def test_the_shipped_sample_logs_tool_segment_shows_a_real_share() -> None:
    path = sample_logged_path()
    if not path.is_file():
        pytest.skip("the shipped sample logs are absent")
    p, _ = profile([path], LoadOptions(), None)
    tools = p.segments["tool_calling"]
    # every tool-calling request offers tools; most of the tiny target's logged replies open a <tool_call>
    # (often cut at max_tokens before it closes), the others answer in prose
    assert tools.tools_share == 1.0 and tools.tool_call_share is not None and tools.tool_call_share >= 0.5
    assert tools.tool_calls_text > 0 and tools.tool_calls_openai == 0
    assert tools.tool_call_share == tools.tool_call_share_when_offered
    assert all(s.tool_call_share == 0 for name, s in p.segments.items() if name != "tool_calling")
