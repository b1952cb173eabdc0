"""A lean Llama / Qwen2 / Qwen3 causal LM with a slot-based KV cache (gpt-fast ``model.py`` style).

This module knows nothing about tokenisation, sampling or speculation. It reads ``config.json`` (``ModelArgs``;
``weights.load_model`` loads the ``*.safetensors``) and runs a forward pass over a *flattened*
batch: the new tokens of B sequences packed into one row of N = sum(lens) tokens (vLLM's layout),
each sequence writing its keys/values into its own cache *slot* at its own offset. Linear layers see
exactly N tokens, no padding; attention is per-sequence causal over that sequence's cache
("varlen": sequences with the same number of new tokens share one attention call, so a decode batch
costs one call and a verification batch one call per distinct proposal length).

Rolling back rejected tokens is free: the caller simply forgets them by passing a smaller ``start``
next time (stale entries past a sequence's length are never attended to, because the mask is built
from positions, and they are overwritten by the next write).

Two entry points share one implementation: ``forward_flat(tokens[N], slots, starts, lens, ...)``
and the padded ``forward(tokens[B, T], ...)`` (every row T long), kept for callers that think in
rectangles.

Fast-path details (numerics match transformers' Llama to float rounding, checked by the tests):
q/k projection rows are stored with each head's two RoPE halves interleaved, so RoPE is one complex
multiply (attention scores are invariant under the same permutation of q and k); RMSNorm is
``F.rms_norm`` in float32/float64; residual adds are fused into ``addmm``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
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


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The one RMSNorm of the product code: x [..., D] / rms(x) · weight [D]. Half precision normalises
    in float32 and casts back before the weight, as transformers' ``LlamaRMSNorm`` does."""
    if x.dtype in (torch.float32, torch.float64):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope_inv_freq(a: ModelArgs) -> Tensor:
    """RoPE's inverse frequencies [D/2] = theta^(-2i/D), computed in float64 and kept in float32 whatever
    the model's dtype (as transformers keeps its rotary tables)."""
    return (1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim))).float()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


