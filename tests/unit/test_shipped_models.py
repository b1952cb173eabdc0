"""The shipped tiny target/draft pair: loadable, one shared tokenizer, trained (not random) weights."""

from __future__ import annotations

import inspect
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specgauge import models  # noqa: E402

pytestmark = pytest.mark.skipif(not models.available(), reason="shipped model weights are not in this checkout")

SAMPLE = Path(models.__file__).resolve().parent.parent / "workload" / "samples" / "sample.jsonl"
MAX_BYTES = 15 * 1024 * 1024

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_order_tracking",
        "description": "Tracking status of an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}]
TOOL_CHAT = [
    {"role": "system", "content": "You are the support assistant of Brightcart."},
    {"role": "user", "content": "주문 ORD-2477037 배송 상태를 알려주세요."},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_order_tracking", "arguments": "{\"order_id\": \"ORD-2477037\"}"},
    }]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"status\": \"shipped\"}"},
]


@pytest.fixture(scope="module")
def tok() -> Any:
    return transformers.AutoTokenizer.from_pretrained(models.target_dir())


@pytest.fixture(scope="module")
def draft_tok() -> Any:
    return transformers.AutoTokenizer.from_pretrained(models.draft_dir())


@pytest.fixture(scope="module")
def target() -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(models.target_dir(), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def draft() -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(models.draft_dir(), dtype=torch.float32).eval()


def sample_prompts(tok: Any, n: int, max_tokens: int = 700) -> list[list[int]]:
    """Token ids of the first ``n`` chat requests of the shipped sample that fit ``max_tokens``."""
    out: list[list[int]] = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        req = json.loads(line)
        text = tok.apply_chat_template(req["messages"], tools=req.get("tools"), add_generation_prompt=True,
                                       tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            out.append(ids)
        if len(out) == n:
            break
    assert len(out) == n, "the shipped sample has too few short chat requests"
    return out


@torch.no_grad()
def greedy(model: Any, ids: list[int], n: int, stop: list[int]) -> list[int]:
    x = torch.tensor([ids])
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                         eos_token_id=stop, pad_token_id=stop[0])
    return out[0, len(ids):].tolist()


def stop_ids(tok: Any) -> list[int]:
    return [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("</s>")]


def test_directories_load_as_llama_with_one_vocabulary(target: Any, draft: Any, tok: Any) -> None:
    assert type(target).__name__ == type(draft).__name__ == "LlamaForCausalLM"
    assert target.config.vocab_size == draft.config.vocab_size == len(tok)
    assert models.draft_dir() != models.target_dir()
    # the draft is the smaller model
    n_t = sum(p.numel() for p in target.parameters())
    n_d = sum(p.numel() for p in draft.parameters())
    assert 3_000_000 <= n_t <= 8_000_000 and n_d < n_t / 2


def test_both_directories_carry_the_same_tokenizer_files() -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"):
        a, b = models.target_dir() / name, models.draft_dir() / name
        assert a.is_file() and a.read_bytes() == b.read_bytes(), name


def test_tokenizers_encode_identically(tok: Any, draft_tok: Any) -> None:
    text = "Hello 안녕하세요 <|im_start|>user\ndef f(x):\n    return x  # ok<|im_end|>"
    assert tok.get_vocab() == draft_tok.get_vocab()
    assert tok(text)["input_ids"] == draft_tok(text)["input_ids"]


@pytest.mark.parametrize("text", [
    "환불 요청이 접수되었습니다. 배송 조회는 ORD-2477037 번호로 가능합니다. 뷁 똠방각하",  # rare syllables too
    inspect.getsource(textwrap),
    "tabs\tand  double  spaces\n\n\nnewlines, emoji 🙂, accents café, CJK 漢字, \\x00 escapes",
])
def test_text_round_trips_without_unknown_tokens(tok: Any, text: str) -> None:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_special_tokens_are_single_ids(tok: Any) -> None:
    for t in ("<|im_start|>", "<|im_end|>", "<s>", "</s>", "<pad>"):
        ids = tok(t, add_special_tokens=False)["input_ids"]
        assert ids == [tok.convert_tokens_to_ids(t)] and ids[0] != tok.unk_token_id
    assert tok.eos_token == "<|im_end|>"
    gen = json.loads((models.target_dir() / "generation_config.json").read_text())
    assert tok.convert_tokens_to_ids("<|im_end|>") in gen["eos_token_id"]
    # no BOS is prepended: the chat template starts the sequence
    assert tok("hi")["input_ids"] == tok("hi", add_special_tokens=False)["input_ids"]


def test_chat_template_renders_tools_and_tool_turns(tok: Any) -> None:
    text = tok.apply_chat_template(TOOL_CHAT, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nYou are the support assistant of Brightcart.")
    assert '"name": "get_order_tracking"' in text  # the tool schema, as JSON in the system turn
    assert '<tool_call>\n{"name": "get_order_tracking", "arguments": {"order_id": "ORD-2477037"}}\n</tool_call>' in text
    assert '<|im_start|>tool\n{"status": "shipped"}<|im_end|>\n' in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert text.count("<|im_start|>") == 5
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=False, tokenize=False)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"


def test_every_shipped_sample_request_renders(tok: Any) -> None:
    n = 0
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        req = json.loads(line)
        text = tok.apply_chat_template(req["messages"], tools=req.get("tools"), add_generation_prompt=True,
                                       tokenize=False)
        assert text.endswith("<|im_start|>assistant\n")
        if req.get("tools"):
            assert req["tools"][0]["function"]["name"] in text
        n += 1
    assert n > 0


def test_sentencepiece_model_matches_the_fast_tokenizer(tok: Any) -> None:
    spm = pytest.importorskip("sentencepiece")
    sp = spm.SentencePieceProcessor(model_file=str(models.target_dir() / "tokenizer.model"))
    assert sp.get_piece_size() == len(tok)
    for text in ("배송 조회 ORD-2477037\n\n    return x", inspect.getsource(textwrap)[:3000], "<|im_start|>user\nhi<|im_end|>"):
        assert sp.encode(text) == tok(text, add_special_tokens=False)["input_ids"]


def test_weights_fit_the_size_cap() -> None:
    total = sum(f.stat().st_size for d in (models.target_dir(), models.draft_dir()) for f in d.glob("*.safetensors"))
    assert 0 < total <= MAX_BYTES


def test_greedy_generation_is_not_a_loop(target: Any, tok: Any) -> None:
    for ids in sample_prompts(tok, 3):
        out = greedy(target, ids, 32, stop_ids(tok))
        assert len(out) >= 8
        assert len(set(out)) / len(out) > 0.3, tok.decode(out)


def test_draft_agrees_with_target_greedy_output(target: Any, draft: Any, tok: Any) -> None:
    hits = total = 0
    for ids in sample_prompts(tok, 4):
        out = greedy(target, ids, 32, stop_ids(tok))
        with torch.no_grad():
            logits = draft(input_ids=torch.tensor([ids + out])[:, :-1]).logits[0]
        pred = logits[len(ids) - 1:].argmax(-1).tolist()
        hits += sum(int(a == b) for a, b in zip(pred, out))
        total += len(out)
    assert total > 0 and hits / total > 0.3
