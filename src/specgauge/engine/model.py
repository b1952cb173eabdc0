"""A lean Llama / Qwen2 / Qwen3 causal LM with a slot-based KV cache (gpt-fast ``model.py`` style).

This module knows nothing about tokenisation, sampling or speculation. It loads ``config.json`` and
``*.safetensors`` from a local Hugging Face directory and runs a batched forward pass in which every
row writes its keys/values into its own cache *slot* at its own offset. Rolling back rejected tokens
is free: the caller simply forgets them by passing a smaller ``start`` next time (stale entries past a
row's length are never attended to, because the causal mask is built from positions, and they are
overwritten by the next write).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn

SUPPORTED_TYPES = ("llama", "qwen2", "qwen3", "mistral")


class ModelLoadError(ValueError):
    """The model directory cannot be loaded; the message says why."""


@dataclass(frozen=True)
class ModelArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> ModelArgs:
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise ModelLoadError(f"{model_dir}: no config.json (expected a local Hugging Face model directory)")
        cfg = json.loads(path.read_text())
        mt = cfg.get("model_type")
        if mt not in SUPPORTED_TYPES:
            raise ModelLoadError(f"{model_dir}: model_type {mt!r} not supported; supported: {', '.join(SUPPORTED_TYPES)}")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ModelLoadError(f"{model_dir}: rope type {rope_type!r} not supported (only default RoPE)")
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        n_heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        return cls(
            model_type=mt,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=n_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or n_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=mt == "qwen2" or bool(cfg.get("attention_bias", False)),
            qk_norm=mt == "qwen3",
            eos_token_ids=eos_ids,
        )


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class KVCache:
    """Keys and values for ``num_slots`` sequences of up to ``max_len`` tokens, per layer.

    Layout per layer: [num_slots, max_len, num_kv_heads, head_dim]. Lengths live with the caller.
    """

    def __init__(self, args: ModelArgs, num_slots: int, max_len: int, dtype: torch.dtype) -> None:
        shape = (num_slots, max_len, args.num_kv_heads, args.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(args.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(args.num_layers)]
        self.num_slots, self.max_len = num_slots, max_len


class Block(nn.Module):
    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.a = a
        q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        self.wqkv = nn.Linear(a.hidden_size, q + 2 * kv, bias=a.qkv_bias)  # fused q,k,v projections
        self.wo = nn.Linear(q, a.hidden_size, bias=False)
        self.w13 = nn.Linear(a.hidden_size, 2 * a.intermediate_size, bias=False)  # fused gate, up
        self.w2 = nn.Linear(a.intermediate_size, a.hidden_size, bias=False)
        self.attn_norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.ffn_norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.q_norm = RMSNorm(a.head_dim, a.rms_norm_eps) if a.qk_norm else None
        self.k_norm = RMSNorm(a.head_dim, a.rms_norm_eps) if a.qk_norm else None

    def forward(
        self,
        x: Tensor,  # [B, T, hidden]
        cos: Tensor,  # [B, T, 1, head_dim]
        sin: Tensor,  # [B, T, 1, head_dim]
        k_cache: Tensor,  # [S, M, Hkv, D]
        v_cache: Tensor,  # [S, M, Hkv, D]
        slots: Tensor,  # [B] int64
        pos: Tensor,  # [B, T] int64, absolute positions (clamped into the cache)
        mask: Tensor,  # [B, 1, T, L] bool, True = may attend
        kv_len: int,  # L
    ) -> Tensor:
        a = self.a
        B, T, _ = x.shape
        h = self.attn_norm(x)
        qkv = self.wqkv(h)
        nq, nkv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        q = qkv[..., :nq].view(B, T, a.num_heads, a.head_dim)
        k = qkv[..., nq : nq + nkv].view(B, T, a.num_kv_heads, a.head_dim)
        v = qkv[..., nq + nkv :].view(B, T, a.num_kv_heads, a.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k_cache[slots[:, None], pos] = k
        v_cache[slots[:, None], pos] = v
        if B == 1:
            ks, vs = k_cache[int(slots[0]), :kv_len][None], v_cache[int(slots[0]), :kv_len][None]
        else:
            ks, vs = k_cache[slots, :kv_len], v_cache[slots, :kv_len]
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2), attn_mask=mask,
            enable_gqa=a.num_heads != a.num_kv_heads,
        )  # [B, H, T, D]
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, nq))
        gate, up = self.w13(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.embed = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.num_layers))
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        return KVCache(self.args, num_slots, max_len, self.embed.weight.dtype)

    @torch.inference_mode()
    def forward(  # type: ignore[override]
        self,
        tokens: Tensor,  # [B, T] int64, right-padded (padding rows' outputs are garbage, ignore them)
        slots: Tensor,  # [B] int64, cache slot of each row
        start: Tensor,  # [B] int64, tokens already cached for each row (the first new token's position)
        cache: KVCache,
        last_only: Tensor | None = None,  # [B] int64: return logits only at this index of each row
    ) -> Tensor:  # logits [B, T, V] float32, or [B, 1, V] when last_only is given
        B, T = tokens.shape
        t = torch.arange(T)
        pos = start[:, None] + t  # [B, T]
        kv_len = min(int(pos.max()) + 1, cache.max_len)
        pos_w = pos.clamp(max=cache.max_len - 1)
        mask = (torch.arange(kv_len)[None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, T, L]
        freqs = pos.to(torch.float32)[..., None] * self.inv_freq  # [B, T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
        x = self.embed(tokens)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], slots, pos_w, mask, kv_len)
        if last_only is not None:
            x = x[torch.arange(B), last_only][:, None]
        return self.lm_head(self.norm(x)).float()


def _read_weights(model_dir: Path) -> dict[str, Tensor]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{model_dir}: no *.safetensors weights (pytorch_model.bin is not read)")
    sd: dict[str, Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def load_model(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
    """Load a Llama / Qwen2 / Qwen3 checkpoint into the lean :class:`Transformer` (eval mode)."""
    model_dir = Path(model_dir)
    a = ModelArgs.from_dir(model_dir)
    sd = _read_weights(model_dir)
    sd = {k.removeprefix("model."): v for k, v in sd.items()}

    def take(name: str) -> Tensor:
        try:
            return sd.pop(name)
        except KeyError:
            raise ModelLoadError(f"{model_dir}: weight {name!r} missing") from None

    new: dict[str, Tensor] = {"embed.weight": take("embed_tokens.weight"), "norm.weight": take("norm.weight")}
    head = sd.pop("lm_head.weight", None)
    if head is None:
        if not a.tie_word_embeddings:
            raise ModelLoadError(f"{model_dir}: lm_head.weight missing and tie_word_embeddings is false")
        head = new["embed.weight"]
    new["lm_head.weight"] = head
    for i in range(a.num_layers):
        p = f"layers.{i}."
        new[p + "wqkv.weight"] = torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
        if a.qkv_bias:
            new[p + "wqkv.bias"] = torch.cat([take(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
        new[p + "wo.weight"] = take(p + "self_attn.o_proj.weight")
        new[p + "w13.weight"] = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")])
        new[p + "w2.weight"] = take(p + "mlp.down_proj.weight")
        new[p + "attn_norm.weight"] = take(p + "input_layernorm.weight")
        new[p + "ffn_norm.weight"] = take(p + "post_attention_layernorm.weight")
        if a.qk_norm:
            new[p + "q_norm.weight"] = take(p + "self_attn.q_norm.weight")
            new[p + "k_norm.weight"] = take(p + "self_attn.k_norm.weight")
    with torch.device("meta"):
        model = Transformer(a)
    model.load_state_dict(new, strict=True, assign=True)
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim))
    model.inv_freq = inv.float()
    model = model.to(dtype)
    model.inv_freq = model.inv_freq.float()
    return model.eval()


def cache_bytes(a: ModelArgs, num_slots: int, max_len: int, dtype: torch.dtype) -> int:
    """Memory the KV cache for ``num_slots`` x ``max_len`` tokens takes."""
    return 2 * a.num_layers * num_slots * max_len * a.num_kv_heads * a.head_dim * torch.finfo(dtype).bits // 8


__all__ = ["KVCache", "ModelArgs", "ModelLoadError", "Transformer", "cache_bytes", "load_model"]
