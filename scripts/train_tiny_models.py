#!/usr/bin/env python
"""Train specgauge's tiny shipped models: a target LM and a smaller draft LM sharing one tokenizer.

Everything is seeded and runs on CPU (the default flags fit in about 30 minutes on 2 cores):

1. **Corpus** — chat documents rendered through the shipped chat template from the sample-workload
   generator (``specgauge.workload.samples.generate.generate_pairs``, seeds ``--pair-seeds``; seed 0,
   the shipped sample, is held out for evaluation), written as ``prompt + answer<|im_end|>``; plus
   Python standard-library sources (PSF licence). If the generator cannot be imported a small built-in
   chat generator stands in (the figures then say so).
2. **Tokenizer** — SentencePiece BPE with ``byte_fallback`` (no unknown tokens for English, Korean or
   code), identity normalisation, whitespace kept verbatim, ``\\n`` as its own piece; shipped both as
   ``tokenizer.model`` (what llama.cpp's ``convert_hf_to_gguf.py`` reads) and as the HF fast files
   ``tokenizer.json`` + ``tokenizer_config.json`` (what transformers and vLLM read), with a ChatML-style
   chat template that renders ``tools`` and tool calls.
3. **Target** — ``LlamaForCausalLM`` (hidden 256, 4 layers), next-token loss, AdamW, cosine LR.
4. **Draft** — ``LlamaForCausalLM`` (hidden 192, 2 layers) distilled on the target: KL(target ‖ draft)
   over the target's full next-token distribution on the same corpus.
5. **Figures** — params, bytes on disk, train / held-out loss, greedy samples with their distinct-token
   ratio, and the draft's greedy acceptance: for held-out chat requests the target's greedy output
   (``--eval-max-tokens``) is generated, then one teacher-forced draft pass over prompt+output gives
   the share of output positions where the draft's argmax equals the target's token (per-token
   acceptance alpha). Written to each model's ``README.md`` and ``training_figures.json``.
6. **Heads** — ``scripts/train_tiny_heads.py`` then trains the EAGLE-3 and MTP heads on the new
   target (``tiny-eagle3/``, ``tiny-mtp/``; a few minutes; ``--no-heads`` skips it).

Weights are saved in bfloat16 (``save_pretrained``, safetensors); all reported figures are measured
on the saved files, reloaded in float32.

Usage::

    nice -n 10 python scripts/train_tiny_models.py            # the shipped models
    python scripts/train_tiny_models.py --quick --out /tmp/m   # a 2-minute smoke run
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

STDLIB_DIR = Path(os.__file__).parent  # Python standard-library sources (PSF licence)

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
# RoPE has no learned positions, so this only bounds a server's --max-model-len: 2048 lets every request
# of the shipped sample (prompt + max_tokens) fit; training windows are --seq-len tokens.
MAX_POSITIONS = 2048
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

# ChatML-style template. ``tools`` are listed as JSON in the system turn; assistant tool calls are
# rendered as <tool_call>{"name": ..., "arguments": ...}</tool_call>; tool results as a ``tool`` turn.
CHAT_TEMPLATE = (
    "{%- macro text(c) -%}"
    "{%- if c is none -%}"
    "{%- elif c is string -%}{{- c -}}"
    "{%- else -%}{%- for p in c -%}{%- if p.type == 'text' -%}{{- p.text -}}{%- endif -%}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages and messages[0].role == 'system' -%}{{- text(messages[0].content) + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call these functions:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nTo call one, reply with <tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages and messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + text(messages[0].content) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' and loop.first -%}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + text(message.content) -}}"
    "{%- if message.tool_calls -%}"
    "{%- for tc in message.tool_calls -%}"
    "{%- if tc.function is defined -%}{%- set tc = tc.function -%}{%- endif -%}"
    "{%- if loop.first and message.content -%}{{- '\\n' -}}{%- elif not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc.name + '\", \"arguments\": ' -}}"
    "{%- if tc.arguments is string -%}{{- tc.arguments -}}{%- else -%}{{- tc.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# --------------------------------------------------------------------------------------------------
# configuration


@dataclass
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


TARGET_SHAPE = ModelShape(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=688)
DRAFT_SHAPE = ModelShape(hidden=192, layers=2, heads=3, kv_heads=1, intermediate=512)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "src/specgauge/models",
                   help="directory that receives tiny-target/ and tiny-draft/")
    p.add_argument("--seed", type=int, default=1234, help="seeds corpus shuffling, init and batches")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--vocab-size", type=int, default=4096, help="SentencePiece vocabulary size")
    p.add_argument("--pair-seeds", type=str, default="1-6",
                   help="generate_pairs seeds used for training, 'a-b' or 'a,b,c' (0 is the shipped sample)")
    p.add_argument("--per-cell", type=int, default=40, help="generate_pairs per_cell for each training seed")
    p.add_argument("--eval-seed", type=int, default=0, help="generate_pairs seed of the held-out requests")
    p.add_argument("--code-chars", type=int, default=1_500_000,
                   help="characters of stdlib source in the training corpus")
    p.add_argument("--code-share", type=float, default=0.15, help="share of training windows taken from stdlib code")
    p.add_argument("--seq-len", type=int, default=512, help="training window (tokens)")
    p.add_argument("--batch-size", type=int, default=6)
    p.add_argument("--target-steps", type=int, default=700)
    p.add_argument("--target-lr", type=float, default=3e-3)
    p.add_argument("--draft-steps", type=int, default=300)
    p.add_argument("--draft-lr", type=float, default=4e-3)
    p.add_argument("--eval-requests", type=int, default=50, help="held-out chat requests for acceptance")
    p.add_argument("--eval-max-tokens", type=int, default=128, help="target greedy output length cap")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--quick", action="store_true", help="tiny smoke run (minutes); do not ship its output")
    p.add_argument("--no-heads", action="store_true",
                   help="skip the hidden-state heads (scripts/train_tiny_heads.py; run after the target by default)")
    p.add_argument("--rewrite-readme", action="store_true",
                   help="only recompute the sample-fit figure and rewrite README.md in the existing --out dirs")
    p.add_argument("--refresh-tokenizer-files", action="store_true",
                   help="only rewrite tokenizer_config.json / chat_template.jinja in the existing --out dirs")
    args = p.parse_args(argv)
    if args.quick:
        args.per_cell, args.code_chars, args.vocab_size = 4, 200_000, 2048
        args.target_steps, args.draft_steps, args.seq_len, args.batch_size = 30, 20, 256, 4
        args.eval_requests, args.eval_max_tokens, args.log_every = 6, 32, 10
    return args


def parse_seeds(spec: str) -> list[int]:
    if "-" in spec:
        a, b = spec.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in spec.split(",") if s.strip()]


# --------------------------------------------------------------------------------------------------
# corpus


@dataclass
class ChatExample:
    """One request body (``messages``/``tools`` or ``prompt``) and the reference answer text."""

    body: dict[str, Any]
    answer: str


def sample_pairs(seed: int, per_cell: int) -> tuple[list[ChatExample], str]:
    """Examples from the project's sample-workload generator, or the built-in stand-in."""
    try:
        from specgauge.workload.samples.generate import generate_pairs
    except Exception as exc:  # noqa: BLE001 - any import failure means "not landed yet"
        print(f"[corpus] sample generator unavailable ({type(exc).__name__}: {exc}); using built-in chats")
        return builtin_pairs(seed, per_cell), "builtin"
    out = []
    for request, answer in generate_pairs(seed, per_cell):
        body = request.get("body", request)
        out.append(ChatExample(body=body, answer=answer))
    return out, "specgauge.workload.samples.generate"


