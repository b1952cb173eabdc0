"""Tiny random targets of the families issue 38 names, for the target / head tests: from
``specgauge.testing.tiny_families`` (helper drafters' builder) where it is present, else built here
from transformers' own config classes (a stop-gap until it lands on main)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILIES = ("llama", "qwen3", "qwen3_moe", "gemma4", "deepseek_v3", "gpt_oss")

_COMMON: dict[str, Any] = {"vocab_size": 320, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "max_position_embeddings": 4096, "initializer_range": 0.2,
                           "eos_token_id": 0, "bos_token_id": None, "pad_token_id": None, "tie_word_embeddings": False}
_MOE: dict[str, Any] = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
_INLINE: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {"intermediate_size": 128, "head_dim": 16}),
    "qwen3": ("Qwen3Config", {"intermediate_size": 128, "head_dim": 16}),
    "qwen3_moe": ("Qwen3MoeConfig", {"intermediate_size": 128, "head_dim": 16, "num_experts": 4, **_MOE}),
    "gemma4": ("Gemma4TextConfig", {"intermediate_size": 128, "head_dim": 16, "tie_word_embeddings": True,
                                    "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
                                    "global_head_dim": 32, "vocab_size_per_layer_input": 0,
                                    "hidden_size_per_layer_input": 0}),
    "deepseek_v3": ("DeepseekV3Config", {"num_key_value_heads": 4, "intermediate_size": 128, "n_shared_experts": 1,
                                         "n_routed_experts": 4, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
                                         "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8,
                                         "qk_nope_head_dim": 8, "v_head_dim": 16, **_MOE}),
    "gpt_oss": ("GptOssConfig", {"head_dim": 16, "intermediate_size": 32, "num_local_experts": 4,
                                 "num_experts_per_tok": 2, "sliding_window": 8}),
}


def tiny_family(name: str, out: Path, seed: int = 0) -> Path:
    """A random tiny ``name`` checkpoint saved in ``out`` (with a tokenizer)."""
    try:
        from specgauge.testing.tiny_families import make_tiny_family
    except ImportError:
        pass
    else:
        return make_tiny_family(name, out, seed=seed)
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from specgauge.testing.engine import make_tiny_tokenizer

    cls, kw = _INLINE[name]
    cfg = getattr(transformers, cls)(**{**_COMMON, **kw})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    make_tiny_tokenizer(out, cfg.vocab_size)
    return out
