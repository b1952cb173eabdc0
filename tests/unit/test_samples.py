"""The built-in sample workload: shape, determinism, limits, schema validity, and real prompt copying."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from typing import Any

import pytest

from specgauge.workload.samples import (
    LANGS, SEGMENTS, corpus_texts, generate_pairs, render_text, sample_path, write_sample,
)
from specgauge.workload.samples._common import has_batchim, josa
from specgauge.workload.samples.generate import MAX_ANSWER_CHARS, MAX_PROMPT_CHARS, main, prompt_chars
from specgauge.workload.schema import Request

HANGUL = re.compile(r"[\uac00-\ud7a3]")
WORD = re.compile(r"\w+")


@pytest.fixture(scope="module")
def pairs() -> list[tuple[dict[str, Any], str]]:
    return list(generate_pairs())


def _lines(seed: int, per_cell: int) -> list[str]:
    return [json.dumps(line, ensure_ascii=False) for line, _ in generate_pairs(seed, per_cell)]


def _prompt_text(line: dict[str, Any]) -> str:
    """What a server renders into the prompt: turn texts, tool-call arguments and the tool schemas."""
    parts = [m.get("content") or "" for m in line["messages"]]
    for m in line["messages"]:
        for call in m.get("tool_calls") or []:
            parts.append(call["function"]["name"] + " " + call["function"]["arguments"])
    if line.get("tools"):
        parts.append(json.dumps(line["tools"], ensure_ascii=False))
    return "\n".join(parts)


def _trigrams(text: str) -> list[tuple[str, ...]]:
    w = WORD.findall(text.lower())
    return [tuple(w[i:i + 3]) for i in range(len(w) - 2)]


def _copy_share(answer: str, prompt: str) -> float:
    """Share of the answer's word trigrams that already occur in the prompt."""
    a, p = _trigrams(answer), set(_trigrams(prompt))
    return sum(t in p for t in a) / len(a) if a else 0.0


def test_same_seed_same_bytes_different_seed_differs() -> None:
    a, b, c = _lines(7, 3), _lines(7, 3), _lines(8, 3)
    assert a == b
    assert a != c
    assert len(set(a) & set(c)) == 0  # a new seed changes every request, not just the order


def test_counts_cells_and_unique_ids(pairs: list[tuple[dict[str, Any], str]]) -> None:
    assert len(pairs) >= 200
    cells = Counter((line["segment"], line["metadata"]["lang"]) for line, _ in pairs)
    assert set(cells) == {(s, lang) for s in SEGMENTS for lang in LANGS}
    assert set(cells.values()) == {24}
    ids = [line["id"] for line, _ in pairs]
    assert len(set(ids)) == len(ids)
    assert all(line["metadata"]["generator"] == "specgauge-sample-v1" for line, _ in pairs)


def test_segments_are_interleaved(pairs: list[tuple[dict[str, Any], str]]) -> None:
    first_40 = {line["segment"] for line, _ in pairs[:40]}
    assert first_40 == set(SEGMENTS)


def test_korean_requests_are_written_in_hangul(pairs: list[tuple[dict[str, Any], str]]) -> None:
    for line, answer in pairs:
        user = next(m["content"] for m in line["messages"] if m["role"] == "user")
        system = line["messages"][0]["content"]
        if line["metadata"]["lang"] == "ko":
            assert len(HANGUL.findall(user)) >= 5, line["id"]
            assert len(HANGUL.findall(system)) >= 10, line["id"]
            assert len(HANGUL.findall(_prompt_text(line))) >= 30, line["id"]
            if not answer.startswith("<tool_call>"):
                assert len(HANGUL.findall(answer)) >= 10, line["id"]
        else:
            assert not HANGUL.search(_prompt_text(line) + answer), line["id"]


def test_arrivals_poisson_like(pairs: list[tuple[dict[str, Any], str]]) -> None:
    times = [line["arrival_time"] for line, _ in pairs]
    assert times[0] > 0
    assert all(b > a for a, b in zip(times, times[1:]))
    rate = len(times) / times[-1]
    assert 3.0 < rate < 5.5  # ~4 req/s
    gaps = [b - a for a, b in zip(times, times[1:])]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.7 < cv < 1.3  # exponential gaps have a coefficient of variation of 1


def test_sampling_parameters(pairs: list[tuple[dict[str, Any], str]]) -> None:
    greedy_by_cell: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for line, _ in pairs:
        assert 64 <= line["max_tokens"] <= 512
        assert isinstance(line["seed"], int)
        t, p = line["temperature"], line["top_p"]
        if t == 0.0:
            assert p == 1.0
        else:
            assert 0.3 <= t <= 1.0 and 0.9 <= p <= 1.0
        greedy_by_cell[(line["segment"], line["metadata"]["lang"])].append(t == 0.0)
    for cell, flags in greedy_by_cell.items():
        assert 0.5 <= sum(flags) / len(flags) <= 0.7, cell
    # max_tokens differ by segment: tool calls are short, log analyses long
    mean_mt = {s: statistics.mean(l["max_tokens"] for l, _ in pairs if l["segment"] == s) for s in SEGMENTS}
    assert mean_mt["tool_calling"] < mean_mt["support_summary"] < mean_mt["agent_logs"]


def test_size_limits(pairs: list[tuple[dict[str, Any], str]]) -> None:
    sizes = [prompt_chars(line["messages"], line.get("tools")) for line, _ in pairs]
    assert max(sizes) <= MAX_PROMPT_CHARS
    assert 300 <= statistics.median(sizes) <= 1500
    assert max(len(a) for _, a in pairs) <= MAX_ANSWER_CHARS
    assert min(len(a) for _, a in pairs) > 20


