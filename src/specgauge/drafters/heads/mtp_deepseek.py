"""DeepSeek-style multi-token prediction (``model_executor/models/deepseek_mtp.py`` in vLLM 0.32): a layer
that reads the target's final-norm output h and the next token's embedding,

  x = eh_proj([enorm(embed(t)), hnorm(h)])   (the embedding zeroed at position 0, as vLLM does)
  out = the family's decoder block over x     (transformers' own layer class of the head's model_type)
  logits = shared_head.head(shared_head.norm(out)); the chain reads shared_head.norm(out)

reused for every draft position (vLLM's default when k exceeds ``num_nextn_predict_layers``).
Checkpoint names are DeepSeek-V3's: ``model.layers.{L}.{enorm,hnorm,eh_proj,shared_head.*}`` beside the
block's own ``self_attn.*`` / ``mlp.*`` / norms, L = ``mtp_layer_index`` (default: the target's layer
count); ``embed_tokens`` and ``shared_head.head`` are the target's where the checkpoint has none.
Blocks that are not Llama-shaped (DeepSeek-V3's MLA) are refused by name.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.config import HeadLoadError, HeadSpec
from specgauge.drafters.heads.eagle3 import check_llama_shaped
from specgauge.drafters.heads.family import Rope, attention_qkv, family
from specgauge.drafters.heads.loader import HeadModule, register_head
from specgauge.targets.base import LayerId, Target


class SharedHead(nn.Module):
    def __init__(self, norm: nn.Module, hidden: int, vocab: int) -> None:
        super().__init__()
        self.norm = norm
        self.head = nn.Linear(hidden, vocab, bias=False)


@register_head("mtp_deepseek")
class DeepSeekMTPHead(HeadModule):
    method: ClassVar[str] = "mtp"
    architectures: ClassVar[tuple[str, ...]] = ("SpecgaugeLlamaMTPModel", "DeepSeekMTPModel")
    shared: ClassVar[dict[str, str]] = {"embed_tokens.weight": "embed", "shared_head.head.weight": "lm_head"}

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__()
        self.spec = spec
        c = spec.layer_config
        fam = family(c)
        H, eps = c.hidden_size, c.rms_norm_eps
        if spec.num_layers != 1:
            raise HeadLoadError(f"{spec.path}: MTP heads with {spec.num_layers} layers are not modelled (only 1)")
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.enorm, self.hnorm = fam.norm(H, eps=eps), fam.norm(H, eps=eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.block = fam.decoder_layer(c, 0)
        check_llama_shaped(self.block, str(spec.path), fam.model_type)
        self.shared_head = SharedHead(fam.norm(H, eps=eps), H, spec.vocab_size)
        self.rope = Rope(fam, c)
        a = self.block.self_attn
        self.num_heads, self.num_kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim, self.scaling = a.head_dim, float(a.scaling)
        self.num_attn_layers = 1

    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        return ("final",)

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        p = f"model.layers.{int(spec.get('mtp_layer_index', target.num_layers))}."
        own = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")
        out: dict[str, Tensor] = {}
        for name, t in sd.items():
            if not name.startswith(p):
                continue  # a target checkpoint's own layers
            rest = name[len(p):]
            out[rest if rest.startswith(own) else "block." + rest] = t
        if not out:
            raise HeadLoadError(f"{spec.path}: no MTP weights under {p}* (mtp_layer_index)")
        return out

    @classmethod
    def checkpoint_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target_num_layers: int) -> dict[str, Tensor]:
        p = f"model.layers.{int(spec.get('mtp_layer_index', target_num_layers))}."
        return {p + (n.removeprefix("block.")): t for n, t in sd.items()}

    def after_load(self, target: Target) -> None:
        self.rope.keep_float32()

    # -- chain.ChainHead --------------------------------------------------------------------------
    def combine(self, target_hidden: Tensor) -> Tensor:
        return target_hidden.reshape(target_hidden.shape[0], -1).to(self.eh_proj.weight.dtype)

    def enter(self, tokens: Tensor, pos: Tensor, h: Tensor) -> Any:
        emb = self.embed_tokens(tokens).to(h.dtype)
        emb = torch.where((pos == 0)[:, None], torch.zeros_like(emb), emb)  # vLLM: MTP masks position 0
        return self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(h)], -1))

    def qkv(self, i: int, state: Any, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x = self.block.input_layernorm(state)
        cos, sin = self.rope.cos_sin(pos, x.dtype)
        q, k, v = attention_qkv(self.block.self_attn, x, cos, sin, self.rope)
        return q, k, v, state

    def finish(self, i: int, attn: Tensor, carry: Tensor) -> Tensor:
        b = self.block
        r = b.self_attn.o_proj(attn) + carry
        return b.mlp(b.post_attention_layernorm(r)) + r  # type: ignore[no-any-return]

    def exit_split(self, state: Tensor) -> tuple[Tensor, Tensor]:
        normed = self.shared_head.norm(state)
        return normed, normed

    def logits(self, x: Tensor) -> Tensor:
        return self.shared_head.head(x).float()  # type: ignore[no-any-return]

    def exit(self, state: Tensor) -> tuple[Tensor, Tensor]:
        x, h = self.exit_split(state)
        return self.logits(x), h


__all__ = ["DeepSeekMTPHead"]
