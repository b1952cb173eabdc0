"""Tiny random checkpoints for tests and benchmarks (no downloads, seconds to build).

``make_tiny_model`` saves a random Llama / Qwen2 / Qwen3 with transformers' own ``save_pretrained``
so the loader is checked against the real on-disk format; ``make_tiny_tokenizer`` builds a byte-level
BPE tokenizer with a chat template, saved as transformers saves one.
"""

from __future__ import annotations

from pathlib import Path

import torch

CHAT_TEMPLATE = (
    "{% if tools %}<|system|>Tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>"]
_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "안녕하세요 반갑습니다. 오늘 날씨가 좋네요.",
    "import json\nprint(json.dumps({'a': 1}))\n",
]


def make_tiny_tokenizer(out_dir: str | Path, vocab_size: int = 320) -> int:
    """Save a byte-level BPE tokenizer (with chat template) to ``out_dir``; returns its vocab size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return len(fast)


def make_tiny_model(
    out_dir: str | Path,
    arch: str = "llama",
    vocab_size: int = 320,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    tie: bool = False,
    init_range: float = 0.2,
    eos_token_id: int | None = 0,
    perturb_from: str | Path | None = None,
    perturb_scale: float = 0.0,
) -> Path:
    """Save a random ``arch`` model; with ``perturb_from``, copy that model's weights plus noise.

    A perturbed copy makes a draft model that agrees with its target often but not always.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[arch]
    cfg = cls(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=4096, tie_word_embeddings=tie, initializer_range=init_range,
        eos_token_id=eos_token_id, bos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # non-trivial norm weights exercise the loader
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        if perturb_from is not None:
            src = AutoModelForCausalLM.from_pretrained(str(perturb_from))
            for (_, p), (_, q) in zip(model.named_parameters(), src.named_parameters(), strict=True):
                p.copy_(q + perturb_scale * q.std() * torch.randn(q.shape, generator=g))
    model.save_pretrained(str(out_dir))
    return Path(out_dir)