def builtin_pairs(seed: int, per_cell: int) -> list[ChatExample]:
    """A small English/Korean support-chat generator used only when the real one is missing."""
    rng = random.Random(seed)
    names = ["Dana", "Marcus", "Priya", "김민준", "이서연", "박지호"]
    items = [("router", "공유기"), ("desk lamp", "스탠드"), ("kettle", "전기포트"), ("earbuds", "이어폰")]
    out: list[ChatExample] = []
    for i in range(per_cell * 8):
        ko = i % 2 == 1
        name, (en_item, ko_item) = rng.choice(names), rng.choice(items)
        order = f"ORD-{rng.randint(2400000, 2599999)}"
        days = rng.randint(2, 9)
        if ko:
            q = f"안녕하세요, {name}입니다. 주문 {order} {ko_item}이(가) {days}일째 도착하지 않았어요."
            a = (f"{name}님, 불편을 드려 죄송합니다. 주문 {order}의 배송 상태를 확인했습니다. "
                 f"{ko_item}은(는) 현재 배송 중이며 {days // 2 + 1}일 안에 도착할 예정입니다.")
            sys_msg = "당신은 친절한 고객 지원 상담원입니다."
        else:
            q = f"Hi, this is {name}. My {en_item} from order {order} has not arrived after {days} days."
            a = (f"Hi {name}, I'm sorry for the delay. I checked order {order}: your {en_item} is in transit "
                 f"and should arrive within {days // 2 + 1} days.")
            sys_msg = "You are a helpful customer support agent."
        body: dict[str, Any] = {"messages": [{"role": "system", "content": sys_msg}, {"role": "user", "content": q}]}
        if i % 4 == 3:
            body["tools"] = [{"type": "function", "function": {
                "name": "lookup_order", "description": "Look up an order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                               "required": ["order_id"]}}}]
            a = '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "' + order + '"}}\n</tool_call>'
        out.append(ChatExample(body=body, answer=a))
    return out


def render_prompt(body: dict[str, Any]) -> str:
    """The prompt text a server would feed the model for this request body."""
    from transformers.utils.chat_template_utils import render_jinja_template

    if body.get("messages"):
        rendered, _ = render_jinja_template(
            conversations=[body["messages"]], tools=body.get("tools"), chat_template=CHAT_TEMPLATE,
            add_generation_prompt=True,
        )
        return rendered[0]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    raise ValueError(f"request body has neither messages nor a text prompt: {sorted(body)}")


def chat_document(ex: ChatExample) -> str:
    """``prompt + answer`` closed the way the model must learn to stop."""
    prompt = render_prompt(ex.body)
    if ex.body.get("messages"):
        return prompt + ex.answer + IM_END + "\n"
    return prompt + ex.answer


def stdlib_documents(max_chars: int, rng: random.Random, exclude: set[str]) -> list[str]:
    """Whole stdlib modules (shuffled, seeded) up to ``max_chars`` characters."""
    files = [f for f in sorted(glob.glob(str(STDLIB_DIR / "*.py"))) if Path(f).name not in exclude]
    rng.shuffle(files)
    docs, total = [], 0
    for f in files:
        text = Path(f).read_text(encoding="utf-8", errors="replace")
        if len(text) > 120_000:
            continue
        docs.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return docs


HELDOUT_STDLIB = {"textwrap.py", "shlex.py", "fractions.py", "bisect.py", "heapq.py", "glob.py"}


# --------------------------------------------------------------------------------------------------
# tokenizer


def train_sentencepiece(texts: list[str], vocab_size: int, prefix: Path, seed: int) -> Path:
    import sentencepiece as spm

    def lines() -> Iterator[str]:
        for t in texts:  # paragraphs keep '\n' inside, so "\n" is learnt as its own (user) piece
            for para in t.split("\n\n"):
                if para.strip():
                    yield para[:8000]

    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        sentence_iterator=lines(), model_prefix=str(prefix), model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, split_digits=True, allow_whitespace_only_pieces=True,
        user_defined_symbols=["\n", IM_START, IM_END], character_coverage=0.9995,
        unk_id=0, bos_id=1, eos_id=2, pad_id=3, unk_piece=UNK, bos_piece=BOS, eos_piece=EOS, pad_piece=PAD,
        max_sentence_length=16384, input_sentence_size=2_000_000, shuffle_input_sentence=True,
        num_threads=2, minloglevel=2,
    )
    return prefix.with_suffix(".model")


def hf_tokenizer_from_spm(model_file: Path) -> Any:
    """A ``PreTrainedTokenizerFast`` equivalent to the SentencePiece model (BPE + byte fallback)."""
    import sentencepiece as spm
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    # merges: every split of a normal piece into two known pieces, ranked by the piece's id (= score order)
    merges: list[tuple[int, int, int, str, str]] = []
    for piece, pid in vocab.items():
        if not sp.is_unknown(pid) and not sp.is_control(pid) and not sp.is_byte(pid) and len(piece) > 1:
            if piece in (IM_START, IM_END):
                continue
            for k in range(1, len(piece)):
                left, right = piece[:k], piece[k:]
                if left in vocab and right in vocab:
                    merges.append((pid, vocab[left], vocab[right], left, right))
    merges.sort()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(m[3], m[4]) for m in merges], unk_token=UNK,
                               fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in (UNK, BOS, EOS, PAD, IM_START, IM_END)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=UNK, bos_token=BOS, eos_token=IM_END, pad_token=PAD,
        model_max_length=MAX_POSITIONS, clean_up_tokenization_spaces=False, chat_template=CHAT_TEMPLATE,
    )
    hf.add_bos_token = False
    return hf


