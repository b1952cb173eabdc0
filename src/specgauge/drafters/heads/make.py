"""Making heads (tests, the training scripts): a config.json dict in each published layout, shaped like
a target; a freshly initialised head from it; and ``save_head``, which writes config.json + safetensors
under the checkpoint's names (``HeadModule.checkpoint_hook``), so what is saved loads through the one
load path like any published head."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from specgauge.drafters.heads.loader import HeadModule, head_state, read_spec, share_from_target
from specgauge.targets.base import Target
from specgauge.targets.layers import default_eagle3_aux_ids

IN_MEMORY = Path("<new head>")


def _attr(c: Any, name: str) -> Any:
    """``c.name``, or None where it is missing or differs per layer (Gemma 4's head_dim)."""
    try:
        return getattr(c, name, None)
    except Exception:  # noqa: BLE001 - transformers' per-layer attributes refuse a global read
        return None


def geometry(target: Target) -> dict[str, Any]:
    """The layer fields of a head shaped like ``target`` (its config: transformers' or the lean ModelArgs)."""
    c = target.config
    heads = _attr(c, "num_attention_heads") or c.num_heads
    kv = _attr(c, "num_key_value_heads") or _attr(c, "num_kv_heads") or heads
    rope = _attr(c, "rope_parameters") or {}
    rope = rope.get("full_attention", rope) if isinstance(rope.get("full_attention"), dict) else rope
    return {
        "hidden_size": target.hidden_size, "intermediate_size": int(_attr(c, "intermediate_size") or 4 * target.hidden_size),
        "num_attention_heads": heads, "num_key_value_heads": kv,
        "head_dim": _attr(c, "head_dim") or target.hidden_size // heads,
        "rms_norm_eps": float(_attr(c, "rms_norm_eps") or 1e-6),
        "rope_theta": float(rope.get("rope_theta", _attr(c, "rope_theta") or 10000.0)),
        "max_position_embeddings": 2048, "vocab_size": target.vocab_size, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }


def eagle3_config(target: Target, draft_vocab_size: int | None = None, aux_layer_ids: Sequence[int] | None = None,
                  intermediate_size: int | None = None, num_layers: int = 1, model_type: str = "llama",
                  **extra: Any) -> dict[str, Any]:
    """A flat vLLM / SpecForge EAGLE-3 config (``LlamaForCausalLMEagle3``)."""
    g = geometry(target)
    aux = list(aux_layer_ids) if aux_layer_ids else list(default_eagle3_aux_ids(target.num_layers))
    cfg = {**g, "model_type": model_type, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": num_layers,
           "intermediate_size": intermediate_size or g["intermediate_size"],
           "draft_vocab_size": draft_vocab_size or target.vocab_size, "target_hidden_size": target.hidden_size,
           "norm_before_residual": False,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True}}
    return {**cfg, **extra}


def speculators_eagle3_config(target: Target, verifier: str, draft_vocab_size: int | None = None,
                              aux_layer_ids: Sequence[int] | None = None, num_layers: int = 1,
                              model_type: str = "llama", **extra: Any) -> dict[str, Any]:
    """The same head in speculators' nested layout (``Eagle3SpeculatorConfig``)."""
    g = geometry(target)
    layer = {**g, "model_type": model_type, "num_hidden_layers": num_layers}
    cfg = {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"], "transformer_layer_config": layer,
           "draft_vocab_size": draft_vocab_size or target.vocab_size, "norm_before_residual": False,
           "target_hidden_size": target.hidden_size,
           "eagle_aux_hidden_state_layer_ids": list(aux_layer_ids or default_eagle3_aux_ids(target.num_layers)),
           "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": verifier, "architectures": []}}}
    return {**cfg, **extra}


def mtp_config(target: Target, intermediate_size: int | None = None, **extra: Any) -> dict[str, Any]:
    """A DeepSeek-V3-style MTP layer on a Llama block (``SpecgaugeLlamaMTPModel``)."""
    g = geometry(target)
    cfg = {**g, "model_type": "llama", "architectures": ["SpecgaugeLlamaMTPModel"], "num_hidden_layers": 1,
           "intermediate_size": intermediate_size or g["intermediate_size"], "num_nextn_predict_layers": 1,
           "mtp_layer_index": target.num_layers}
    return {**cfg, **extra}


