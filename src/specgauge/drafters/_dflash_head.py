"""The DFlash block-parallel draft head as vLLM 0.32 runs it (``model_executor/models/qwen3_dflash.py``,
``v1/spec_decode/dflash.py``) on z-lab's checkpoint format (``DFlashDraftModel``): the module, its
checkpoint, and the one computation both the engine and offline replay use. Knows nothing about
requests or the engine.

A DFlash head is N Qwen3-style decoder layers whose attention reads two groups of keys:

* **context** — per verified position p, the target's hidden states at ``target_layer_ids`` (the
  *outputs* of those layers: Hugging Face ``hidden_states[i + 1]``, which vLLM reads as auxiliary
  layer i + 1 and ``Transformer.forward_flat_hidden`` as id i + 1), concatenated, through ``fc`` and
  ``hidden_norm``: one context vector c[p] for every layer. Layer l's key is ``k_norm(k_proj_l(c[p]))``
  with RoPE at p, its value ``v_proj_l(c[p])``; no layer norm, no MLP (vLLM writes them straight into
  the KV cache: ``precompute_and_store_context_kv``).
* **the block** — k + 1 query tokens: the anchor (the last token of the history, the bonus/correction
  token the target emitted but has not run yet) at position a, then k copies of ``mask_token_id`` at
  a+1..a+k, embedded with the target's embeddings; an ordinary residual decoder layer (input norm,
  attention with q_norm / k_norm and RoPE, post-attention norm, SwiGLU MLP). Attention is
  **non-causal** (unless the config says ``is_causal``): every block row sees every context key
  (positions < a) and every block key, so the draft at a + i depends on how many masks follow it.

Logits: ``norm`` of the k mask rows through the target's lm_head (the checkpoint's own where it ships
one, with ``d2t`` for a draft vocabulary); draft i = argmax of row i — a mask predicts the token at its
own position, not the next one. Greedy, so one forward per step, deterministic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from specgauge.nn.weights import read_safetensors

ARCHITECTURE = "DFlashDraftModel"


class DFlashLoadError(ValueError):
    """A DFlash head directory cannot be loaded; the message says why."""


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The reference repository's default feature layers (z-lab ``build_target_layer_ids``): the middle
    layer for one draft layer, else evenly spaced over 1 .. num_target_layers - 3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [int(round(start + i * (end - start) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int  # the target's vocabulary
    target_hidden_size: int
    target_layer_ids: tuple[int, ...]  # DFlash ids: layer i's output
    mask_token_id: int
    block_size: int  # the reference's default block (vLLM's block is num_speculative_tokens + 1)
    causal: bool = False
    attention_bias: bool = False

    @property
    def aux_layer_ids(self) -> tuple[int, ...]:
        """The ids ``Transformer.forward_flat_hidden`` (and vLLM's auxiliary layers) use: i + 1."""
        return tuple(i + 1 for i in self.target_layer_ids)

    @classmethod
    def from_dir(cls, head_dir: str | Path) -> DFlashConfig:
        path = Path(head_dir) / "config.json"
        if not path.is_file():
            raise DFlashLoadError(f"{head_dir}: no config.json (expected a DFlash head directory)")
        try:
            cfg = json.loads(path.read_text())
        except ValueError as e:
            raise DFlashLoadError(f"{path}: not JSON ({e})") from None
        arch = cfg.get("architectures") or []
        if ARCHITECTURE not in arch:
            why = (" (DFlash2's convolutions and candidate selector are not modelled)"
                   if any("DFlash2" in a for a in arch) else "")
            raise DFlashLoadError(f"{head_dir}: architectures {arch or 'none'!r} is not {ARCHITECTURE!r}{why}")
        dfc = cfg.get("dflash_config") or {}

        def val(name: str, default: Any = None) -> Any:  # dflash_config overrides the top level, as in vLLM
            return dfc.get(name, cfg.get(name, default))

        n_layers = int(cfg.get("num_hidden_layers", 1))
        if any(t == "sliding_attention" for t in cfg.get("layer_types") or []) or dfc.get("use_swa"):
            raise DFlashLoadError(f"{head_dir}: sliding-window DFlash layers are not modelled")
        ids = val("target_layer_ids")
        if not ids:
            if "num_target_layers" not in cfg:
                raise DFlashLoadError(f"{head_dir}: neither dflash_config.target_layer_ids nor num_target_layers")
            ids = build_target_layer_ids(int(cfg["num_target_layers"]), n_layers)
        mask = val("mask_token_id")
        if mask is None:
            raise DFlashLoadError(f"{head_dir}: no dflash_config.mask_token_id")
        causal = cfg.get("is_causal")
        if causal is None:
            causal = dfc.get("causal", False)
        n_heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise DFlashLoadError(f"{head_dir}: rope type {rope.get('rope_type')!r} not supported (only default RoPE)")
        hidden = cfg["hidden_size"]
        return cls(
            hidden_size=hidden, intermediate_size=cfg["intermediate_size"], num_layers=n_layers, num_heads=n_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or n_heads, head_dim=cfg.get("head_dim") or hidden // n_heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 1_000_000.0))),  # vLLM's default for DFlash
            vocab_size=cfg["vocab_size"], target_hidden_size=cfg.get("target_hidden_size") or hidden,
            target_layer_ids=tuple(int(i) for i in ids), mask_token_id=int(mask), block_size=int(val("block_size", 16)),
            causal=bool(causal), attention_bias=bool(cfg.get("attention_bias", False)),
        )


def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _rope(x: Tensor, pos: Tensor, inv_freq: Tensor) -> Tensor:
    """HF rotate_half RoPE (vLLM's neox style): x [..., h, D], pos [...] (x's leading dims)."""
    f = pos.to(torch.float32)[..., None] * inv_freq  # [..., D/2]
    emb = torch.cat([f, f], -1)[..., None, :]  # [..., 1, D]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class _Norm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class _Attention(nn.Module):
    def __init__(self, c: DFlashConfig) -> None:
        super().__init__()
        H, q, kv, b = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.attention_bias
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(H, q, b), nn.Linear(H, kv, b), nn.Linear(H, kv, b)
        self.o_proj = nn.Linear(q, H, b)
        self.q_norm, self.k_norm = _Norm(c.head_dim), _Norm(c.head_dim)


class _MLP(nn.Module):
    def __init__(self, c: DFlashConfig) -> None:
        super().__init__()
        H, inter = c.hidden_size, c.intermediate_size
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(H, inter, False), nn.Linear(H, inter, False), nn.Linear(inter, H, False)


class _Layer(nn.Module):
    def __init__(self, c: DFlashConfig) -> None:
        super().__init__()
        self.self_attn, self.mlp = _Attention(c), _MLP(c)
        self.input_layernorm, self.post_attention_layernorm = _Norm(c.hidden_size), _Norm(c.hidden_size)


ContextKV = list[tuple[Tensor, Tensor]]  # per layer: k, v [M, hkv, D]


class DFlashHead(nn.Module):
    """The draft layers; parameter names are the checkpoint's. Embeddings (and, unless the checkpoint
    ships its own, the lm_head) are the target's, as vLLM shares them."""

    def __init__(self, c: DFlashConfig, embed: Tensor, lm_head: Tensor, d2t: Tensor | None = None,
                 mask_embedding: Tensor | None = None) -> None:
        super().__init__()
        self.c = c
        self.fc = nn.Linear(c.target_hidden_size * len(c.target_layer_ids), c.hidden_size, bias=False)
        self.hidden_norm, self.norm = _Norm(c.hidden_size), _Norm(c.hidden_size)
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_layers))
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)
        self.register_buffer("d2t", d2t, persistent=False)
        self.register_buffer("mask_embedding", mask_embedding, persistent=False)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)

    def context(self, feats: Tensor, pos: Tensor) -> ContextKV:
        """Context keys/values of verified positions: ``feats`` [N, len(ids) * Ht] the target's hidden
        states there, ``pos`` [N] their positions -> per layer (k, v) [N, hkv, D]."""
        c, eps = self.c, self.c.rms_norm_eps
        x = _rms(self.fc(feats.to(self.fc.weight.dtype)), self.hidden_norm.weight, eps)
        N = x.shape[0]
        out = []
        for layer in self.layers:
            a = layer.self_attn
            k = _rope(_rms(a.k_proj(x).view(N, c.num_kv_heads, c.head_dim), a.k_norm.weight, eps), pos, self.inv_freq)
            out.append((k, a.v_proj(x).view(N, c.num_kv_heads, c.head_dim)))
        return out

    def block(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None) -> Tensor:
        """One forward of B blocks: ``anchors`` [B] token ids at positions ``start`` [B], k masks after
        each; ``ctx`` the context keys (shared by all rows), visible to row b where ``ctx_mask`` [B, M]
        (None: all) -> draft logits [B, k, V] (float32, target ids' order when ``d2t`` maps them)."""
        c, eps = self.c, self.c.rms_norm_eps
        B, Q = anchors.shape[0], k + 1
        toks = torch.cat([anchors[:, None], torch.full((B, k), c.mask_token_id, dtype=torch.long)], 1)
        x = F.embedding(toks, self.embed).to(self.fc.weight.dtype)
        if self.mask_embedding is not None:
            x = torch.cat([x[:, :1], self.mask_embedding.to(x.dtype).expand(B, k, -1)], 1)
        pos = start[:, None] + torch.arange(Q)
        for layer, (ck, cv) in zip(self.layers, ctx, strict=True):
            a = layer.self_attn
            h = _rms(x, layer.input_layernorm.weight, eps)
            q = _rope(_rms(a.q_proj(h).view(B, Q, c.num_heads, c.head_dim), a.q_norm.weight, eps), pos, self.inv_freq)
            kb = _rope(_rms(a.k_proj(h).view(B, Q, c.num_kv_heads, c.head_dim), a.k_norm.weight, eps), pos, self.inv_freq)
            vb = a.v_proj(h).view(B, Q, c.num_kv_heads, c.head_dim)
            x = x + a.o_proj(self._attend(q, ck, cv, ctx_mask, kb, vb))
            y = _rms(x, layer.post_attention_layernorm.weight, eps)
            m = layer.mlp
            x = x + m.down_proj(F.silu(m.gate_proj(y)) * m.up_proj(y))
        return F.linear(_rms(x[:, 1:], self.norm.weight, eps), self.lm_head.to(x.dtype)).float()

    def _attend(self, q: Tensor, ck: Tensor, cv: Tensor, ctx_mask: Tensor | None, kb: Tensor, vb: Tensor) -> Tensor:
        """q [B, Q, h, D] over the context (ck, cv [M, hkv, D], ``ctx_mask`` [B, M]) and the block's own
        keys (kb, vb [B, Q, hkv, D]; all of them, or j <= i when causal): one softmax -> [B, Q, h*D]."""
        c = self.c
        B, Q = q.shape[:2]
        g = c.num_heads // c.num_kv_heads
        qf = q.view(B, Q, c.num_kv_heads, g, c.head_dim)
        scale = 1.0 / math.sqrt(c.head_dim)
        s_ctx = torch.einsum("bqhgd,mhd->bqhgm", qf, ck) * scale
        if ctx_mask is not None:
            s_ctx = s_ctx.masked_fill(~ctx_mask[:, None, None, None, :], float("-inf"))
        s_blk = torch.einsum("bqhgd,bkhd->bqhgk", qf, kb) * scale
        if c.causal:
            tri = torch.ones(Q, Q, dtype=torch.bool).tril()
            s_blk = s_blk.masked_fill(~tri[None, :, None, None, :], float("-inf"))
        w = torch.softmax(torch.cat([s_ctx, s_blk], -1), -1)
        M = ck.shape[0]
        out = torch.einsum("bqhgm,mhd->bqhgd", w[..., :M], cv) + torch.einsum("bqhgk,bkhd->bqhgd", w[..., M:], vb)
        return out.reshape(B, Q, c.num_heads * c.head_dim)

    def to_target(self, ids: Tensor) -> Tensor:
        """Draft-vocabulary ids -> target ids (target = draft + d2t[draft]; identity without ``d2t``)."""
        return ids if self.d2t is None else ids + self.d2t[ids]


