"""The DFlash block-parallel draft head as vLLM 0.32 runs it (``model_executor/models/qwen3_dflash.py``,
``v1/spec_decode/dflash.py``), in z-lab's format (``DFlashDraftModel``) and speculators' (nested,
``speculators_model_type: dflash``). Knows nothing about requests or the engine.

A DFlash head is N decoder layers of its family (transformers' ``Qwen3DecoderLayer`` by default) whose
attention reads two groups of keys:

* **context** — per verified position p, the target's hidden states at the head's layers (DFlash's
  ``target_layer_ids`` are layer *outputs*: vLLM aux ids + 1, see ``targets/layers.py``), side by side,
  through ``fc`` and ``hidden_norm``: one context vector c[p] for every layer. Layer l's key is
  ``k_norm(k_proj_l(c[p]))`` with RoPE at p, its value ``v_proj_l(c[p])``; no layer norm, no MLP (vLLM
  writes them straight into the KV cache: ``precompute_and_store_context_kv``).
* **the block** — k + 1 query tokens: the anchor (the last token of the history, the bonus/correction
  token the target emitted but has not run yet) at position a, then k copies of ``mask_token_id`` at
  a+1..a+k, embedded with the target's embeddings; the family's residual decoder layer. Attention is
  **non-causal** (unless the config says ``is_causal``): every block row sees every context key
  (positions < a) and every block key, so the draft at a + i depends on how many masks follow it.

Logits: ``norm`` of the k mask rows through the lm_head (the target's unless the checkpoint ships one,
with ``d2t`` for a draft vocabulary); draft i = argmax of row i.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.config import HeadLoadError, HeadSpec
from specgauge.drafters.heads.eagle3 import check_llama_shaped, with_d2t
from specgauge.drafters.heads.family import Rope, attention_qkv, family
from specgauge.drafters.heads.loader import HeadModule, module_names, register_head
from specgauge.targets.base import LayerId, Target
from specgauge.targets.layers import dflash_aux_ids

ContextKV = list[tuple[Tensor, Tensor]]  # per layer: k, v [M, hkv, D]
MASK_FILE = "mask_embedding.pt"


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The reference repository's default feature layers (z-lab ``build_target_layer_ids``): the middle
    layer for one draft layer, else evenly spaced over 1 .. num_target_layers - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [int(round(start + i * (end - start) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


@register_head("dflash")
class DFlashHead(HeadModule):
    method: ClassVar[str] = "dflash"
    architectures: ClassVar[tuple[str, ...]] = ("DFlashDraftModel",)
    default_model_type: ClassVar[str] = "qwen3"
    shared: ClassVar[dict[str, str]] = {"embed_tokens.weight": "embed", "lm_head.weight": "lm_head"}

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__()
        self.spec = spec
        c = spec.layer_config
        fam = family(c)
        if any(t == "sliding_attention" for t in spec.get("layer_types", []) or []) or spec.flag("use_swa"):
            raise HeadLoadError(f"{spec.path}: sliding-window DFlash layers are not modelled")
        H, eps = c.hidden_size, c.rms_norm_eps
        self.target_layer_ids = tuple(int(i) - 1 for i in spec.aux_layer_ids)  # layer outputs (targets/layers.py)
        self.fc = nn.Linear(spec.target_hidden_size * len(self.target_layer_ids), H, bias=False)
        self.hidden_norm, self.norm = fam.norm(H, eps=eps), fam.norm(H, eps=eps)
        self.layers = nn.ModuleList(fam.decoder_layer(c, i) for i in range(spec.num_layers))
        for layer in self.layers:
            check_llama_shaped(layer, str(spec.path), fam.model_type)
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.lm_head = nn.Linear(H, spec.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self.mask_embedding = nn.Parameter(torch.zeros(H)) if (Path(spec.path) / MASK_FILE).is_file() else None
        self.rope = Rope(fam, c)
        a = self.layers[0].self_attn
        self.num_heads, self.num_kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim, self.scaling = a.head_dim, float(a.scaling)
        self.mask_token_id = int(spec.get("mask_token_id"))
        self.block_size = int(spec.get("block_size", 16))
        causal = spec.fields.get("is_causal")
        self.causal = bool(spec.get("causal", False) if causal is None else causal)

    # -- reading its checkpoint ------------------------------------------------------------------
    @classmethod
    def adjust_fields(cls, flat: dict[str, Any]) -> dict[str, Any]:
        if not any(k in flat for k in ("rope_theta", "rope_parameters", "rope_scaling")):
            flat = {**flat, "rope_theta": 1_000_000.0}  # vLLM's default for DFlash heads
        return flat

    @staticmethod
    def layer_output_ids(spec: HeadSpec, target_num_layers: int | None) -> list[int]:
        ids = spec.get("target_layer_ids")
        if not ids:
            n = spec.get("num_target_layers", target_num_layers)
            if n is None:
                raise HeadLoadError(f"{spec.path}: neither dflash_config.target_layer_ids nor num_target_layers")
            ids = build_target_layer_ids(int(n), spec.num_layers)
        return [int(i) for i in ids]

    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        if spec.get("mask_token_id") is None:
            raise HeadLoadError(f"{spec.path}: no dflash_config.mask_token_id")
        ids = cls.layer_output_ids(spec, target_num_layers)
        bad = [i for i in ids if not 0 <= i < target_num_layers]
        if bad:
            raise HeadLoadError(f"{spec.path}: target_layer_ids {ids}: {bad[0]} is not a layer of the target "
                                f"(0..{target_num_layers - 1})")
        return dflash_aux_ids(ids)

    @classmethod
    def check(cls, spec: HeadSpec, target: Target) -> None:
        m = int(spec.get("mask_token_id"))
        if not 0 <= m < target.vocab_size:
            raise HeadLoadError(f"{spec.path}: mask_token_id {m} outside the vocabulary (size {target.vocab_size})")

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        out = with_d2t(module_names({"model.": ""}, sd, drop=("t2d",)), spec)
        mask = _mask_embedding(Path(spec.path), int(spec.get("mask_token_id")), spec.hidden_size)
        if mask is not None:
            out["mask_embedding"] = mask
        return out

    @classmethod
    def checkpoint_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target_num_layers: int) -> dict[str, Tensor]:
        if spec.draft_vocab_size == spec.vocab_size and not bool(sd["d2t"].any()):
            sd = {k: v for k, v in sd.items() if k != "d2t"}  # the identity: vLLM reads no d2t for a full vocabulary
        return sd

    def after_load(self, target: Target) -> None:
        self.rope.keep_float32()

    # -- the computation -------------------------------------------------------------------------
    def context(self, feats: Tensor, pos: Tensor) -> ContextKV:
        """Context keys/values of verified positions: ``feats`` [N, L * Ht] the target's hidden states
        there, ``pos`` [N] their positions -> per layer (k, v) [N, hkv, D]."""
        x = self.hidden_norm(self.fc(feats.reshape(feats.shape[0], -1).to(self.fc.weight.dtype)))
        cos, sin = self.rope.cos_sin(pos, x.dtype)
        out = []
        for layer in self.layers:
            a = layer.self_attn
            k = a.k_proj(x).view(x.shape[0], -1, a.head_dim)
            if getattr(a, "k_norm", None) is not None:
                k = a.k_norm(k)
            _, k = self.rope.apply(k, k, cos, sin)
            out.append((k, a.v_proj(x).view(x.shape[0], -1, a.head_dim)))
        return out

    def block(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None) -> Tensor:
        """One forward of B blocks: ``anchors`` [B] token ids at positions ``start`` [B], k masks after
        each; ``ctx`` the context keys (shared by all rows), visible to row b where ``ctx_mask`` [B, M]
        (None: all) -> draft logits [B, k, Vd] (float32; ``to_target`` maps them)."""
        return self.lm_head(self.block_hidden(anchors, start, k, ctx, ctx_mask)[:, 1:]).float()  # type: ignore[no-any-return]

    def draft_ids(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None,
                  known: Tensor | None = None) -> Tensor:
        """Greedy drafts [B, k] (target ids) of :meth:`block`. ``known`` [B, k-1] (the true tokens after
        each anchor, -1 where unknown) is for heads whose later drafts read earlier ones (DSpark); a DFlash
        block reads none."""
        return self.to_target(self.block(anchors, start, k, ctx, ctx_mask).argmax(-1))

    def block_hidden(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None) -> Tensor:
        """:meth:`block`'s forward up to the final norm, every row -> [B, 1 + k, H] (row 0: the anchor's)."""
        B, Q = anchors.shape[0], k + 1
        dev = anchors.device
        toks = torch.cat([anchors[:, None], torch.full((B, k), self.mask_token_id, dtype=torch.long, device=dev)], 1)
        x = self.embed_tokens(toks).to(self.fc.weight.dtype)
        if self.mask_embedding is not None:
            x = torch.cat([x[:, :1], self.mask_embedding.to(x.dtype).expand(B, k, -1)], 1)
        pos = start[:, None] + torch.arange(Q, device=dev)
        cos, sin = self.rope.cos_sin(pos, x.dtype)
        for layer, (ck, cv) in zip(self.layers, ctx, strict=True):
            q, kb, vb = attention_qkv(layer.self_attn, layer.input_layernorm(x), cos, sin, self.rope)
            x = x + layer.self_attn.o_proj(self._attend(q, ck, cv, ctx_mask, kb, vb))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.norm(x)  # type: ignore[no-any-return]

    def _attend(self, q: Tensor, ck: Tensor, cv: Tensor, ctx_mask: Tensor | None, kb: Tensor, vb: Tensor) -> Tensor:
        """q [B, Q, h, D] over the context (ck, cv [M, hkv, D], ``ctx_mask`` [B, M]) and the block's own
        keys (kb, vb [B, Q, hkv, D]; all of them, or j <= i when causal): one softmax -> [B, Q, h*D]."""
        B, Q, H, D = q.shape
        g = H // self.num_kv_heads
        qf = q.view(B, Q, self.num_kv_heads, g, D)
        s_ctx = torch.einsum("bqhgd,mhd->bqhgm", qf, ck) * self.scaling
        if ctx_mask is not None:
            s_ctx = s_ctx.masked_fill(~ctx_mask[:, None, None, None, :], float("-inf"))
        s_blk = torch.einsum("bqhgd,bkhd->bqhgk", qf, kb) * self.scaling
        if self.causal:
            tri = torch.ones(Q, Q, dtype=torch.bool, device=q.device).tril()
            s_blk = s_blk.masked_fill(~tri[None, :, None, None, :], float("-inf"))
        w = torch.softmax(torch.cat([s_ctx, s_blk], -1), -1)
        M = ck.shape[0]
        out = torch.einsum("bqhgm,mhd->bqhgd", w[..., :M], cv) + torch.einsum("bqhgk,bkhd->bqhgd", w[..., M:], vb)
        return out.reshape(B, Q, H * D)


def _mask_embedding(head_dir: Path, mask_token_id: int, hidden: int) -> Tensor | None:
    """``mask_embedding.pt`` beside the weights (a tensor, or {"embedding", "mask_token_id"}), as vLLM reads it."""
    path = head_dir / MASK_FILE
    if not path.is_file():
        return None
    state: Any = torch.load(path, weights_only=True, map_location="cpu")
    if isinstance(state, dict):
        if state.get("mask_token_id", mask_token_id) != mask_token_id:
            raise HeadLoadError(f"{path}: mask_token_id {state.get('mask_token_id')} differs from the config's {mask_token_id}")
        state = state["embedding"]
    emb = state.reshape(-1)
    if emb.numel() != hidden:
        raise HeadLoadError(f"{path}: {emb.numel()} values, expected hidden_size {hidden}")
    return emb


__all__ = ["MASK_FILE", "ContextKV", "DFlashHead", "build_target_layer_ids"]