def spm_agreement(model_file: Path, hf: Any, texts: list[str]) -> float:
    """Share of texts that SentencePiece (llama.cpp) and the HF tokenizer encode identically."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    same = sum(sp.encode(t) == hf.encode(t, add_special_tokens=False) for t in texts)
    return same / max(1, len(texts))


# --------------------------------------------------------------------------------------------------
# data


class Packed:
    """All documents tokenised and concatenated with ``</s>`` between them; windows start at documents."""

    def __init__(self, tok: Any, docs: list[str]) -> None:
        ids: list[int] = []
        self.starts: list[int] = []
        enc = tok(docs, add_special_tokens=False)["input_ids"]
        for e in enc:
            self.starts.append(len(ids))
            ids.extend(e)
            ids.append(tok.convert_tokens_to_ids(EOS))
        self.ids = torch.tensor(ids, dtype=torch.long)

    def __len__(self) -> int:
        return int(self.ids.numel())

    def batch(self, gen: torch.Generator, batch_size: int, seq_len: int) -> torch.Tensor:
        n = len(self.starts)
        rows = []
        for _ in range(batch_size):
            # half the windows start at a document, half end where one ends (so the answers of
            # documents longer than a window are trained too)
            d = int(torch.randint(0, n, (1,), generator=gen))
            if float(torch.rand((), generator=gen)) < 0.5:
                s = self.starts[d]
            else:
                end = self.starts[d + 1] if d + 1 < n else len(self)
                s = max(0, end - seq_len - 1)
            s = min(s, len(self) - seq_len - 1)
            rows.append(self.ids[s: s + seq_len + 1])
        return torch.stack(rows)

    def sequential(self, seq_len: int, limit: int) -> Iterator[torch.Tensor]:
        for s in range(0, min(len(self), limit) - seq_len - 1, seq_len):
            yield self.ids[s: s + seq_len + 1].unsqueeze(0)


def mixed_batch(parts: list[tuple[Packed, float]], gen: torch.Generator, bs: int, seq_len: int) -> torch.Tensor:
    """A batch whose rows come from each corpus part with the given probabilities."""
    rows = []
    for _ in range(bs):
        r, acc = float(torch.rand((), generator=gen)), 0.0
        for packed, w in parts:
            acc += w
            if r <= acc:
                break
        rows.append(packed.batch(gen, 1, seq_len)[0])
    return torch.stack(rows)


# --------------------------------------------------------------------------------------------------
# models and training


def make_model(shape: ModelShape, vocab: int, tok: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.intermediate, max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
        rms_norm_eps=1e-5, bos_token_id=tok.convert_tokens_to_ids(BOS),
        eos_token_id=tok.convert_tokens_to_ids(IM_END), pad_token_id=tok.convert_tokens_to_ids(PAD),
    )
    return LlamaForCausalLM(cfg)


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def make_optimizer(model: Any, lr: float) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    prog = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))


@dataclass
class Curve:
    points: list[tuple[int, float]] = field(default_factory=list)
    seconds: float = 0.0


def train_target(model: Any, parts: list[tuple[Packed, float]], args: argparse.Namespace, gen: torch.Generator) -> Curve:
    opt = make_optimizer(model, args.target_lr)
    model.train()
    curve, t0, run = Curve(), time.time(), 0.0
    for step in range(args.target_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.target_steps, args.target_lr)
        x = mixed_batch(parts, gen, args.batch_size, args.seq_len)
        logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run = loss.item() if step == 0 else 0.9 * run + 0.1 * loss.item()
        if (step + 1) % args.log_every == 0 or step == args.target_steps - 1:
            el = time.time() - t0
            curve.points.append((step + 1, round(run, 4)))
            print(f"[target] step {step + 1:5d}/{args.target_steps} loss {run:.3f} "
                  f"lr {opt.param_groups[0]['lr']:.2e} {el:6.0f}s", flush=True)
    curve.seconds = time.time() - t0
    return curve


def train_draft(draft: Any, target: Any, parts: list[tuple[Packed, float]], args: argparse.Namespace,
                gen: torch.Generator) -> Curve:
    """Distil: minimise KL(p_target || p_draft) over every position of corpus windows."""
    opt = make_optimizer(draft, args.draft_lr)
    target.eval()
    draft.train()
    curve, t0, run = Curve(), time.time(), 0.0
    for step in range(args.draft_steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.draft_steps, args.draft_lr)
        x = mixed_batch(parts, gen, args.batch_size, args.seq_len)[:, :-1]
        with torch.no_grad():
            t_logp = F.log_softmax(target(input_ids=x).logits.float(), dim=-1)
        d_logp = F.log_softmax(draft(input_ids=x).logits, dim=-1)
        loss = F.kl_div(d_logp.reshape(-1, d_logp.size(-1)), t_logp.reshape(-1, t_logp.size(-1)),
                        log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        run = loss.item() if step == 0 else 0.9 * run + 0.1 * loss.item()
        if (step + 1) % args.log_every == 0 or step == args.draft_steps - 1:
            el = time.time() - t0
            curve.points.append((step + 1, round(run, 4)))
            print(f"[draft]  step {step + 1:5d}/{args.draft_steps} KL {run:.3f} "
                  f"lr {opt.param_groups[0]['lr']:.2e} {el:6.0f}s", flush=True)
    curve.seconds = time.time() - t0
    return curve


@torch.no_grad()
def eval_loss(model: Any, packed: Packed, seq_len: int, max_tokens: int = 24_000) -> float:
    model.eval()
    tot, n = 0.0, 0
    for x in packed.sequential(seq_len, max_tokens):
        logits = model(input_ids=x[:, :-1]).logits
        tot += F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x.size(1) - 1
    return tot / max(1, n)


# --------------------------------------------------------------------------------------------------
# evaluation of the saved models


@torch.no_grad()
def greedy(model: Any, prompt_ids: list[int], max_new: int, stop_ids: set[int]) -> list[int]:
    out = model.generate(input_ids=torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                         max_new_tokens=max_new, do_sample=False, eos_token_id=sorted(stop_ids),
                         pad_token_id=next(iter(stop_ids)))
    return out[0, len(prompt_ids):].tolist()


@torch.no_grad()
def draft_agreement(draft: Any, prompt_ids: list[int], out_ids: list[int]) -> tuple[int, int]:
    """(matches, positions): draft argmax at each output position vs the target's token there."""
    if not out_ids:
        return 0, 0
    ids = torch.tensor([prompt_ids + out_ids])
    logits = draft(input_ids=ids[:, :-1]).logits[0]
    pred = logits[len(prompt_ids) - 1:].argmax(-1).tolist()
    return sum(int(a == b) for a, b in zip(pred, out_ids)), len(out_ids)