# -- checkpoint -----------------------------------------------------------------------------------------
def load_head(head_dir: str | Path, target: Any, dtype: torch.dtype = torch.float32) -> DFlashHead:
    """Load a DFlash head for ``target`` (a ``specgauge.nn.transformer.Transformer``); its embeddings and
    lm_head are the target's unless the checkpoint ships ``embed_tokens`` / ``lm_head`` (and ``d2t``),
    and a ``mask_embedding.pt`` beside the weights replaces the mask token's embedding, as in vLLM."""
    head_dir = Path(head_dir)
    c = DFlashConfig.from_dir(head_dir)
    ta = target.args
    if c.vocab_size != ta.vocab_size:
        raise DFlashLoadError(f"{head_dir}: vocab_size {c.vocab_size} but the target has {ta.vocab_size}")
    if c.target_hidden_size != ta.hidden_size:
        raise DFlashLoadError(f"{head_dir}: target_hidden_size {c.target_hidden_size} but the target's is {ta.hidden_size}")
    bad = [i for i in c.target_layer_ids if not 0 <= i < ta.num_layers]
    if bad:
        raise DFlashLoadError(f"{head_dir}: target_layer_ids {list(c.target_layer_ids)}: {bad[0]} is not a layer of "
                              f"the target (0..{ta.num_layers - 1})")
    if not 0 <= c.mask_token_id < ta.vocab_size:
        raise DFlashLoadError(f"{head_dir}: mask_token_id {c.mask_token_id} outside the vocabulary (size {ta.vocab_size})")
    sd = read_safetensors(head_dir, DFlashLoadError, "")
    sd = {(n[len("model."):] if n.startswith("model.") else n): t for n, t in sd.items()}
    embed = sd.pop("embed_tokens.weight", None)
    lm = sd.pop("lm_head.weight", None)
    d2t = sd.pop("d2t", None)
    sd.pop("t2d", None)
    mask = _mask_embedding(head_dir, c)
    head = DFlashHead(c, (embed if embed is not None else target.embed.weight).detach().to(dtype),
                      (lm if lm is not None else target.lm_head.weight).detach().to(dtype),
                      None if d2t is None else d2t.long(), None if mask is None else mask.to(dtype))
    missing, unexpected = head.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise DFlashLoadError(f"{head_dir}: weights do not fit the config: missing {missing}, unexpected {unexpected}")
    if head.lm_head.shape[0] != (ta.vocab_size if d2t is None else d2t.numel()):
        raise DFlashLoadError(f"{head_dir}: lm_head has {head.lm_head.shape[0]} rows; expected the vocabulary or d2t's size")
    head = head.to(dtype)
    head.inv_freq = head.inv_freq.float()
    return head.eval()


