"""EAGLE-3 as vLLM 0.32 runs it (``model_executor/models/llama_eagle3.py``), in every layout it is
published in: vLLM / EAGLE / SpecForge (``LlamaForCausalLMEagle3``, weights ``midlayer.*``) and
speculators (nested config, weights ``layers.{i}.*``, ``norm_before_residual`` / ``norm_before_fc`` /
``fc_norm`` / ``norm_output``, ``d2t`` / ``t2d``, embeddings and lm_head shared with the target when the
checkpoint has none).

The decoder layers are transformers' own of the head's family (``llama`` -> ``LlamaDecoderLayer``,
``qwen3`` -> ``Qwen3DecoderLayer``); the first one is subclassed as speculators'
``eagle3/model_definitions.py`` does, its changes fenced. The layer math, split where attention happens
(``chain.ChainHead``):

  level-0 input: combine(aux) = fc(fc_norm_j(aux_j) side by side, or input_norm(aux) if norm_before_fc)
  layer 0:  x = [input_layernorm(embed(t)), hidden_norm(h)]  (2H wide), residual = h (or hidden_norm(h)
            if norm_before_residual); attention over x; r = o_proj(attn) + residual;
            out = mlp(post_attention_layernorm(r)) + r
  layer i:  the family's ordinary layer over the residual stream
  exit:     logits = lm_head(norm(out)) over the draft vocabulary (target id = draft + d2t[draft]);
            the chain reads out (``hidden_prenorm``), or norm(out) if norm_output.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.config import HeadLoadError, HeadSpec
from specgauge.drafters.heads.family import Family, Rope, attention_qkv, family
from specgauge.drafters.heads.loader import HeadModule, module_names, register_head
from specgauge.targets.base import LayerId, Target
from specgauge.targets.layers import default_eagle3_aux_ids, vllm_aux_order


def eagle3_first_layer(fam: Family) -> type[nn.Module]:
    """The family's decoder layer with EAGLE-3's first-layer changes (2H-wide q/k/v, ``hidden_norm``)."""

    class Eagle3FirstLayer(fam.decoder_layer):  # type: ignore[misc,name-defined]
        def __init__(self, config: Any, layer_idx: int, norm_before_residual: bool) -> None:
            super().__init__(config, layer_idx)
            # ##### Start of Eagle3 modifications #####
            a, H = self.self_attn, config.hidden_size
            bias = bool(getattr(config, "attention_bias", False))
            a.q_proj = nn.Linear(2 * H, a.q_proj.out_features, bias=bias)  # previous: H
            a.k_proj = nn.Linear(2 * H, a.k_proj.out_features, bias=bias)
            a.v_proj = nn.Linear(2 * H, a.v_proj.out_features, bias=bias)
            self.hidden_norm = fam.norm(H, eps=config.rms_norm_eps)
            self.norm_before_residual = norm_before_residual
            # ##### End of Eagle3 modifications #####

    Eagle3FirstLayer.__name__ = f"{fam.decoder_layer.__name__}Eagle3First"
    return Eagle3FirstLayer


def with_d2t(sd: dict[str, Tensor], spec: HeadSpec) -> dict[str, Tensor]:
    """``d2t`` as int64; absent, the identity where the draft vocabulary is the target's (else an error)."""
    if "d2t" in sd:
        sd["d2t"] = sd["d2t"].long()
    elif spec.draft_vocab_size != spec.vocab_size:
        raise HeadLoadError(f"{spec.path}: draft_vocab_size {spec.draft_vocab_size} differs from the vocabulary "
                            f"({spec.vocab_size}) but the checkpoint has no d2t")
    else:
        sd["d2t"] = torch.zeros(spec.draft_vocab_size, dtype=torch.long)
    return sd


