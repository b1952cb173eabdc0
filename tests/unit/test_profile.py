"""Profile figures on hand-built workloads with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from specgauge.api import profile
from specgauge.workload.loaders import LoadOptions
from specgauge.workload.profile import copy_overlap_count, profile_workload
from specgauge.workload.schema import ApiKind, Request, Response, WorkloadItem
from specgauge.workload.tokenizer import ApproxTokenizer, HFTokenizer


def item(segment: str, prompt_ids: list[int], out_ids: list[int] | None, **req: object) -> WorkloadItem:
    r = Request(id=f"{segment}-{len(prompt_ids)}-{id(out_ids)}", segment=segment, api=ApiKind.completion, prompt=prompt_ids, **req)  # type: ignore[arg-type]
    resp = Response(output_token_ids=out_ids, prompt_token_ids=prompt_ids) if out_ids is not None else None
    return WorkloadItem(request=r, response=resp)


def test_copy_overlap_count_known() -> None:
    prompt = [1, 2, 3, 4, 5, 6]
    assert copy_overlap_count(prompt, [1, 2, 3]) == 3
    assert copy_overlap_count(prompt, [9, 1, 2, 3, 9]) == 3
    assert copy_overlap_count(prompt, [1, 2, 9, 3, 4]) == 0  # no 3-gram from the prompt
    assert copy_overlap_count(prompt, [2, 3, 4, 5, 9, 9, 4, 5, 6]) == 7  # 4 + 3 covered
    assert copy_overlap_count(prompt, []) == 0 and copy_overlap_count([], [1, 2, 3]) == 0
    assert copy_overlap_count([7, 7, 7], [7, 7, 7, 7]) == 4


def test_profile_known_answers() -> None:
    items = [
        item("a", [1, 2, 3, 4], [1, 2, 3, 9], max_tokens=10, temperature=0.0),  # 3 of 4 copied
        item("a", [5, 6, 7, 8, 9, 10], [8, 8, 8, 8], max_tokens=30, temperature=0.7, top_p=0.9),  # 0 of 4
        item("b", [1, 1], None, max_tokens=20, tools=[{"type": "function", "function": {"name": "f"}}]),
    ]
    p = profile_workload(items, ApproxTokenizer())
    a, b, o = p.segments["a"], p.segments["b"], p.overall
    assert a.requests == 2 and b.requests == 1 and o.requests == 3
    assert a.copy_overlap == pytest.approx(3 / 8) and a.copy_overlap_request_mean == pytest.approx(0.375)
    assert b.copy_overlap is None and b.output_tokens.n == 0 and b.output_tokens.note == "no logged responses"
    assert a.prompt_tokens.max == 6 and a.prompt_tokens.p50 == 5
    assert o.max_tokens.p50 == 20 and o.max_tokens.max == 30
    assert a.temperature_mix == {"(0.5, 1]": 0.5, "0 (greedy)": 0.5}
    assert a.top_p_mix == {"1 / unset": 0.5, "< 1": 0.5}
    assert o.tools_share == pytest.approx(1 / 3) and b.tools_share == 1.0
    assert p.exact_tokens  # every count came from logged ids
    assert p.token_sources == {"prompt: log": 2, "prompt: request ids": 1, "output: log": 2}


def test_hangul_share_and_languages() -> None:
    def chat(i: int, text: str, out: str) -> WorkloadItem:
        r = Request(id=str(i), api=ApiKind.chat, messages=[{"role": "user", "content": text}])  # type: ignore[list-item]
        return WorkloadItem(request=r, response=Response(text=out))

    items = [chat(1, "안녕하세요 " * 4, "네 ok"), chat(2, "hello", "world"), chat(3, "def f(): return 1 # 네", "")]
    p = profile_workload(items, ApproxTokenizer())  # Hangul 20+1+1 = 22 of 23+10+11 = 44 letters
    assert p.overall.hangul_share == pytest.approx(22 / 44)
    assert p.overall.languages == {"en": 2, "ko": 1}  # one Hangul char in code is not Korean
    assert not p.exact_tokens and any("approximate" in n for n in p.overall.notes)


def test_context_and_tool_calls() -> None:
    passages = "\n".join(f"[{i}] passage number {i} " + "x" * 50 for i in range(1, 4))
    r1 = Request(id="1", api=ApiKind.chat, messages=[{"role": "system", "content": passages}, {"role": "user", "content": "q"}])  # type: ignore[list-item]
    r2 = Request(id="2", api=ApiKind.chat, messages=[{"role": "user", "content": "short"}])  # type: ignore[list-item]
    items = [
        WorkloadItem(request=r1, response=Response(text="a", tool_calls=[{"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}])),
        WorkloadItem(request=r2, response=Response(text="b")),
    ]
    p = profile_workload(items, ApproxTokenizer())
    assert p.overall.context_share == 0.5 and p.overall.tool_call_share == 0.5
    assert p.overall.context_char_share == pytest.approx(len(passages) / (len(passages) + 1 + 1 + 5))


def make_hf_tokenizer_dir(d: Path) -> Path:
    words = ["<s>", "</s>", "hello", "world", "user", "assistant", ":", "\n", "the", "cat"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(d / "tokenizer.json"))
    tmpl = "{{ bos_token }} {% for m in messages %}{{ m['role'] }} : {{ m['content'] }} \n {% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"
    (d / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": tmpl}))
    return d


def test_hf_tokenizer_applies_chat_template(tmp_path: Path) -> None:
    tok = HFTokenizer(make_hf_tokenizer_dir(tmp_path))
    r = Request(id="1", api=ApiKind.chat, messages=[{"role": "user", "content": "hello world"}])  # type: ignore[list-item]
    # lstrip_blocks drops the blank before {% endfor %}, as transformers' renderer does
    assert tok.render_chat(r) == "<s> user : hello world \nassistant :"
    assert tok.encode_request(r) == [0, 4, 6, 2, 3, 5, 6]


def test_profile_end_to_end_with_tokenizer(tmp_path: Path) -> None:
    d = make_hf_tokenizer_dir(tmp_path / "tok") if (tmp_path / "tok").mkdir() is None else None
    w = tmp_path / "w.jsonl"
    w.write_text(json.dumps({"request": {"model": "tok", "messages": [{"role": "user", "content": "the cat"}]},
                             "response": {"text": "the cat hello"}}) + "\n")
    prof, rep = profile([w], LoadOptions(), str(d))
    assert prof.tokenizer == "hf:tok" and prof.exact_tokens  # the workload names the tokenizer's own model
    # prompt "<s> user : the cat \nassistant :" = 7 tokens; output "the cat hello" = 3
    assert prof.overall.prompt_tokens.max == 7 and prof.overall.output_tokens.max == 3
    assert prof.overall.copy_overlap == 0.0  # "the cat hello" is not a prompt 3-gram