def _mask_embedding(head_dir: Path, c: DFlashConfig) -> Tensor | None:
    path = head_dir / "mask_embedding.pt"
    if not path.is_file():
        return None
    state = torch.load(path, weights_only=True, map_location="cpu")
    if isinstance(state, dict):
        if state.get("mask_token_id", c.mask_token_id) != c.mask_token_id:
            raise DFlashLoadError(f"{path}: mask_token_id {state.get('mask_token_id')} differs from the config's {c.mask_token_id}")
        state = state["embedding"]
    emb = state.reshape(-1)
    if emb.numel() != c.hidden_size:
        raise DFlashLoadError(f"{path}: {emb.numel()} values, expected hidden_size {c.hidden_size}")
    return emb


def dflash_config(target_args: Any, num_layers: int = 1, intermediate_size: int | None = None,
                  target_layer_ids: Sequence[int] | None = None, mask_token_id: int = 0, block_size: int = 8) -> DFlashConfig:
    """A head shaped like ``target_args`` (a ModelArgs), for training and tests."""
    a = target_args
    ids = tuple(target_layer_ids) if target_layer_ids else tuple(build_target_layer_ids(a.num_layers, num_layers))
    return DFlashConfig(a.hidden_size, intermediate_size or a.intermediate_size, num_layers, a.num_heads, a.num_kv_heads,
                        a.head_dim, a.rms_norm_eps, a.rope_theta, a.vocab_size, a.hidden_size, ids, mask_token_id, block_size)