def ngram_copy(prompt_ids: list[int], out_ids: list[int], n_max: int = 3, n_min: int = 2) -> tuple[int, int]:
    """Positions where prompt lookup (longest suffix n-gram seen earlier, most recent match) is right."""
    hist, hits = list(prompt_ids), 0
    for tok in out_ids:
        guess = None
        for n in range(n_max, n_min - 1, -1):
            if len(hist) <= n:
                continue
            suffix = hist[-n:]
            for s in range(len(hist) - n - 1, -1, -1):
                if hist[s: s + n] == suffix:
                    guess = hist[s + n]
                    break
            if guess is not None:
                break
        hits += int(guess == tok)
        hist.append(tok)
    return hits, len(out_ids)


def distinct_ratio(ids: list[int]) -> float:
    return len(set(ids)) / max(1, len(ids))


def dir_bytes(d: Path, pattern: str = "*.safetensors") -> int:
    return sum(f.stat().st_size for f in d.glob(pattern))


# --------------------------------------------------------------------------------------------------
# saving


def save_model(model: Any, tok: Any, spm_file: Path, out: Path, name: str) -> None:
    from transformers import GenerationConfig

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.to(torch.bfloat16)
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    tok.save_pretrained(out)
    shutil.copy(spm_file, out / "tokenizer.model")
    finalize_tokenizer_config(out, tok)
    eos = [tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(EOS)]
    GenerationConfig(bos_token_id=tok.convert_tokens_to_ids(BOS), eos_token_id=eos,
                     pad_token_id=tok.convert_tokens_to_ids(PAD)).save_pretrained(out)
    cfg = json.loads((out / "config.json").read_text())
    cfg["_name_or_path"] = name
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


