"""Every loader round-trips its format; bad input gets FILE:LINE messages."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from specgauge.workload.detect import detect_format
from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload, load_workload
from specgauge.workload.reader import WorkloadError
from specgauge.workload.schema import ApiKind

CHAT = {
    "id": "c1",
    "segment": "rag",
    "model": "m",
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "question?"}],
    "max_tokens": 64,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 20,
    "seed": 7,
    "stop": ["\n\n"],
    "presence_penalty": 0.1,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "tool_choice": "auto",
    "arrival_time": 1.5,
    "metadata": {"team": "search"},
}


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_openai_bare_body_round_trips(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "w.jsonl", [CHAT, {"prompt": "abc", "max_completion_tokens": 5}])
    a, b = load_workload([p])
    assert a.request.api is ApiKind.chat and a.request.segment == "rag" and a.request.top_k == 20
    assert a.request.extra == {"model": "m", "presence_penalty": 0.1}
    assert a.request.arrival_time == 1.5 and a.request.metadata == {"team": "search"}
    body = a.request.body(model="m")
    for k in ("messages", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "tools", "tool_choice", "presence_penalty"):
        assert body[k] == CHAT[k], k
    assert b.request.api is ApiKind.completion and b.request.max_tokens == 5 and b.request.id == "w.jsonl:2"
    assert a.source == f"{p}:1"


def test_openai_pair_with_vllm_extras(tmp_path: Path) -> None:
    resp = {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [4, 5, 6],
                     "message": {"role": "assistant", "content": "hi",
                                 "tool_calls": [{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                     "logprobs": {"content": [{"token": "token_id:4", "logprob": -0.1,
                                               "top_logprobs": [{"token": "token_id:4", "logprob": -0.1},
                                                                {"token": "token_id:9", "logprob": -2.5}]}]}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        "prompt_token_ids": [1, 2, 3],
        "kv_transfer_params": None,
    }
    p = write_jsonl(tmp_path / "pairs.jsonl", [{"request": CHAT, "response": resp}])
    (item,) = load_workload([p])
    r = item.response
    assert r is not None
    assert r.output_token_ids == [4, 5, 6] and r.prompt_token_ids == [1, 2, 3]
    assert r.usage and r.usage.completion_tokens == 3 and r.finish_reason == "stop"
    assert r.tool_calls and r.tool_calls[0]["function"]["name"] == "f"
    assert r.top_logprobs == [{4: -0.1, 9: -2.5}]
    assert r.extra["kv_transfer_params"] is None and r.extra["id"] == "chatcmpl-1"


def test_compact_response_pair(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "c.jsonl", [{"request": {"prompt": "x"}, "response": {"text": "y", "output_token_ids": [1]}}])
    (item,) = load_workload([p])
    assert item.response and item.response.output_token_ids == [1]


def test_batch_input_output_joined(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "1"}]}},
        {"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "2", "max_tokens": 3}},
    ])
    out_rows = [
        {"id": "x2", "custom_id": "b", "response": {"status_code": 200, "body": {"object": "text_completion", "choices": [{"text": "two", "finish_reason": "length"}]}}},
        {"id": "x1", "custom_id": "a", "response": {"status_code": 200, "body": {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "one"}}]}}},
    ]
    out = tmp_path / "out.jsonl.gz"
    out.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in out_rows).encode()))
    assert detect_format(inp) == "batch" and detect_format(out) == "batch-output"
    a, b = load_workload([inp, out])
    assert (a.request.id, a.request.api, a.response and a.response.text) == ("a", ApiKind.chat, "one")
    assert (b.request.id, b.request.api, b.response and b.response.text) == ("b", ApiKind.completion, "two")
    with pytest.raises(WorkloadError, match="needs its input file"):
        load_workload([out])


def test_sharegpt_jsonl_and_array(tmp_path: Path) -> None:
    convo = {"id": "s1", "conversations": [{"from": "system", "value": "be nice"}, {"from": "human", "value": "hi"},
                                            {"from": "gpt", "value": "hello"}, {"from": "human", "value": "more"},
                                            {"from": "gpt", "value": "sure"}]}
    jl = write_jsonl(tmp_path / "s.jsonl", [convo])
    arr = tmp_path / "s.json"
    arr.write_text(json.dumps([convo, {**convo, "id": "s2"}]))
    (a,) = load_workload([jl])
    assert [m.role for m in a.request.messages or []] == ["system", "user", "assistant", "user"]
    assert a.response and a.response.text == "sure"
    items = load_workload([arr])
    assert [i.request.id for i in items] == ["s1", "s2"] and detect_format(arr) == "sharegpt"
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"conversations": [{"from": "alien", "value": "x"}]}])
    with pytest.raises(WorkloadError, match=r"bad.jsonl:1: conversations.0.from: unknown speaker"):
        load_workload([bad])


def test_vllm_custom_and_text(tmp_path: Path) -> None:
    c = write_jsonl(tmp_path / "c.jsonl", [{"prompt": "tell me", "output_tokens": 42}])
    (a,) = load_workload([c])
    assert a.request.max_tokens == 42 and a.request.messages and a.request.messages[0].content == "tell me"
    t = tmp_path / "p.txt"
    t.write_text("first prompt\n\nsecond 프롬프트\n", encoding="utf-8")
    items = load_workload([t])
    assert [i.request.prompt_text() for i in items] == ["first prompt", "second 프롬프트"]
    assert [i.source for i in items] == [f"{t}:1", f"{t}:3"]


@pytest.mark.parametrize("comp", ["gzip", "zstd"])
def test_compressed(tmp_path: Path, comp: str) -> None:
    data = (json.dumps(CHAT) + "\n").encode()
    p = tmp_path / "w.jsonl.x"
    p.write_bytes(gzip.compress(data) if comp == "gzip" else zstandard.ZstdCompressor().compress(data))
    (item,) = load_workload([p])
    assert item.request.id == "c1"


def test_segment_rules(tmp_path: Path) -> None:
    p = write_jsonl(tmp_path / "w.jsonl", [
        {**CHAT, "id": "1", "segment": None, "messages": [{"role": "system", "content": "You are the BILLING bot"}, {"role": "user", "content": "x"}]},
        {**CHAT, "id": "2", "segment": None, "messages": [{"role": "user", "content": "x"}]},
        {**CHAT, "id": "3", "segment": None, "tag": "tagged", "metadata": {}},
    ])
    by_re = load_workload([p], LoadOptions(segment_by=r"re:the (\w+) bot"))
    assert [i.request.segment for i in by_re] == ["BILLING", "other", "other"]
    by_field = load_workload([p], LoadOptions(segment_by="metadata.team"))
    assert [i.request.segment for i in by_field] == ["search", "search", "(none)"]
    default = load_workload([p])
    assert [i.request.segment for i in default] == ["default", "default", "tagged"]


BAD_LINES = [
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": []}, "a chat request needs a non-empty 'messages'"),
    ({"model": "m"}, "messages: missing"),
    ({"messages": "hello"}, "messages"),
    ({"prompt": "x", "top_k": 0}, "top_k"),
    ([1, 2], "expected a JSON object"),
    ({"request": {"prompt": "x"}, "response": {"choices": []}}, "response.choices: missing or empty"),
]


@pytest.mark.parametrize("row,needle", BAD_LINES)
def test_bad_lines_named(tmp_path: Path, row: object, needle: str) -> None:
    p = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok"}, row])
    with pytest.raises(WorkloadError) as e:
        load_workload([p])
    assert str(e.value).startswith(f"{p}:2: ") and needle in str(e.value)
    rep = LoadReport()
    items = list(iter_workload([p], LoadOptions(skip_invalid=True), rep))
    assert len(items) == 1 and rep.skipped == 1 and rep.items == 1


def test_file_level_problems(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(WorkloadError, match="empty workload"):
        load_workload([empty])
    trunc = tmp_path / "t.jsonl.gz"
    trunc.write_bytes(gzip.compress(("".join(json.dumps({**CHAT, "id": str(i)}) + "\n" for i in range(2000))).encode())[:1500])
    with pytest.raises(WorkloadError, match="truncated or corrupt"):
        load_workload([trunc])
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"prompt": "a"}\n\x00\x01\x02\xff\xfe garbage\n')
    with pytest.raises(WorkloadError, match=r"bin.jsonl:2: binary data"):
        load_workload([binary])
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(WorkloadError, match=r"latin.jsonl:1: not valid UTF-8"):
        load_workload([latin])
    dup = write_jsonl(tmp_path / "dup.jsonl", [CHAT, CHAT])
    with pytest.raises(WorkloadError, match=r"dup.jsonl:2: id: duplicate request id \(first seen at .*dup.jsonl:1\)"):
        load_workload([dup])
    with pytest.raises(WorkloadError, match="no such file"):
        load_workload([tmp_path / "missing.jsonl"])


def test_huge_line_is_reported_and_skippable(tmp_path: Path) -> None:
    p = tmp_path / "huge.jsonl"
    with open(p, "w") as f:
        f.write(json.dumps({"prompt": "x" * (50 * 1024 * 1024)}) + "\n")
        f.write(json.dumps({"prompt": "small"}) + "\n")
    opts = LoadOptions(max_line_bytes=1 << 20)
    with pytest.raises(WorkloadError, match=r"huge.jsonl:1: line longer than 1048576 bytes"):
        load_workload([p], opts)
    rep = LoadReport()
    items = list(iter_workload([p], opts.model_copy(update={"skip_invalid": True}), rep))
    assert [i.request.prompt for i in items] == ["small"] and rep.skipped == 1


def test_streams_without_loading_whole_file(tmp_path: Path) -> None:
    """Iteration is lazy: the first item arrives before a broken tail is ever read."""
    p = tmp_path / "lazy.jsonl"
    p.write_text(json.dumps({"prompt": "a"}) + "\n" + "{broken\n")
    it = iter_workload([p])
    assert next(it).request.prompt == "a"
    with pytest.raises(WorkloadError, match="lazy.jsonl:2: invalid JSON"):
        next(it)