def new_head(c: DFlashConfig, target: Any, seed: int = 0) -> DFlashHead:
    """A freshly initialised float32 head for ``target`` (norms 1, linears N(0, 0.02))."""
    torch.manual_seed(seed)
    head = DFlashHead(c, target.embed.weight.detach().float(), target.lm_head.weight.detach().float())
    for m in head.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return head


def config_dict(c: DFlashConfig, **extra: Any) -> dict[str, Any]:
    """config.json of a head in z-lab's / vLLM's DFlash format (``DFlashDraftModel``, model_type qwen3)."""
    cfg: dict[str, Any] = {
        "architectures": [ARCHITECTURE], "model_type": "qwen3", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps, "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"},
        "max_position_embeddings": 2048, "vocab_size": c.vocab_size, "hidden_act": "silu", "attention_bias": c.attention_bias,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "is_causal": c.causal,
        "target_hidden_size": c.target_hidden_size, "num_target_layers": None, "block_size": c.block_size,
        "dflash_config": {"mask_token_id": c.mask_token_id, "target_layer_ids": list(c.target_layer_ids),
                          "block_size": c.block_size},
    }
    cfg.update(extra)
    return {k: v for k, v in cfg.items() if v is not None}


def save_head(head: DFlashHead, out: str | Path, dtype: torch.dtype = torch.bfloat16, **extra: Any) -> Path:
    """Write config.json + model.safetensors (the head's own weights in ``dtype``; no embeddings or lm_head)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {n: t.detach().to(dtype).contiguous() for n, t in head.state_dict().items()}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config_dict(head.c, **extra), indent=2) + "\n")
    return out
