"""Gemma 4's assistant (``gemma4_assistant`` checkpoints; vLLM 0.32: ``model_executor/models/gemma4_mtp.py``
with ``v1/spec_decode/gemma4.py``'s ``Gemma4Proposer``), on transformers' own ``Gemma4AssistantForCausalLM``.

Per draft step, for a chain that starts at the last verified position P (docs/methods.md):

  x      = pre_projection([target_embed(token) * sqrt(H_target), h])   (the target's embedding table)
  layers : Q-only attention at position P over the **target's** keys/values of its last sliding / full
           layer at positions 0..P (sliding layers: the last ``sliding_window`` of them); Gemma 4's MLP
  logits = the assistant's own lm_head(norm(out)), or centroid-masked top-k (``use_ordered_embeddings``);
           ``suppress_tokens`` of its generation config never drafted
  next   = post_projection(norm(out)) is the hidden state of the next step; the position stays P.

Draft 1 reads (bonus token, the target's final-norm hidden state at P); draft s+1 reads (draft s, next).
No KV is written, so every chain is a pure function of one teacher-forced target pass: its hidden states
and the two layers' post-RoPE keys/values (``TargetPass.kv``). A vLLM hidden-state dump holds no KV cache:
this method needs the transformers source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from specgauge.drafters.heads.config import HeadLoadError, HeadSpec
from specgauge.drafters.heads.loader import HeadModule, register_head
from specgauge.targets.base import LayerId, Target

LAYER_TYPES = ("sliding_attention", "full_attention")


def _assistant_class() -> type:
    from transformers import Gemma4AssistantForCausalLM

    class Gemma4AssistantReplay(Gemma4AssistantForCausalLM):  # type: ignore[misc,valid-type]
        # ##### Start of specgauge modifications #####
        def create_attention_masks(self, inputs_embeds: Tensor, attention_mask: Any, shared_kv_states: Any) -> Any:
            """The masks as vLLM's loop has them, given by the caller: query row P sees the target's
            keys 0..P (sliding layers: the window ending at P). transformers' generation loop builds its
            own from the current length instead (docs/methods.md)."""
            return attention_mask
        # ##### End of specgauge modifications #####

    return Gemma4AssistantReplay


def target_kv_layers(target_config: Any) -> dict[str, int]:
    """vLLM's ``_setup_gemma4_kv_sharing``: each assistant layer type reads the last target layer of that
    type that computes its own KV (before the target's ``num_kv_shared_layers``)."""
    types = list(getattr(target_config, "layer_types", []) or [])
    own = len(types) - int(getattr(target_config, "num_kv_shared_layers", 0) or 0)
    out = {t: max(i for i in range(own) if types[i] == t) for t in LAYER_TYPES if t in types[:own]}
    if set(out) != set(LAYER_TYPES):
        raise HeadLoadError(f"target layer types {sorted(set(types))}: a Gemma 4 assistant needs a sliding and a "
                            "full attention layer to read")
    return out


def masks(pos: Tensor, keys: int, window: int | None, dtype: torch.dtype) -> dict[str, Tensor]:
    """Additive masks [1, 1, N, keys]: the row at position pos[i] sees keys 0..pos[i] (full attention) or
    pos[i]-window+1..pos[i] (sliding), as vLLM's attention with ``per_layer_sliding_window`` does."""
    p = pos[:, None]
    j = torch.arange(keys, device=pos.device)[None, :]
    full = j <= p
    slide = full & (j > p - window) if window else full
    neg = torch.finfo(dtype).min
    return {"full_attention": torch.where(full, 0.0, neg).to(dtype)[None, None],
            "sliding_attention": torch.where(slide, 0.0, neg).to(dtype)[None, None]}


@register_head("gemma4_assistant")
class Gemma4AssistantHead(HeadModule):
    method: ClassVar[str] = "mtp"  # vLLM: {"method": "mtp", "model": ASSISTANT}, model_type gemma4_assistant
    architectures: ClassVar[tuple[str, ...]] = ("Gemma4AssistantForCausalLM",)
    default_model_type: ClassVar[str] = "gemma4_assistant"

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__()
        self.spec = spec
        cfg = spec.layer_config
        cfg.get_text_config()._attn_implementation = "eager"
        self.assistant = _assistant_class()(cfg)
        self.suppress: list[int] = _suppress_tokens(spec.path)
        self.kv_layers: dict[str, int] = {}
        self.window: int | None = getattr(cfg.get_text_config(), "sliding_window", None)

    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        return ("final",)

    @classmethod
    def adjust_fields(cls, flat: dict[str, Any]) -> dict[str, Any]:
        return {**flat, "target_hidden_size": flat.get("backbone_hidden_size")}

    @classmethod
    def check(cls, spec: HeadSpec, target: Target) -> None:
        if int(spec.layer_config.backbone_hidden_size) != target.hidden_size:
            raise HeadLoadError(f"{spec.path}: backbone_hidden_size {spec.layer_config.backbone_hidden_size} but the "
                                f"target's hidden size is {target.hidden_size}")
        target_kv_layers(target.config)

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        out = {"assistant." + k: v for k, v in sd.items()}
        if "assistant.lm_head.weight" not in out and "assistant.model.embed_tokens.weight" in out:
            out["assistant.lm_head.weight"] = out["assistant.model.embed_tokens.weight"]  # tied, as saved
        return out

    def after_load(self, target: Target) -> None:
        self.kv_layers = target_kv_layers(target.config)

    def replay_levels(self, feed: Any, seq: list[int], n_levels: int, start: int, **opts: Any) -> list[Tensor]:
        hidden, kv = feed.target_pass(seq, self.kv_layer_ids())
        nxt = torch.tensor(seq[1:], device=hidden.device)
        lv = assistant_levels(self, feed.target.embed, nxt, hidden, kv, n_levels)
        return [lv[0], *(x[start:] for x in lv[1:])]  # chain.levels' rows: levels >= 1 from ``start`` on

    def online(self, **opts: Any) -> bool:
        return False  # Q-only over the target's KV at a constant position: not the chain's proposer

    def kv_layer_ids(self) -> tuple[int, ...]:
        """The target layers whose keys/values the chain reads (``Target.run(kv_layers=...)``)."""
        return tuple(self.kv_layers[t] for t in LAYER_TYPES)

    def step(self, embeds: Tensor, hidden: Tensor, pos: Tensor, kv: dict[int, tuple[Tensor, Tensor]],
             keys: int) -> tuple[Tensor, Tensor]:
        """One draft step for N chains at once: embeds [N, Ht] (target embedding, scaled), hidden [N, Ht],
        pos [N] (each chain's P; row i sees keys 0..pos[i]) -> (logits [N, V] float32, next hidden [N, Ht])."""
        shared = {t: (kv[i][0][:keys].transpose(0, 1)[None], kv[i][1][:keys].transpose(0, 1)[None])
                  for t, i in self.kv_layers.items()}  # [1, hkv, K, D]
        m = masks(pos, keys, self.window, embeds.dtype)
        out = self.assistant(inputs_embeds=torch.cat([embeds, hidden], -1)[None], position_ids=pos[None],
                             attention_mask=m, shared_kv_states=shared)
        logits = out.logits[0].float()
        if self.suppress:
            logits[:, self.suppress] = float("-inf")
        return logits, out.last_hidden_state[0]


def assistant_levels(head: Gemma4AssistantHead, embed: Any, next_tokens: Tensor, target_hidden: Tensor,
                     kv: dict[int, tuple[Tensor, Tensor]], n_levels: int) -> list[Tensor]:
    """Every chain of one sequence, in ``chain.levels``' layout (level s, row p: step s+1 of the chain
    starting at p - s, predicting t[p+2]; rows before s zeros). ``embed``: the target's scaled embedding
    (``Target.embed``); ``next_tokens[P]`` = t[P+1]; ``target_hidden`` [T, Ht] final-norm; ``kv``: the
    target's keys/values [>= T, hkv, D] of ``head.kv_layer_ids()``. Step s+1 of the chain at P feeds the
    true token t[P+s+1] (exact for acceptance: a step counts only if every earlier draft was true)."""
    T = next_tokens.shape[0]
    h = target_hidden.to(head.assistant.pre_projection.weight.dtype)
    out: list[Tensor] = []
    for s in range(n_levels):
        rows = T - s
        if rows <= 0:
            out.append(out[-1].new_zeros(out[-1].shape))
            continue
        pos = torch.arange(rows, device=next_tokens.device)
        logits, h = head.step(embed(next_tokens[s:]).to(h.dtype), h[:rows], pos, kv, T)
        out.append(torch.cat([logits.new_zeros(s, logits.shape[-1]), logits]))
    return out


def _suppress_tokens(head_dir: Path) -> list[int]:
    p = Path(head_dir) / "generation_config.json"
    try:
        ids = json.loads(p.read_text(encoding="utf-8")).get("suppress_tokens") if p.is_file() else None
    except ValueError:
        raise HeadLoadError(f"{p}: not JSON") from None
    return [int(i) for i in ids or []]


__all__ = ["Gemma4AssistantHead", "assistant_levels", "masks", "target_kv_layers"]
