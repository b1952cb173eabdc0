"""Hidden-state draft heads (EAGLE-3, MTP) as vLLM 0.32 runs them: the modules, their checkpoint
format, and the one computation both the engine and offline replay use.

Knows nothing about requests or the engine. A head is one decoder layer that reads, at draft position
p, the embedding of token t[p+1] and a hidden state h[p], and predicts t[p+2]:

* level 0 (the proposer's first pass): h[p] is the *target's* hidden state at p — for EAGLE-3 the
  auxiliary layers' residual streams through ``fc``; for MTP the target's final-norm output;
* level s >= 1 (chain step s+1): h[p] is the head's *own* output at p-1 from level s-1, and the query
  attends to level-0 keys at positions <= p-s (the positions the target verified before the chain
  started) plus its own chain's keys at p-s+1..p (levels 1..s on the diagonal).

That is exactly what vLLM's ``SpecDecodeBaseProposer.propose`` computes for a chain that starts at
p-s: the first pass writes level-0 keys for every verified position, each later step appends one key
and reads back the hidden state it produced (``hidden_prenorm`` for EAGLE-3, ``shared_head(...)`` for
DeepSeek-style MTP), and the next target step overwrites the chain's keys with level-0 ones.

Layer math (vLLM ``llama_eagle3.py``, ``deepseek_mtp.py``):
  EAGLE-3: x = [input_layernorm(emb), hidden_norm(h)], residual = h (``norm_before_residual``:
  hidden_norm(h)); attention over x (2H -> H); post_attention_layernorm(attn + residual) -> MLP;
  pre = mlp + attn + residual; logits = lm_head(norm(pre)) over the draft vocabulary, mapped to
  target ids by ``d2t`` (target = draft + d2t[draft]); the chain reads ``pre``.
  MTP: emb = 0 at position 0; x0 = eh_proj([enorm(emb), hnorm(h)]); a Llama decoder block;
  pre = block output; logits = head(shared_head.norm(pre)); the chain reads shared_head.norm(pre).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from specgauge.nn.weights import read_safetensors

HeadKind = Literal["eagle3", "mtp"]


class HeadLoadError(ValueError):
    """A head directory cannot be loaded; the message says why."""


@dataclass(frozen=True)
class HeadConfig:
    kind: HeadKind
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: tuple[int | str, ...]  # target hidden states read at level 0 (model.forward_flat_hidden ids)
    norm_before_residual: bool = False

    @classmethod
    def from_dir(cls, head_dir: str | Path, target_num_layers: int | None = None) -> HeadConfig:
        path = Path(head_dir) / "config.json"
        if not path.is_file():
            raise HeadLoadError(f"{head_dir}: no config.json (expected an EAGLE-3 or MTP head directory)")
        cfg = json.loads(path.read_text())
        arch = " ".join(cfg.get("architectures") or [])
        kind: HeadKind
        if "Eagle3" in arch:
            kind = "eagle3"
        elif "MTP" in arch:
            kind = "mtp"
        else:
            raise HeadLoadError(f"{head_dir}: architectures {arch or 'none'!r} is neither an EAGLE-3 head "
                                "(LlamaForCausalLMEagle3) nor an MTP head (*MTP*)")
        if cfg.get("num_hidden_layers", 1) != 1:
            raise HeadLoadError(f"{head_dir}: heads with {cfg['num_hidden_layers']} layers are not supported (only 1)")
        n_heads = cfg["num_attention_heads"]
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        hidden = cfg["hidden_size"]
        eagle = cfg.get("eagle_config") or {}
        if kind == "eagle3":
            ids = cfg.get("eagle_aux_hidden_state_layer_ids") or eagle.get("eagle_aux_hidden_state_layer_ids")
            if not ids:
                if target_num_layers is None:
                    raise HeadLoadError(f"{head_dir}: no eagle_aux_hidden_state_layer_ids and no target to default from")
                n = target_num_layers  # vLLM's default (interfaces.py), deduplicated and sorted as vLLM does
                ids = sorted({2, n // 2, n - 3})
            aux: tuple[int | str, ...] = tuple(int(i) for i in ids)
        else:
            aux = ("final",)
        return cls(
            kind=kind, hidden_size=hidden, intermediate_size=cfg["intermediate_size"], num_heads=n_heads,
            num_kv_heads=cfg.get("num_key_value_heads") or n_heads, head_dim=cfg.get("head_dim") or hidden // n_heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            vocab_size=cfg["vocab_size"], draft_vocab_size=cfg.get("draft_vocab_size") or cfg["vocab_size"],
            target_hidden_size=cfg.get("target_hidden_size") or hidden, aux_layer_ids=aux,
            norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        )


def _rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:  # HF rotate_half RoPE; x [N, h, D], cos/sin [N, 1, D]
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Head(nn.Module):
    """One EAGLE-3 or MTP decoder layer; embeddings (and an MTP head's lm_head) are the target's."""

    def __init__(self, c: HeadConfig, embed: Tensor, target_lm_head: Tensor | None = None) -> None:
        super().__init__()
        self.c = c
        H, q, kv = c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        n = lambda d: nn.Parameter(torch.ones(d))  # noqa: E731
        qkv_in = 2 * H if c.kind == "eagle3" else H
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(qkv_in, q, False), nn.Linear(qkv_in, kv, False), nn.Linear(qkv_in, kv, False)
        self.o_proj = nn.Linear(q, H, False)
        self.gate_proj, self.up_proj = nn.Linear(H, c.intermediate_size, False), nn.Linear(H, c.intermediate_size, False)
        self.down_proj = nn.Linear(c.intermediate_size, H, False)
        self.input_layernorm, self.post_attention_layernorm, self.norm = n(H), n(H), n(H)
        self.register_buffer("embed", embed, persistent=False)
        if c.kind == "eagle3":
            self.fc = nn.Linear(c.target_hidden_size * len(c.aux_layer_ids), H, False)
            self.hidden_norm = n(H)
            self.lm_head = nn.Linear(H, c.draft_vocab_size, False)
            self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        else:
            self.enorm, self.hnorm = n(H), n(H)
            self.eh_proj = nn.Linear(2 * H, H, False)
            self.lm_head = nn.Linear(H, c.vocab_size, False)
            if target_lm_head is not None:
                self.lm_head.weight = nn.Parameter(target_lm_head, requires_grad=False)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)

    # -- the layer, split where attention happens ----------------------------------------------------
    def combine(self, target_hidden: Tensor) -> Tensor:
        """Level-0 hidden input from the target's hidden states [N, len(aux) * Ht] (EAGLE-3: ``fc``)."""
        return self.fc(target_hidden) if self.c.kind == "eagle3" else target_hidden

    def qkv(self, tokens: Tensor, pos: Tensor, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Inputs (token ids [N], positions [N], hidden [N, H]) -> q [N, h, D], k, v [N, hkv, D], residual [N, H]."""
        c, eps = self.c, self.c.rms_norm_eps
        emb = F.embedding(tokens, self.embed).to(h.dtype)
        if c.kind == "eagle3":
            hn = _rms(h, self.hidden_norm, eps)
            res = hn if c.norm_before_residual else h
            x = torch.cat([_rms(emb, self.input_layernorm, eps), hn], -1)
        else:
            emb = torch.where((pos == 0)[:, None], torch.zeros_like(emb), emb)  # vLLM: MTP masks position 0
            res = self.eh_proj(torch.cat([_rms(emb, self.enorm, eps), _rms(h, self.hnorm, eps)], -1))
            x = _rms(res, self.input_layernorm, eps)
        N = x.shape[0]
        freqs = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb_f = torch.cat([freqs, freqs], -1)[:, None]
        cos, sin = emb_f.cos().to(x.dtype), emb_f.sin().to(x.dtype)
        q = _rotate(self.q_proj(x).view(N, c.num_heads, c.head_dim), cos, sin)
        k = _rotate(self.k_proj(x).view(N, c.num_kv_heads, c.head_dim), cos, sin)
        return q, k, self.v_proj(x).view(N, c.num_kv_heads, c.head_dim), res

    def finish(self, attn: Tensor, res: Tensor) -> tuple[Tensor, Tensor]:
        """Attention output [N, h*D] + residual -> (draft-vocabulary logits [N, Vd], hidden the chain reads [N, H])."""
        eps = self.c.rms_norm_eps
        r2 = self.o_proj(attn) + res
        y = _rms(r2, self.post_attention_layernorm, eps)
        pre = self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y)) + r2
        normed = _rms(pre, self.norm, eps)
        logits = self.lm_head(normed).float()
        return logits, (pre if self.c.kind == "eagle3" else normed)

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """Draft-vocabulary ids -> target ids (vLLM: target = draft + d2t[draft])."""
        return draft_ids + self.d2t[draft_ids] if self.c.kind == "eagle3" else draft_ids

    # -- attention ---------------------------------------------------------------------------------
    def attend(self, q: Tensor, keys: Sequence[tuple[Tensor, Tensor, Tensor]]) -> Tensor:
        """q [N, h, D] against key groups; each group (k [N or M, hkv, D], v, mask [N, M] bool or None
        for an elementwise diagonal key: k, v [N, hkv, D]). One softmax over all groups -> [N, h*D]."""
        c = self.c
        N, g = q.shape[0], c.num_heads // c.num_kv_heads
        qf = q.view(N, c.num_kv_heads, g, c.head_dim)
        scale = 1.0 / math.sqrt(c.head_dim)
        scores, values = [], []
        for k, v, mask in keys:
            if mask is None:  # one key per query row
                s = torch.einsum("nhgd,nhd->nhg", qf, k)[..., None] * scale  # [N, hkv, g, 1]
            else:
                s = torch.einsum("nhgd,mhd->nhgm", qf, k) * scale  # [N, hkv, g, M]
                s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
            scores.append(s)
            values.append((v, mask is None))
        w = torch.softmax(torch.cat(scores, -1), -1)
        out = torch.zeros(N, c.num_kv_heads, g, c.head_dim, dtype=q.dtype)
        o = 0
        for (v, diag), s in zip(values, scores, strict=True):
            m = s.shape[-1]
            ws = w[..., o : o + m]
            out = out + (ws * v[:, :, None, :] if diag else torch.einsum("nhgm,mhd->nhgd", ws, v))
            o += m
        return out.reshape(N, c.num_heads * c.head_dim)

    # -- all levels over one sequence ---------------------------------------------------------------
    def levels(self, next_tokens: Tensor, target_hidden: Tensor, n_levels: int, start: int = 0) -> list[Tensor]:
        """Draft logits for levels 0..n_levels-1 over one sequence of T draft positions:
        ``next_tokens[p]`` = t[p+1], ``target_hidden[p]`` = the target's hidden states at p. Level 0
        covers all T rows; level s >= 1 rows ``start``..T-1 only (row i is position start + i): row p
        of level s is chain step s+1 of the chain that starts at p - s (chains starting before
        ``start - 1`` and rows p < s are meaningless). Fed the true tokens: exact for acceptance,
        since a chain step only counts if every earlier one drafted the true token. Also the
        training forward (EAGLE-3's training-time test, ``start`` 0)."""
        T = next_tokens.shape[0]
        pos = torch.arange(T)
        q0, k0, v0, res = self.qkv(next_tokens, pos, self.combine(target_hidden))
        causal = pos[None, :] <= pos[:, None]  # [T, T]
        logits, h = self.finish(self.attend(q0, [(k0, v0, causal)]), res)
        out = [logits]
        a = max(0, min(start, T - 1))
        rows, toks = pos[a:], next_tokens[a:]
        prev = h[a - 1 : T - 1] if a else torch.cat([h[:1] * 0, h[:-1]])  # level 0's output at p-1
        chain: list[tuple[Tensor, Tensor]] = []  # level j's keys/values at rows a..T-1
        for s in range(1, n_levels):
            q, k, v, res = self.qkv(toks, rows, prev)
            chain.append((k, v))
            tf_mask = pos[None, :] <= (rows[:, None] - s).clamp(min=0)  # level-0 keys at <= p-s
            groups = [(k0, v0, tf_mask)]
            for j, (kj, vj) in enumerate(chain, start=1):  # level j's key at position p - (s - j)
                groups.append((_shift(kj, s - j), _shift(vj, s - j), None))
            logits, h = self.finish(self.attend(q, groups), res)
            out.append(logits)
            prev = torch.cat([h[:1] * 0, h[:-1]])  # own hidden from this level at p-1 (row a-1: no chain needs it)
        return out


def _shift(x: Tensor, by: int) -> Tensor:
    """x[p - by] at row p (rows < by: zeros; they belong to no chain)."""
    return x if by == 0 else torch.cat([torch.zeros_like(x[:by]), x[:-by]])


# -- checkpoint format ---------------------------------------------------------------------------------
_EAGLE3_NAMES = {  # our parameter -> name in a vLLM EAGLE-3 checkpoint (weights of 'midlayer.*')
    "q_proj.weight": "midlayer.self_attn.q_proj.weight", "k_proj.weight": "midlayer.self_attn.k_proj.weight",
    "v_proj.weight": "midlayer.self_attn.v_proj.weight", "o_proj.weight": "midlayer.self_attn.o_proj.weight",
    "gate_proj.weight": "midlayer.mlp.gate_proj.weight", "up_proj.weight": "midlayer.mlp.up_proj.weight",
    "down_proj.weight": "midlayer.mlp.down_proj.weight", "input_layernorm": "midlayer.input_layernorm.weight",
    "post_attention_layernorm": "midlayer.post_attention_layernorm.weight",
    "hidden_norm": "midlayer.hidden_norm.weight", "norm": "norm.weight", "fc.weight": "fc.weight",
    "lm_head.weight": "lm_head.weight", "d2t": "d2t",
}


def _mtp_names(layer: int) -> dict[str, str]:
    """DeepSeek-V3 MTP layer names (``model.layers.{num_hidden_layers}.*``), with a Llama block."""
    p = f"model.layers.{layer}."
    return {
        "q_proj.weight": p + "self_attn.q_proj.weight", "k_proj.weight": p + "self_attn.k_proj.weight",
        "v_proj.weight": p + "self_attn.v_proj.weight", "o_proj.weight": p + "self_attn.o_proj.weight",
        "gate_proj.weight": p + "mlp.gate_proj.weight", "up_proj.weight": p + "mlp.up_proj.weight",
        "down_proj.weight": p + "mlp.down_proj.weight", "input_layernorm": p + "input_layernorm.weight",
        "post_attention_layernorm": p + "post_attention_layernorm.weight", "enorm": p + "enorm.weight",
        "hnorm": p + "hnorm.weight", "eh_proj.weight": p + "eh_proj.weight", "norm": p + "shared_head.norm.weight",
        "lm_head.weight": p + "shared_head.head.weight",
    }


def checkpoint_names(c: HeadConfig, target_num_layers: int) -> dict[str, str]:
    return dict(_EAGLE3_NAMES) if c.kind == "eagle3" else _mtp_names(target_num_layers)


def load_head(head_dir: str | Path, target: Any, dtype: torch.dtype = torch.float32) -> Head:
    """Load a head for ``target`` (a :class:`specgauge.nn.transformer.Transformer`): embeddings are the
    target's (vLLM shares them when the checkpoint has none), as is an MTP head's lm_head when absent."""
    head_dir = Path(head_dir)
    ta = target.args
    c = HeadConfig.from_dir(head_dir, ta.num_layers)
    if c.vocab_size != ta.vocab_size:
        raise HeadLoadError(f"{head_dir}: vocab_size {c.vocab_size} but the target has {ta.vocab_size}")
    if c.target_hidden_size != ta.hidden_size:
        raise HeadLoadError(f"{head_dir}: target_hidden_size {c.target_hidden_size} but the target's hidden size is {ta.hidden_size}")
    for i in c.aux_layer_ids:
        if i != "final" and not 0 <= int(i) <= ta.num_layers:
            raise HeadLoadError(f"{head_dir}: auxiliary layer id {i} outside the target's 0..{ta.num_layers}")
    sd = read_safetensors(head_dir, HeadLoadError, "")
    emb = sd.get("embed_tokens.weight", sd.get(f"model.layers.{ta.num_layers}.embed_tokens.weight"))
    names = checkpoint_names(c, ta.num_layers)
    lm = None
    if c.kind == "mtp" and names["lm_head.weight"] not in sd:
        lm = target.lm_head.weight.detach().to(dtype)
        names.pop("lm_head.weight")
    head = Head(c, (emb if emb is not None else target.embed.weight).detach().to(dtype), lm)
    state = {}
    for ours, theirs in names.items():
        if theirs not in sd:
            raise HeadLoadError(f"{head_dir}: weight {theirs!r} missing")
        state[ours] = sd[theirs]
    missing, unexpected = head.load_state_dict(state, strict=False)
    left = [m for m in missing if m != "lm_head.weight" or lm is None]
    if left or unexpected:
        raise HeadLoadError(f"{head_dir}: weights do not fit the config: missing {left}, unexpected {unexpected}")
    head = head.to(dtype)
    head.inv_freq = head.inv_freq.float()
    if c.kind == "eagle3":
        head.d2t = head.d2t.long()
        tgt = torch.arange(c.draft_vocab_size) + head.d2t
        if int(tgt.min()) < 0 or int(tgt.max()) >= c.vocab_size:
            raise HeadLoadError(f"{head_dir}: d2t maps draft ids outside the target vocabulary")
    return head.eval()


def head_state(head: Head, target_num_layers: int) -> dict[str, Tensor]:
    """The checkpoint tensors of ``head`` under vLLM's names (EAGLE-3 adds ``t2d``, a bool mask of
    the target ids in the draft vocabulary, as EAGLE-3 checkpoints carry)."""
    names = checkpoint_names(head.c, target_num_layers)
    sd = dict(head.state_dict())
    out = {theirs: sd[ours].detach().contiguous() for ours, theirs in names.items()
           if ours in sd and not (ours == "lm_head.weight" and not head.lm_head.weight.requires_grad)}
    if head.c.kind == "eagle3":
        t2d = torch.zeros(head.c.vocab_size, dtype=torch.bool)
        t2d[torch.arange(head.c.draft_vocab_size) + head.d2t] = True
        out["t2d"] = t2d
    return out


# -- making and saving heads (the training script, tests) ----------------------------------------------
def head_config(kind: HeadKind, target_args: Any, draft_vocab_size: int | None = None,
                aux_layer_ids: Sequence[int] | None = None, intermediate_size: int | None = None) -> HeadConfig:
    """A one-layer head shaped like ``target_args`` (a ModelArgs)."""
    a = target_args
    aux: tuple[int | str, ...]
    if kind == "eagle3":
        n = a.num_layers
        aux = tuple(aux_layer_ids) if aux_layer_ids else tuple(sorted({2, n // 2, n - 3}))
    else:
        aux = ("final",)
    return HeadConfig(kind, a.hidden_size, intermediate_size or a.intermediate_size, a.num_heads, a.num_kv_heads,
                      a.head_dim, a.rms_norm_eps, a.rope_theta, a.vocab_size,
                      draft_vocab_size if kind == "eagle3" and draft_vocab_size else a.vocab_size, a.hidden_size, aux)


def new_head(c: HeadConfig, target: Any, draft_to_target: Tensor | None = None, seed: int = 0) -> Head:
    """A freshly initialised head for ``target`` (float32); EAGLE-3's draft vocabulary is the sorted
    target ids ``draft_to_target`` (all ids when None)."""
    torch.manual_seed(seed)
    lm = target.lm_head.weight.detach().float() if c.kind == "mtp" else None
    head = Head(c, target.embed.weight.detach().float(), lm)
    for m in head.modules():
        if isinstance(m, nn.Linear) and m.weight.requires_grad:
            nn.init.normal_(m.weight, std=0.02)
    if c.kind == "eagle3":
        ids = torch.arange(c.draft_vocab_size) if draft_to_target is None else torch.as_tensor(draft_to_target).long()
        if ids.numel() != c.draft_vocab_size or bool((ids[1:] <= ids[:-1]).any()):
            raise ValueError("draft_to_target must list draft_vocab_size distinct target ids in increasing order")
        head.d2t = ids - torch.arange(c.draft_vocab_size)
    return head


def config_dict(c: HeadConfig, target_args: Any, **extra: Any) -> dict[str, Any]:
    """config.json of a head: vLLM's fields (EAGLE-3: ``LlamaForCausalLMEagle3``; MTP: DeepSeek-V3's
    ``num_nextn_predict_layers`` layout on a Llama block)."""
    base = {
        "model_type": "llama", "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim,
        "num_hidden_layers": 1, "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "max_position_embeddings": 2048, "vocab_size": c.vocab_size, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    if c.kind == "eagle3":
        base.update(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=c.draft_vocab_size,
                    target_hidden_size=c.hidden_size, norm_before_residual=c.norm_before_residual,
                    eagle_config={"eagle_aux_hidden_state_layer_ids": list(c.aux_layer_ids), "use_aux_hidden_state": True})
    else:
        base.update(architectures=["SpecgaugeLlamaMTPModel"], num_nextn_predict_layers=1,
                    mtp_layer_index=target_args.num_layers)
    base.update(extra)
    return base


def save_head(head: Head, target_args: Any, out: str | Path, dtype: torch.dtype = torch.bfloat16, **extra: Any) -> Path:
    """Write config.json + model.safetensors (float weights in ``dtype``; d2t int64, t2d bool)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in head_state(head, target_args.num_layers).items()}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config_dict(head.c, target_args, **extra), indent=2) + "\n")
    return out