SPECIAL_TOKENS = (UNK, BOS, EOS, PAD, IM_START, IM_END)


def finalize_tokenizer_config(out: Path, tok: Any) -> None:
    """Make ``tokenizer_config.json`` readable by every consumer, not only transformers 5.

    transformers 5 writes ``tokenizer_class: TokenizersBackend`` and keeps the chat template in
    ``chat_template.jinja`` only. Written here as well: the class name transformers 4 knows, the chat
    template, ``added_tokens_decoder`` (llama.cpp's GGUF converter marks exactly these as CONTROL
    tokens, so ``<|im_start|>`` / ``<|im_end|>`` are parsed as specials), ``add_prefix_space: false``
    (otherwise llama.cpp's SentencePiece path prepends a space) and no automatic BOS/EOS.
    """
    path = out / "tokenizer_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.update({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(tok.convert_tokens_to_ids(t)): {"content": t, "lstrip": False, "normalized": False,
                                                "rstrip": False, "single_word": False, "special": True}
            for t in SPECIAL_TOKENS
        },
    })
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")


def refresh_tokenizer_files(out: Path) -> None:
    """Rewrite tokenizer_config.json and config.json's max_position_embeddings of already trained
    model directories (no training; the weights do not depend on either)."""
    from transformers import AutoTokenizer

    for d in (out / "tiny-target", out / "tiny-draft"):
        finalize_tokenizer_config(d, AutoTokenizer.from_pretrained(d))
        cfg = json.loads((d / "config.json").read_text())
        cfg["max_position_embeddings"] = MAX_POSITIONS
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        print(f"[refresh] {d}")


