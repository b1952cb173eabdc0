"""A head's decoder layer comes from transformers' own classes for its family (``model_type`` of the
layer config: ``llama`` -> ``LlamaDecoderLayer``, ``LlamaRotaryEmbedding``, ``apply_rotary_pos_emb``),
and the split a chain needs — q/k/v before attention, the rest after — reads those modules' own
submodules, so a family's details (q_norm / k_norm, biases, RoPE scaling, the MLP) are transformers'."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Family:
    """transformers' classes of one model family."""

    model_type: str
    decoder_layer: type[nn.Module]
    rotary: type[nn.Module]
    apply_rope: Callable[..., tuple[Tensor, Tensor]]  # (q, k, cos, sin, unsqueeze_dim) -> (q, k)
    norm: type[nn.Module]


def family(config: Any) -> Family:
    """transformers' classes for ``config.model_type`` (a ``ValueError`` naming it where one is missing)."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    mt = config.model_type
    base = MODEL_MAPPING_NAMES.get(mt)
    if not isinstance(base, str):
        raise ValueError(f"model_type {mt!r}: transformers has no model of that family")
    prefixes = dict.fromkeys([base.removesuffix("Model"), base.removesuffix("TextModel")])  # Gemma4TextModel: both
    name = model_type_to_module_name(mt)
    mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    names = {"decoder_layer": "DecoderLayer", "rotary": "RotaryEmbedding", "norm": "RMSNorm"}
    found = {k: next((getattr(mod, p + v) for p in prefixes if hasattr(mod, p + v)), None) for k, v in names.items()}
    rope = getattr(mod, "apply_rotary_pos_emb", None)
    missing = [names[k] for k, v in found.items() if v is None] + ([] if rope else ["apply_rotary_pos_emb"])
    if missing:
        raise ValueError(f"model_type {mt!r}: transformers' {mod.__name__} has no {', '.join(missing)}")
    return Family(mt, found["decoder_layer"], found["rotary"], rope, found["norm"])  # type: ignore[arg-type]


class Rope(nn.Module):
    """cos/sin of positions from the family's rotary embedding (its RoPE scaling included)."""

    def __init__(self, fam: Family, config: Any) -> None:
        super().__init__()
        self.rotary = fam.rotary(config)
        self._rope_fn = fam.apply_rope
        self._rotary_cls, self._config = fam.rotary, config

    def keep_float32(self) -> None:
        """Rebuild the tables in float32 where a ``.to(dtype)`` rounded them (as transformers keeps them)."""
        dev = next(iter(self.rotary.buffers())).device
        self.rotary = self._rotary_cls(self._config).to(dev)

    def cos_sin(self, pos: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:  # pos [...] -> cos, sin [..., D]
        probe = torch.empty(0, dtype=dtype, device=pos.device)
        cos, sin = self.rotary(probe, pos.reshape(1, -1))
        return cos.reshape(*pos.shape, -1), sin.reshape(*pos.shape, -1)

    def apply(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """q [..., h, D], k [..., hkv, D]; cos/sin [..., D] (one row per token)."""
        return self._rope_fn(q, k, cos, sin, unsqueeze_dim=-2)


def attention_qkv(attn: nn.Module, x: Tensor, cos: Tensor, sin: Tensor, rope: Rope) -> tuple[Tensor, Tensor, Tensor]:
    """q [..., h, D], k [..., hkv, D], v [..., hkv, D] of a transformers attention module with
    ``q_proj`` / ``k_proj`` / ``v_proj`` (and ``q_norm`` / ``k_norm`` where the family has them), RoPE
    applied as the module does. ``x`` [..., H_in]."""
    D = attn.head_dim
    shape = (*x.shape[:-1], -1, D)
    q, k, v = attn.q_proj(x).view(shape), attn.k_proj(x).view(shape), attn.v_proj(x).view(shape)
    if getattr(attn, "q_norm", None) is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = rope.apply(q, k, cos, sin)
    return q, k, v


__all__ = ["Family", "Rope", "attention_qkv", "family"]