class KVCache:
    """Keys and values for ``num_slots`` sequences of up to ``max_len`` tokens, per layer.

    Layout per layer: [num_slots, max_len, num_kv_heads, head_dim]. Lengths live with the caller.
    Keys are stored with each head's RoPE halves interleaved (see the module docstring).
    """

    def __init__(self, args: ModelArgs, num_slots: int, max_len: int, dtype: torch.dtype) -> None:
        shape = (num_slots, max_len, args.num_kv_heads, args.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(args.num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(args.num_layers)]
        self.num_slots, self.max_len = num_slots, max_len


@dataclass
class _Group:
    """Sequences with the same number T of new tokens: one attention call."""

    tok: Tensor | None  # [Bg*T] indices into the flat tokens (None: all N tokens, in order)
    slot: int  # first slot when ``contiguous``
    slot_t: Tensor | None  # [Bg] slots, when they are not a contiguous range
    bg: int
    t: int
    kv_len: int  # L: keys each call reads (the longest sequence in the group)
    mask: Tensor | None  # [Bg, 1, g*T, L] bool (g = query heads per kv head), True = may attend; None: all L keys (or causal)
    causal: bool  # one sequence starting at 0: plain causal mask
    qpos: Tensor | None = None  # [Bg, T] positions of the group's new tokens, where ``mask`` is built from them


@dataclass
class ForwardPlan:
    """Where each of the N flat tokens goes: positions, cache writes, attention groups, RoPE."""

    n: int
    pos: Tensor  # [N] int64 absolute positions
    write: tuple[int, int] | tuple[Tensor, Tensor]  # (slot, first position) of one sequence, or ([N] slots, [N] positions)
    rope: Tensor  # [N, 1, D/2] complex: e^{i pos theta_j}
    groups: list[_Group]


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

    def forward(self, x: Tensor, p: ForwardPlan, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        # x [N, hidden]; k_cache, v_cache [S, M, Hkv, D]
        a = self.a
        N = x.shape[0]
        H, Hkv, D = a.num_heads, a.num_kv_heads, a.head_dim
        nq, nkv = H * D, Hkv * D
        qkv = F.linear(rms_norm(x, self.attn_norm.weight, a.rms_norm_eps), self.wqkv.weight, self.wqkv.bias)
        qk = qkv[:, : nq + nkv].view(N, H + Hkv, D)
        if self.q_norm is not None and self.k_norm is not None:
            qk = torch.cat([rms_norm(qk[:, :H], self.q_norm.weight, a.rms_norm_eps),
                            rms_norm(qk[:, H:], self.k_norm.weight, a.rms_norm_eps)], 1)
        qk = _rope(qk, p.rope)  # [N, H+Hkv, D]
        k, v = qk[:, H:], qkv[:, nq + nkv :].view(N, Hkv, D)
        if len(p.write) == 2 and isinstance(p.write[0], int):
            slot, p0 = p.write  # one sequence: its new tokens are a contiguous range of its slot
            k_cache[slot, p0 : p0 + N] = k
            v_cache[slot, p0 : p0 + N] = v
        else:
            k_cache.index_put_(p.write, k)  # type: ignore[arg-type]
            v_cache.index_put_(p.write, v)  # type: ignore[arg-type]
        o = _attention(qk[:, :H], p, k_cache, v_cache, Hkv)  # [N, H*D]
        x = torch.addmm(x, o, self.wo.weight.t())
        gu = F.linear(rms_norm(x, self.ffn_norm.weight, a.rms_norm_eps), self.w13.weight)
        inter = gu.shape[1] // 2
        return torch.addmm(x, F.silu(gu[:, :inter]) * gu[:, inter:], self.w2.weight.t())


def _rope(qk: Tensor, rope: Tensor) -> Tensor:  # qk [N, heads, D] (halves interleaved), rope [N, 1, D/2]
    shape = qk.shape
    xf = qk if qk.dtype in (torch.float32, torch.float64) else qk.float()
    out = torch.view_as_real(torch.view_as_complex(xf.unflatten(-1, (-1, 2))) * rope).flatten(-2)
    return out.to(qk.dtype).view(shape)


def _attention(q: Tensor, p: ForwardPlan, k_cache: Tensor, v_cache: Tensor, hkv: int) -> Tensor:
    """q [N, H, D] -> [N, H*D]: each sequence's new tokens attend causally to its own cache.

    Grouped-query attention is folded: the g = H / Hkv query heads that share a key/value head
    become g*T query rows of that head (a view when T = 1), so keys and values are never repeated."""
    N, H, D = q.shape
    g_heads = H // hkv
    out = None if len(p.groups) == 1 and p.groups[0].tok is None else q.new_empty(N, H * D)
    for g in p.groups:
        qg = q if g.tok is None else q[g.tok]
        if g.slot_t is None:
            ks, vs = k_cache[g.slot : g.slot + g.bg, : g.kv_len], v_cache[g.slot : g.slot + g.bg, : g.kv_len]
        else:
            ks = k_cache[:, : g.kv_len].index_select(0, g.slot_t)
            vs = v_cache[:, : g.kv_len].index_select(0, g.slot_t)
        ks, vs = ks.transpose(1, 2), vs.transpose(1, 2)  # [Bg, Hkv, L, D]
        if g.causal:  # one prompt from position 0: plain causal attention, heads unfolded
            o = F.scaled_dot_product_attention(qg.view(g.bg, g.t, H, D).transpose(1, 2), ks, vs, is_causal=True,
                                               enable_gqa=H != hkv)  # [Bg, H, T, D]
            o = o.transpose(1, 2).reshape(g.bg * g.t, H * D)
        elif g.t == 1:
            o = F.scaled_dot_product_attention(qg.view(g.bg, hkv, g_heads, D), ks, vs, attn_mask=g.mask)
            o = o.view(g.bg, H * D)  # [Bg, Hkv, g, D] is already head-major
        else:  # rows (j, t) of kv head h: query head h*g + j at new token t
            qf = qg.view(g.bg, g.t, hkv, g_heads, D).permute(0, 2, 3, 1, 4).reshape(g.bg, hkv, g_heads * g.t, D)
            o = F.scaled_dot_product_attention(qf, ks, vs, attn_mask=g.mask)  # [Bg, Hkv, g*T, D]
            o = o.view(g.bg, hkv, g_heads, g.t, D).permute(0, 3, 1, 2, 4).reshape(g.bg * g.t, H * D)
        if out is None:
            return o
        out[g.tok] = o
    assert out is not None
    return out


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs) -> None:
        super().__init__()
        self.args = a
        self.embed = nn.Embedding(a.vocab_size, a.hidden_size)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.num_layers))
        self.norm = RMSNorm(a.hidden_size, a.rms_norm_eps)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        self._rope_table: Tensor | None = None  # [positions, D/2] complex, grown on demand

    def new_cache(self, num_slots: int, max_len: int) -> KVCache:
        return KVCache(self.args, num_slots, max_len, self.embed.weight.dtype)

    # -- the attention layout ----------------------------------------------------------------------
    def plan(self, slots: Sequence[int], starts: Sequence[int], lens: Sequence[int], cache: KVCache) -> ForwardPlan:
        """Metadata for one flat forward: sequence b feeds ``lens[b]`` new tokens at positions
        ``starts[b]..`` into cache slot ``slots[b]`` (flat tokens are sequence 0's, then 1's, ...)."""
        B = len(slots)
        if not B == len(starts) == len(lens) or min(lens, default=0) < 1:
            raise ValueError("plan: slots, starts and lens must have one entry per sequence, lens >= 1")
        ends = [s + n for s, n in zip(starts, lens, strict=True)]
        if max(ends) > cache.max_len:
            raise ValueError(f"sequence longer than the KV cache ({max(ends)} > {cache.max_len} positions)")
        N = sum(lens)
        if B == 1:
            pos = torch.arange(starts[0], ends[0])
            write: tuple[int, int] | tuple[Tensor, Tensor] = (int(slots[0]), int(starts[0]))
        else:
            pos = torch.tensor([p for s, e in zip(starts, ends, strict=True) for p in range(s, e)])
            write = (torch.tensor([sl for sl, n in zip(slots, lens, strict=True) for _ in range(n)]), pos)
        by_len: dict[int, list[int]] = {}
        for b, n in enumerate(lens):
            by_len.setdefault(n, []).append(b)
        groups = []
        first = [0] * B
        for b in range(1, B):
            first[b] = first[b - 1] + lens[b - 1]
        for t, rows in by_len.items():
            bg = len(rows)
            rows.sort(key=lambda b: slots[b])  # slot order: a contiguous run of slots is read as a view, not copied
            tok = None
            if bg != B or rows != list(range(B)):
                tok = torch.tensor([first[b] + j for b in rows for j in range(t)])
            gslots = [int(slots[b]) for b in rows]
            contiguous = gslots == list(range(gslots[0], gslots[0] + bg))
            kv_len = max(ends[b] for b in rows)
            mask, causal = None, False
            if bg == 1 and ends[rows[0]] == kv_len and (t == 1 or starts[rows[0]] == 0):
                causal = t > 1  # one sequence: all its keys (decode) or plain causal (prefill from 0)
            else:
                qpos = torch.tensor([[starts[b] + j for j in range(t)] for b in rows])  # [Bg, T]
                mask = (torch.arange(kv_len)[None, None, :] <= qpos[:, :, None])[:, None]  # [Bg, 1, T, L]
                if t > 1:  # the folded query rows (j, t): mask row t repeated for each of the g heads
                    gh = self.args.num_heads // self.args.num_kv_heads
                    mask = mask[:, :, None].expand(bg, 1, gh, t, kv_len).reshape(bg, 1, gh * t, kv_len)
            groups.append(_Group(tok, gslots[0], None if contiguous else torch.tensor(gslots), bg, t, kv_len,
                                 mask, causal, None if mask is None else qpos))
        return ForwardPlan(N, pos, write, self._rope_at(pos, max(ends)), groups)

    def advance(self, p: ForwardPlan, cache: KVCache) -> ForwardPlan:
        """The plan for the next token of every sequence of a one-token-per-sequence plan (a decode
        or drafting step), made from ``p`` by tensor ops: positions, cache writes, masks and RoPE
        move on by one without reading anything back from the tensors."""
        if any(g.t != 1 for g in p.groups):
            raise ValueError("advance: only plans with one new token per sequence move on by one")
        upto = max(g.kv_len for g in p.groups) + 1
        if upto > cache.max_len:
            raise ValueError(f"sequence longer than the KV cache ({upto} > {cache.max_len} positions)")
        pos = p.pos + 1
        if isinstance(p.write[0], int):
            write: tuple[int, int] | tuple[Tensor, Tensor] = (p.write[0], p.write[1] + 1)  # type: ignore[operator]
        else:
            write = (p.write[0], pos)  # type: ignore[assignment]
        groups = []
        for g in p.groups:
            mask, qpos = None, None
            if g.qpos is not None:
                qpos = g.qpos + 1
                mask = (torch.arange(g.kv_len + 1)[None, None, :] <= qpos[:, :, None])[:, None]  # [Bg, 1, 1, L+1]
            groups.append(_Group(g.tok, g.slot, g.slot_t, g.bg, 1, g.kv_len + 1, mask, False, qpos))
        return ForwardPlan(p.n, pos, write, self._rope_at(pos, upto), groups)

    def _rope_at(self, pos: Tensor, upto: int) -> Tensor:
        tab = self._rope_table
        if tab is None or tab.shape[0] < upto:
            n = max(upto, 2 * (0 if tab is None else tab.shape[0]), 256)
            inv_freq = rope_inv_freq(self.args).to(self.embed.weight.device)  # float32 whatever the model's dtype
            freqs = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [n, D/2]
            cdt = torch.float64 if self.embed.weight.dtype == torch.float64 else torch.float32
            tab = torch.polar(torch.ones_like(freqs, dtype=cdt), freqs.to(cdt))
            self._rope_table = tab
        return tab[pos][:, None]  # [N, 1, D/2]

    # -- forward -----------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward_flat(
        self,
        tokens: Tensor,  # [N] int64: sequence 0's new tokens, then sequence 1's, ...
        slots: Sequence[int],  # [B] cache slot of each sequence
        starts: Sequence[int],  # [B] tokens already cached for each sequence (its first new token's position)
        lens: Sequence[int],  # [B] new tokens of each sequence (>= 1), sum = N
        cache: KVCache,
        logits_at: Tensor | None = None,  # [M] int64 flat indices to return logits for (None: all N)
        plan: ForwardPlan | None = None,  # a plan made by ``plan`` for these arguments (saves rebuilding it)
    ) -> Tensor:  # logits [M or N, V] float32
        return self._forward(tokens, slots, starts, lens, cache, logits_at, plan, ())[0]

    @torch.inference_mode()
    def forward_flat_hidden(
        self,
        tokens: Tensor,  # [N] int64, as for ``forward_flat``
        slots: Sequence[int],
        starts: Sequence[int],
        lens: Sequence[int],
        cache: KVCache,
        layers: Sequence[int | str],  # which hidden states, in this order (see below)
        logits_at: Tensor | None = None,
        plan: ForwardPlan | None = None,
    ) -> tuple[Tensor, Tensor]:  # logits [M or N, V] float32, hidden [N, len(layers) * hidden]
        """``forward_flat`` that also returns the hidden states a hidden-state drafter reads, at all N
        tokens, concatenated in ``layers`` order. Ids follow vLLM's EAGLE-3 auxiliary-layer ids: ``i``
        (0..num_layers) is the residual stream entering layer i (0: the embeddings; num_layers: the
        last layer's output before the final norm); ``"final"`` is the final-norm output, what vLLM
        hands an MTP / EAGLE-1 head."""
        return self._forward(tokens, slots, starts, lens, cache, logits_at, plan, tuple(layers))

    def _forward(
        self, tokens: Tensor, slots: Sequence[int], starts: Sequence[int], lens: Sequence[int], cache: KVCache,
        logits_at: Tensor | None, plan: ForwardPlan | None, layers: tuple[int | str, ...],
    ) -> tuple[Tensor, Tensor]:
        bad = [i for i in layers if i != "final" and not (isinstance(i, int) and 0 <= i <= len(self.layers))]
        if bad:
            raise ValueError(f"hidden-state layer id {bad[0]!r} not in 0..{len(self.layers)} or 'final'")
        p = plan or self.plan(slots, starts, lens, cache)
        x = F.embedding(tokens, self.embed.weight)
        grab: dict[int | str, Tensor] = {0: x} if 0 in layers else {}
        for i, layer in enumerate(self.layers):
            x = layer(x, p, cache.k[i], cache.v[i])
            if i + 1 in layers:
                grab[i + 1] = x
        eps = self.args.rms_norm_eps
        if "final" in layers:
            grab["final"] = rms_norm(x, self.norm.weight, eps)
        hidden = torch.cat([grab[i] for i in layers], -1) if layers else x[:, :0]
        if logits_at is not None:
            x = x[logits_at]
        normed = grab["final"][logits_at] if "final" in layers and logits_at is not None else (
            grab["final"] if "final" in layers else rms_norm(x, self.norm.weight, eps))
        return F.linear(normed, self.lm_head.weight).float(), hidden

    @torch.inference_mode()
    def forward(  # type: ignore[override]
        self,
        tokens: Tensor,  # [B, T] int64, right-padded (padding rows' outputs are garbage, ignore them)
        slots: Tensor,  # [B] int64, cache slot of each row
        start: Tensor,  # [B] int64, tokens already cached for each row (the first new token's position)
        cache: KVCache,
        last_only: Tensor | None = None,  # [B] int64: return logits only at this index of each row
    ) -> Tensor:  # logits [B, T, V] float32, or [B, 1, V] when last_only is given
        """The padded form: every row feeds T tokens (one flat forward of B*T tokens)."""
        B, T = tokens.shape
        at = None if last_only is None else torch.arange(B) * T + last_only
        logits = self.forward_flat(tokens.reshape(-1), slots.tolist(), start.tolist(), [T] * B, cache, at)
        return logits.view(B, 1 if at is not None else T, -1)


__all__ = ["Block", "ForwardPlan", "KVCache", "ModelArgs", "ModelLoadError", "RMSNorm", "Transformer", "rms_norm", "rope_inv_freq"]