def dflash_config(target: Target, num_layers: int = 1, intermediate_size: int | None = None,
                  target_layer_ids: Sequence[int] | None = None, mask_token_id: int = 0, block_size: int = 8,
                  causal: bool = False, **extra: Any) -> dict[str, Any]:
    """z-lab's / vLLM's DFlash config (``DFlashDraftModel``, model_type qwen3); ids are layer outputs."""
    from specgauge.drafters.heads.dflash import build_target_layer_ids

    g = geometry(target)
    ids = list(target_layer_ids) if target_layer_ids else build_target_layer_ids(target.num_layers, num_layers)
    cfg = {**g, "model_type": "qwen3", "architectures": ["DFlashDraftModel"], "num_hidden_layers": num_layers,
           "intermediate_size": intermediate_size or g["intermediate_size"], "attention_bias": False,
           "attention_dropout": 0.0, "is_causal": causal, "target_hidden_size": target.hidden_size,
           "block_size": block_size,
           "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": ids, "block_size": block_size}}
    cfg.pop("rope_theta")
    cfg["rope_parameters"] = {"rope_theta": g["rope_theta"], "rope_type": "default"}
    return {**cfg, **extra}


def new_head(cfg: dict[str, Any], target: Target, seed: int = 0, draft_to_target: Tensor | Sequence[int] | None = None,
             std: float = 0.02) -> HeadModule:
    """A freshly initialised float32 head (linears N(0, std), norms 1) for ``target``: the shared tensors
    the class does not train itself are the target's (frozen); EAGLE-3's draft vocabulary is the sorted
    target ids ``draft_to_target`` (all ids when None)."""
    spec, cls = read_spec(IN_MEMORY, target.num_layers, cfg)
    torch.manual_seed(seed)
    head = cls(spec)  # type: ignore[call-arg]
    g = torch.Generator().manual_seed(seed)
    sd: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, p in head.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name:
                p.fill_(1.0)
            else:
                p.zero_()
    head.from_target = share_from_target(head, sd, target, skip=cls.trained)
    head.load_state_dict(sd, strict=False)
    for name, p in head.named_parameters():
        if name in head.from_target:
            p.requires_grad_(False)
    if draft_to_target is not None or "d2t" in dict(head.named_buffers()):
        n = spec.draft_vocab_size
        ids = torch.arange(n) if draft_to_target is None else torch.as_tensor(draft_to_target).long()
        if ids.numel() != n or bool((ids[1:] <= ids[:-1]).any()):
            raise ValueError("draft_to_target must list draft_vocab_size distinct target ids in increasing order")
        head.d2t = ids - torch.arange(n)
    head = head.float()
    head.after_load(target)
    return head


def save_head(head: HeadModule, out: str | Path, target_num_layers: int, dtype: torch.dtype = torch.bfloat16,
              **extra: Any) -> Path:
    """Write config.json (the head's config, ``extra`` fields added) + model.safetensors (float weights in
    ``dtype``; integer and bool tensors as they are; nothing taken from the target)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in head_state(head, target_num_layers).items()}
    mask = sd.pop("mask_embedding", None)  # DFlash: a file of its own beside the weights, as vLLM reads it
    if mask is not None:
        from specgauge.drafters.heads.dflash import MASK_FILE

        torch.save(mask, out / MASK_FILE)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**dict(head.spec.raw), **extra}, indent=2) + "\n")
    return out


def dspark_config(target: Target, markov_rank: int = 16, noise_token_id: int = 0, sample_from_anchor: bool = True,
                  confidence: bool = True, draft_topk: int | None = None, **kw: Any) -> dict[str, Any]:
    """A native DSpark config (``Qwen3DSparkModel``: a DFlash backbone + Markov and confidence heads)."""
    from specgauge.drafters.heads.dflash import build_target_layer_ids

    cfg = dflash_config(target, mask_token_id=noise_token_id, **kw)
    cfg.pop("dflash_config")
    ids = list(kw.get("target_layer_ids") or build_target_layer_ids(target.num_layers, int(cfg["num_hidden_layers"])))
    cfg.update(architectures=["Qwen3DSparkModel"], target_layer_ids=ids, dspark_noise_token_id=noise_token_id,
               markov_rank=markov_rank, enable_confidence_head=confidence, confidence_head_with_markov=confidence,
               sample_from_anchor=sample_from_anchor)
    if draft_topk is not None:
        cfg["dspark_draft_topk"] = draft_topk
    return cfg


def speculators_peagle_config(target: Target, verifier: str, mask_token_id: int = 3, **kw: Any) -> dict[str, Any]:
    """A P-EAGLE head in speculators' layout (``speculators_model_type: peagle``), the layout vLLM 0.32 runs
    parallel drafting from (its converter names it ``Peagle{Llama,Qwen3}ForCausalLM`` and sets ``pard_token``)."""
    cfg = speculators_eagle3_config(target, verifier, **kw)
    cfg.update(speculators_model_type="peagle", architectures=["PEagleSpeculator"], mask_token_id=mask_token_id)
    cfg["speculators_config"]["algorithm"] = "peagle"
    return cfg


__all__ = ["dflash_config", "dspark_config", "eagle3_config", "geometry", "mtp_config", "new_head", "save_head",
           "speculators_eagle3_config", "speculators_peagle_config"]