def check_llama_shaped(layer: nn.Module, where: str, mt: str) -> None:
    """The split in ``qkv`` / ``finish`` reads the Llama-shaped layer (input and post-attention norms,
    q/k/v/o projections, an MLP); a family with more (Gemma's sandwich norms, MLA) is refused by name."""
    a = getattr(layer, "self_attn", None)
    need = ("q_proj", "k_proj", "v_proj", "o_proj")
    extra = [n for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm") if hasattr(layer, n)]
    if a is None or not all(hasattr(a, n) for n in need) or extra or not hasattr(layer, "mlp"):
        raise HeadLoadError(f"{where}: a {mt!r} decoder layer is not Llama-shaped (q/k/v/o projections, input and "
                            "post-attention norms, an MLP); heads of that family are not modelled")


@register_head("eagle3")
class Eagle3Head(HeadModule):
    method: ClassVar[str] = "eagle3"
    architectures: ClassVar[tuple[str, ...]] = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM",
                                                "Eagle3Qwen3ForCausalLM", "Qwen3ForCausalLMEagle3")
    shared: ClassVar[dict[str, str]] = {"embed_tokens.weight": "embed", "lm_head.weight": "lm_head"}
    trained: ClassVar[tuple[str, ...]] = ("lm_head.weight",)  # a new head trains its own (draft-vocabulary) lm_head

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__()
        self.spec = spec
        c = spec.layer_config
        fam = family(c)
        H, n_aux = c.hidden_size, len(spec.aux_layer_ids)
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        first = eagle3_first_layer(fam)(c, 0, spec.flag("norm_before_residual"))
        self.layers = nn.ModuleList([first, *(fam.decoder_layer(c, i) for i in range(1, spec.num_layers))])
        for layer in self.layers:
            check_llama_shaped(layer, str(spec.path), fam.model_type)
        self.fc = nn.Linear(spec.target_hidden_size * n_aux, H, bias=False)
        eps = c.rms_norm_eps
        self.input_norm = fam.norm(spec.target_hidden_size * n_aux, eps=eps) if spec.flag("norm_before_fc") else None
        self.fc_norm = (nn.ModuleList(fam.norm(spec.target_hidden_size, eps=eps) for _ in range(n_aux))
                        if spec.flag("fc_norm") else None)
        self.norm = fam.norm(H, eps=eps)
        self.lm_head = nn.Linear(H, spec.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self.rope = Rope(fam, c)
        a = first.self_attn
        self.num_heads, self.num_kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim, self.scaling = a.head_dim, float(a.scaling)
        self.num_attn_layers = spec.num_layers
        self.norm_output = spec.flag("norm_output")

    # -- reading its checkpoint ------------------------------------------------------------------
    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        ids = spec.get("eagle_aux_hidden_state_layer_ids")
        if not ids:  # vLLM's default
            return default_eagle3_aux_ids(target_num_layers)
        return vllm_aux_order(ids)  # vLLM feeds fc in ascending layer order, whatever the config's order

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        # [model.]midlayer.* (EAGLE / SpecForge) and [model.]layers.0.* (speculators) are the first layer
        out = module_names({"model.midlayer.": "layers.0.", "midlayer.": "layers.0.", "model.": ""}, sd, drop=("t2d",))
        return with_d2t(out, spec)

    @classmethod
    def checkpoint_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target_num_layers: int) -> dict[str, Tensor]:
        """vLLM's EAGLE-3 names (one layer: ``midlayer.*``), plus ``t2d``: which target ids the draft
        vocabulary holds (a bool mask, as EAGLE-3 checkpoints carry it). A full vocabulary writes neither
        ``d2t`` nor ``t2d``: vLLM 0.32 has no ``draft_id_to_target_id`` then and refuses a checkpoint with one."""
        out = module_names({"layers.0.": "midlayer."}, sd) if spec.num_layers == 1 else dict(sd)
        if spec.draft_vocab_size == spec.vocab_size and not bool(sd["d2t"].any()):
            out.pop("d2t")
            return out
        t2d = torch.zeros(spec.vocab_size, dtype=torch.bool)
        t2d[torch.arange(spec.draft_vocab_size) + sd["d2t"].cpu()] = True
        out["t2d"] = t2d
        return out

    def after_load(self, target: Target) -> None:
        self.rope.keep_float32()
        tgt = torch.arange(self.spec.draft_vocab_size, device=self.d2t.device) + self.d2t
        if int(tgt.min()) < 0 or int(tgt.max()) >= self.spec.vocab_size:
            raise HeadLoadError(f"{self.spec.path}: d2t maps draft ids outside the target vocabulary")

    # -- the chain's interface (chain.ChainHead) -------------------------------------------------
    def combine(self, target_hidden: Tensor) -> Tensor:
        x = target_hidden.reshape(target_hidden.shape[0], -1).to(self.fc.weight.dtype)
        if self.input_norm is not None:  # norm_before_fc: one norm over all auxiliary layers
            x = self.input_norm(x)
        if self.fc_norm is not None:  # fc_norm: one norm per auxiliary layer
            x = torch.cat([n(c) for n, c in zip(self.fc_norm, x.chunk(len(self.fc_norm), -1), strict=True)], -1)
        return self.fc(x)  # type: ignore[no-any-return]

    def enter(self, tokens: Tensor, pos: Tensor, h: Tensor) -> Any:
        return (self.embed_tokens(tokens).to(h.dtype), h)

    def qkv(self, i: int, state: Any, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        layer = self.layers[i]
        if i == 0:
            emb, h = state
            hn = layer.hidden_norm(h)
            residual = hn if layer.norm_before_residual else h
            x = torch.cat([layer.input_layernorm(emb), hn], -1)
        else:
            residual, x = state, layer.input_layernorm(state)
        cos, sin = self.rope.cos_sin(pos, x.dtype)
        q, k, v = attention_qkv(layer.self_attn, x, cos, sin, self.rope)
        return q, k, v, residual

    def finish(self, i: int, attn: Tensor, carry: Tensor) -> Tensor:
        layer = self.layers[i]
        r = layer.self_attn.o_proj(attn) + carry
        return layer.mlp(layer.post_attention_layernorm(r)) + r  # type: ignore[no-any-return]

    def exit_split(self, state: Tensor) -> tuple[Tensor, Tensor]:
        normed = self.norm(state)
        return normed, (normed if self.norm_output else state)

    def logits(self, x: Tensor) -> Tensor:
        return self.lm_head(x).float()  # type: ignore[no-any-return]

    def exit(self, state: Tensor) -> tuple[Tensor, Tensor]:
        x, h = self.exit_split(state)
        return self.logits(x), h


__all__ = ["Eagle3Head", "check_llama_shaped", "eagle3_first_layer", "with_d2t"]