def test_tool_calling_requests(pairs: list[tuple[dict[str, Any], str]]) -> None:
    for line, answer in pairs:
        if line["segment"] != "tool_calling":
            assert "tools" not in line and "tool_choice" not in line
            continue
        assert line["tool_choice"] == "auto"
        names = set()
        for tool in line["tools"]:
            assert tool["type"] == "function"
            fn = tool["function"]
            assert re.fullmatch(r"[a-z_]+", fn["name"]) and fn["description"]
            params = fn["parameters"]
            assert params["type"] == "object" and params["properties"]
            assert set(params["required"]) <= set(params["properties"])
            for spec in params["properties"].values():
                assert spec["type"] in ("string", "number", "integer", "boolean", "object", "array")
            names.add(fn["name"])
        assert len(names) == len(line["tools"])
        msgs = line["messages"]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"]
        calls = [m for m in msgs if m["role"] == "assistant" and m.get("tool_calls")]
        assert calls, line["id"]
        for i, m in enumerate(msgs):
            for call in m.get("tool_calls") or []:
                assert call["function"]["name"] in names
                json.loads(call["function"]["arguments"])
                assert msgs[i + 1]["role"] == "tool" and msgs[i + 1]["tool_call_id"] == call["id"]
                json.loads(msgs[i + 1]["content"])
        if answer.startswith("<tool_call>"):
            body = json.loads(answer.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            spec = next(t["function"] for t in line["tools"] if t["function"]["name"] == body["name"])
            assert set(spec["parameters"]["required"]) <= set(body["arguments"])


def test_shipped_file_equals_fresh_generation(tmp_path: Any) -> None:
    out = tmp_path / "sample.jsonl"
    n = write_sample(out)
    assert n == 240
    assert sample_path().is_file(), "run: python -m specgauge.workload.samples.generate"
    assert sample_path().read_bytes() == out.read_bytes(), "regenerate: python -m specgauge.workload.samples.generate"


def test_every_line_is_a_valid_request() -> None:
    known = set(Request.model_fields) - {"api", "extra"}
    with sample_path().open(encoding="utf-8") as fh:
        rows = [json.loads(raw) for raw in fh]
    for row in rows:
        fields = {k: v for k, v in row.items() if k in known}
        extra = {k: v for k, v in row.items() if k not in known}
        req = Request(api="chat", extra=extra, **fields)
        assert req.segment in SEGMENTS
        assert req.body()["messages"][0]["role"] == "system"
        assert req.prompt_text()


def test_answers_copy_from_their_prompts(pairs: list[tuple[dict[str, Any], str]]) -> None:
    """Real answers quote their prompt; pairing each answer with another prompt of the same segment and
    language (a shuffled control) shows how much of that is template phrasing rather than copying."""
    by_cell: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for line, answer in pairs:
        by_cell[(line["segment"], line["metadata"]["lang"])].append((_prompt_text(line), answer))
    real: dict[str, list[float]] = defaultdict(list)
    control: dict[str, list[float]] = defaultdict(list)
    for (segment, _), items in by_cell.items():
        for i, (prompt, answer) in enumerate(items):
            real[segment].append(_copy_share(answer, prompt))
            control[segment].append(_copy_share(answer, items[(i + 7) % len(items)][0]))
    r = {s: statistics.mean(v) for s, v in real.items()}
    c = {s: statistics.mean(v) for s, v in control.items()}
    for segment in SEGMENTS:
        assert r[segment] > c[segment] + 0.1, (segment, r[segment], c[segment])
    for segment in ("rag_answer", "code_review"):  # the quoting segments copy most
        assert r[segment] >= 0.3 and r[segment] > c[segment] + 0.2, (segment, r[segment], c[segment])
    assert r["rag_answer"] > r["support_summary"] and r["agent_logs"] > r["support_summary"]


def test_corpus_texts_deterministic_and_disjoint_from_sample(pairs: list[tuple[dict[str, Any], str]]) -> None:
    docs = list(corpus_texts(seed=1, n=40))
    assert docs == list(corpus_texts(seed=1, n=40))
    assert docs != list(corpus_texts(seed=2, n=40))
    assert len(docs) == 40 and len(set(docs)) == 40
    assert sum(bool(HANGUL.search(d)) for d in docs) == 20  # segments x languages cycle evenly
    for d in docs:
        assert d.startswith("System: ") and "\n\nUser: " in d and "\n\nAssistant: " in d
    assert any("\n\nTool: " in d and "<tool_call>" in d for d in docs)
    sample_docs = {render_text(line["messages"], answer, line.get("tools")) for line, answer in pairs}
    assert not sample_docs & set(corpus_texts(seed=0, n=240))


def test_cli_writes_file_and_rejects_bad_input(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.jsonl"
    assert main(["--out", str(out), "--per-cell", "2", "--seed", "5"]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == _lines(5, 2)
    assert "wrote 20 requests" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(out), "--per-cell", "0"])
    assert exc.value.code == 2
    assert "--per-cell must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "missing" / "s.jsonl")])
    with pytest.raises(ValueError, match="per_cell must be a positive integer"):
        next(generate_pairs(per_cell=0))


def test_korean_particles() -> None:
    assert (josa("공유기", "이", "가"), josa("이어폰", "이", "가")) == ("가", "이")
    assert (josa("플러스 멤버십", "을", "를"), josa("오로라 라이트 스탠드", "을", "를")) == ("을", "를")
    assert has_batchim("v3.0.1") and not has_batchim("v3.0.2")