def sample_fit(tok: Any, max_model_len: int = MAX_POSITIONS) -> dict[str, Any]:
    """How the shipped sample workload (seed 0) fits a server's ``--max-model-len`` with this tokenizer."""
    from specgauge.workload.samples.generate import sample_path

    lines = [json.loads(x) for x in sample_path().read_text(encoding="utf-8").splitlines() if x.strip()]
    lens = sorted(len(tok(render_prompt(r), add_special_tokens=False)["input_ids"]) for r in lines)
    need = [len(tok(render_prompt(r), add_special_tokens=False)["input_ids"]) + int(r.get("max_tokens") or 0)
            for r in lines]
    return {"requests": len(lines), "prompt_tokens_median": lens[len(lens) // 2],
            "prompt_tokens_p90": lens[int(len(lens) * 0.9)], "prompt_tokens_max": lens[-1],
            "max_model_len": max_model_len, "prompt_plus_max_tokens_over": sum(n > max_model_len for n in need),
            "prompt_plus_max_tokens_over_1024": sum(n > 1024 for n in need)}


def rewrite_readmes(out: Path) -> None:
    """Recompute the sample-fit figure and rewrite both READMEs from ``training_figures.json``."""
    from transformers import AutoTokenizer

    tdir, ddir = out / "tiny-target", out / "tiny-draft"
    figs = json.loads((tdir / "training_figures.json").read_text(encoding="utf-8"))
    figs["sample_fit"] = sample_fit(AutoTokenizer.from_pretrained(tdir))
    for d, which in ((tdir, "target"), (ddir, "draft")):
        write_readme(d, which, figs)
        (d / "training_figures.json").write_text(json.dumps(figs, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"[readme] {d}")


def write_readme(out: Path, which: str, figs: dict[str, Any]) -> None:
    t, d, a = figs["target"], figs["draft"], figs["acceptance"]
    lines = [
        f"# specgauge tiny-{which}",
        "",
        "Part of the tiny target/draft pair shipped with specgauge for its embedded engine, demo and tests.",
        "Trained from scratch on CPU by `scripts/train_tiny_models.py` (seeded); both models share this",
        "tokenizer (SentencePiece BPE with byte fallback: `tokenizer.model` for llama.cpp, `tokenizer.json`",
        "for transformers/vLLM) and a ChatML-style chat template with tool calls. A toy: it imitates the",
        "sample workload's answers, it knows nothing.",
        "",
        "## Training figures",
        "",
        "| | tiny-target | tiny-draft |",
        "|---|---|---|",
        f"| architecture | Llama, hidden {TARGET_SHAPE.hidden}, {TARGET_SHAPE.layers} layers, "
        f"{TARGET_SHAPE.heads} heads / {TARGET_SHAPE.kv_heads} KV | Llama, hidden {DRAFT_SHAPE.hidden}, "
        f"{DRAFT_SHAPE.layers} layers, {DRAFT_SHAPE.heads} heads / {DRAFT_SHAPE.kv_heads} KV |",
        f"| parameters | {t['params']:,} | {d['params']:,} |",
        f"| safetensors on disk (bf16) | {t['bytes']:,} B | {d['bytes']:,} B |",
        f"| objective | next-token CE, {t['steps']} steps | KL(target ‖ draft), {d['steps']} steps |",
        f"| final train loss (EMA) | {t['train_loss']:.3f} | KL {d['train_kl']:.3f} |",
        f"| held-out loss, chat (seed {figs['eval_seed']}) | {t['heldout_chat_loss']:.3f} | {d['heldout_chat_loss']:.3f} |",
        f"| held-out loss, stdlib code | {t['heldout_code_loss']:.3f} | {d['heldout_code_loss']:.3f} |",
        f"| training time (s, 2 shared cores) | {t['seconds']:.0f} | {d['seconds']:.0f} |",
        "",
        f"Corpus: {figs['corpus']['chat_docs']} chat documents from `{figs['corpus']['chat_source']}` "
        f"(seeds {figs['corpus']['pair_seeds']}), {figs['corpus']['code_docs']} stdlib modules; "
        f"{figs['corpus']['train_tokens']:,} training tokens. Vocabulary {figs['vocab_size']}; "
        f"SentencePiece and HF encodings agree on {figs['tokenizer_agreement']:.0%} of held-out documents.",
        "",
        "## Draft acceptance on held-out chat requests",
        "",
        f"{a['requests']} requests of the sample workload (seed {figs['eval_seed']}, never trained on); the target's",
        f"greedy output (≤ {a['max_tokens']} tokens, {a['output_tokens']} tokens in all) scored with one",
        "teacher-forced draft pass:",
        "",
        f"- per-token greedy acceptance α (draft argmax = target token): **{a['alpha']:.3f}** "
        f"(mean over requests {a['alpha_per_request_mean']:.3f})",
        f"- n-gram prompt-lookup copy share (n = 3..2): {a['ngram_share']:.3f}",
        f"- distinct-token ratio of the target outputs: mean {a['distinct_mean']:.2f}, min {a['distinct_min']:.2f}",
        "",
    ]
    if "sample_fit" in figs:
        f = figs["sample_fit"]
        lines += [
            f"Shipped sample workload ({f['requests']} requests) with this tokenizer: prompt tokens median "
            f"{f['prompt_tokens_median']}, p90 {f['prompt_tokens_p90']}, max {f['prompt_tokens_max']}; "
            f"{f.get('prompt_plus_max_tokens_over_1024', '?')} requests have prompt + max_tokens > 1024 and "
            f"{f['prompt_plus_max_tokens_over']} > {f['max_model_len']} (`max_position_embeddings`): serve with "
            f"`--max-model-len {f['max_model_len']}` to send them all.",
            "",
        ]
    lines += [
        "## Greedy samples (target)",
        "",
    ]
    for s in figs["samples"]:
        lines += [f"**{s['segment']}** — distinct-token ratio {s['distinct']:.2f}", "", "```text",
                  s["output"].replace("```", "ʼʼʼ"), "```", ""]
    lines += ["## Reproduce", "", "```", figs["command"], "```", ""]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


# --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.refresh_tokenizer_files:
        refresh_tokenizer_files(args.out)
        return {}
    if args.rewrite_readme:
        rewrite_readmes(args.out)
        return {}
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_start = time.time()
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"specgauge-train-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)

    # corpus -------------------------------------------------------------------------------------
    train_examples: list[ChatExample] = []
    source = ""
    for s in parse_seeds(args.pair_seeds):
        if s == args.eval_seed:
            raise SystemExit(f"--pair-seeds must not contain the held-out seed {args.eval_seed}")
        exs, source = sample_pairs(s, args.per_cell)
        train_examples.extend(exs)
    eval_examples, _ = sample_pairs(args.eval_seed, max(2, args.per_cell // 4))
    chat_docs = [chat_document(e) for e in train_examples]
    rng.shuffle(chat_docs)
    heldout_chat_docs = [chat_document(e) for e in eval_examples]
    code_docs = stdlib_documents(args.code_chars, rng, HELDOUT_STDLIB)
    heldout_code = [(STDLIB_DIR / f).read_text(encoding="utf-8") for f in sorted(HELDOUT_STDLIB)]
    print(f"[corpus] {len(chat_docs)} chat docs ({sum(map(len, chat_docs)):,} chars, from {source}), "
          f"{len(code_docs)} stdlib modules ({sum(map(len, code_docs)):,} chars)", flush=True)

    # tokenizer ----------------------------------------------------------------------------------
    spm_file = train_sentencepiece(chat_docs + code_docs, args.vocab_size, work / "spm", args.seed)
    tok = hf_tokenizer_from_spm(spm_file)
    agree = spm_agreement(spm_file, tok, heldout_chat_docs[:40] + heldout_code)
    print(f"[tokenizer] vocab {len(tok)}; SentencePiece/HF agreement on held-out docs {agree:.0%}", flush=True)
    chat = Packed(tok, chat_docs)
    code = Packed(tok, code_docs)
    h_chat, h_code = Packed(tok, heldout_chat_docs), Packed(tok, heldout_code)
    print(f"[data] train tokens: chat {len(chat):,}, code {len(code):,}; held-out chat {len(h_chat):,}, "
          f"code {len(h_code):,}", flush=True)
    lens = sorted(len(e) for e in tok(heldout_chat_docs, add_special_tokens=False)["input_ids"])
    print(f"[data] held-out chat doc tokens: median {lens[len(lens) // 2]}, p90 {lens[int(len(lens) * 0.9)]}, "
          f"max {lens[-1]}", flush=True)
    parts = [(chat, 1.0 - args.code_share), (code, args.code_share)]

    # target -------------------------------------------------------------------------------------
    gen = torch.Generator().manual_seed(args.seed)
    target = make_model(TARGET_SHAPE, len(tok), tok)
    print(f"[target] {n_params(target):,} parameters", flush=True)
    t_curve = train_target(target, parts, args, gen)

    # draft --------------------------------------------------------------------------------------
    torch.manual_seed(args.seed + 1)
    draft = make_model(DRAFT_SHAPE, len(tok), tok)
    print(f"[draft] {n_params(draft):,} parameters", flush=True)
    d_curve = train_draft(draft, target, parts, args, gen)

    # save, reload the shipped bf16 files in float32, measure -------------------------------------
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tdir, ddir = args.out / "tiny-target", args.out / "tiny-draft"
    save_model(target, tok, spm_file, tdir, "specgauge/tiny-target")
    save_model(draft, tok, spm_file, ddir, "specgauge/tiny-draft")
    tok = AutoTokenizer.from_pretrained(tdir)
    target = AutoModelForCausalLM.from_pretrained(tdir, dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(ddir, dtype=torch.float32).eval()

    stop = {tok.convert_tokens_to_ids(IM_END), tok.convert_tokens_to_ids(EOS)}
    chat_eval = [e for e in eval_examples if e.body.get("messages")]
    step = max(1, len(chat_eval) // args.eval_requests)
    picked = chat_eval[::step][: args.eval_requests]
    matches = positions = copy_hits = 0
    per_req, distinct, samples, skipped = [], [], [], 0
    seen_segments: set[str] = set()
    max_prompt = MAX_POSITIONS - args.eval_max_tokens
    for ex in picked:
        p_ids = tok(render_prompt(ex.body), add_special_tokens=False)["input_ids"]
        if len(p_ids) > max_prompt:
            skipped += 1
            continue
        out = greedy(target, p_ids, args.eval_max_tokens, stop)
        m, n = draft_agreement(draft, p_ids, out)
        c, _ = ngram_copy(p_ids, out)
        matches, positions, copy_hits = matches + m, positions + n, copy_hits + c
        per_req.append(m / max(1, n))
        distinct.append(distinct_ratio(out))
        seg = str(ex.body.get("segment", "")) or _segment_guess(ex)
        if seg not in seen_segments and len(samples) < 3:
            seen_segments.add(seg)
            samples.append({"segment": seg, "prompt_tail": tok.decode(p_ids[-40:]),
                            "output": tok.decode(out), "distinct": round(distinct_ratio(out), 3),
                            "tokens": len(out)})
    acceptance = {
        "requests": len(per_req), "skipped_long_prompts": skipped, "max_tokens": args.eval_max_tokens,
        "output_tokens": positions, "alpha": matches / max(1, positions),
        "alpha_per_request_mean": sum(per_req) / max(1, len(per_req)),
        "ngram_share": copy_hits / max(1, positions),
        "distinct_mean": sum(distinct) / max(1, len(distinct)), "distinct_min": min(distinct, default=float("nan")),
    }
    figs: dict[str, Any] = {
        "command": "nice -n 10 python scripts/train_tiny_models.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "seed": args.seed, "eval_seed": args.eval_seed, "vocab_size": len(tok), "tokenizer_agreement": agree,
        "corpus": {"chat_docs": len(chat_docs), "chat_source": source, "pair_seeds": args.pair_seeds,
                   "per_cell": args.per_cell, "code_docs": len(code_docs), "train_tokens": len(chat) + len(code)},
        "target": {"params": n_params(target), "bytes": dir_bytes(tdir), "steps": args.target_steps,
                   "train_loss": t_curve.points[-1][1], "curve": t_curve.points, "seconds": t_curve.seconds,
                   "heldout_chat_loss": eval_loss(target, h_chat, args.seq_len),
                   "heldout_code_loss": eval_loss(target, h_code, args.seq_len)},
        "draft": {"params": n_params(draft), "bytes": dir_bytes(ddir), "steps": args.draft_steps,
                  "train_kl": d_curve.points[-1][1], "curve": d_curve.points, "seconds": d_curve.seconds,
                  "heldout_chat_loss": eval_loss(draft, h_chat, args.seq_len),
                  "heldout_code_loss": eval_loss(draft, h_code, args.seq_len)},
        "acceptance": acceptance, "samples": samples,
        "batch": {"seq_len": args.seq_len, "batch_size": args.batch_size, "target_lr": args.target_lr,
                  "draft_lr": args.draft_lr},
        "total_seconds": time.time() - t_start,
    }
    figs["sample_fit"] = sample_fit(tok)
    for d, which in ((tdir, "target"), (ddir, "draft")):
        write_readme(d, which, figs)
        (d / "training_figures.json").write_text(json.dumps(figs, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: figs[k] for k in ("target", "draft", "acceptance")}, indent=1, default=str)[:4000])
    for s in samples:
        print(f"--- sample [{s['segment']}] distinct {s['distinct']}\n{s['prompt_tail']!r}\n=> {s['output']!r}")
    print(f"[done] {time.time() - t_start:.0f}s; weights {dir_bytes(tdir) + dir_bytes(ddir):,} B")
    shutil.rmtree(work, ignore_errors=True)
    if not args.no_heads:  # the EAGLE-3 and MTP heads read this target's hidden states: retrain them on it
        import train_tiny_heads

        figs["heads"] = train_tiny_heads.main(["--target", str(tdir), "--out", str(args.out), "--seed", str(args.seed),
                                               "--threads", str(args.threads), *(["--quick"] if args.quick else [])])
    return figs


def _segment_guess(ex: ChatExample) -> str:
    if ex.body.get("tools"):
        return "tool-call"
    first = next((m for m in ex.body.get("messages", []) if m.get("role") == "user"), {})
    text = first.get("content") if isinstance(first.get("content"), str) else ""
    return "ko" if any("\uac00" <= ch <= "\ud7a3" for ch in text[:200]) else "en"


if __name__ == "__main__":
    main()
