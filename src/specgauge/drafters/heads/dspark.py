"""DSpark as vLLM 0.32 runs it (``model_executor/models/qwen3_dspark.py``; the drafting loop is
``v1/worker/gpu/spec_decode/dspark/speculator.py``'s ``DSparkSpeculator``): a DFlash backbone
(``heads/dflash.py``: context keys from the target's hidden states, one non-causal block forward) with

* **anchor-as-first-prediction** (``sample_from_anchor``, vLLM's default for native checkpoints): the
  block is the anchor (the bonus token, at position a) and k - 1 noise tokens, and every row predicts the
  next token — k drafts from k rows; ``sample_from_anchor: false`` is DFlash's anchor + k masks layout;
* a **Markov head** (vanilla, the only kind vLLM 0.32 has): draft i = argmax(base_i + markov_w2(
  markov_w1[prev_i])), prev_0 = the anchor, prev_i = draft i-1 (``_sample_sequential``); with
  ``dspark_draft_topk`` the bias is added to the top-k base candidates only (``_sample_sequential_topk``);
* a **confidence head**: sigmoid(proj([hidden_i, markov_w1[prev_i]])) per draft — what adaptive
  verification ranks drafts by (docs/methods.md: the verified length also needs the server's profiled
  cost tables and its batch, which no log holds).

Checkpoints: native (``architectures: [Qwen3DSparkModel]``, ``dspark_noise_token_id``, ``markov_rank``,
``enable_confidence_head``, ``confidence_head_with_markov``, ``target_layer_ids`` as layer outputs) and
speculators' (``speculators_model_type: dspark``, flattened as vLLM's ``update_dspark`` does — note its
``sample_from_anchor`` default is false there). speculators' ``gated`` / ``rnn`` Markov heads have no
vLLM 0.32 code and are refused by name.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.config import SPECULATORS_TYPES, HeadLoadError, HeadSpec
from specgauge.drafters.heads.dflash import ContextKV, DFlashHead
from specgauge.drafters.heads.loader import register_head
from specgauge.targets.base import Target


def _speculators_dspark(cfg: dict[str, Any], flat: dict[str, Any]) -> None:
    """vLLM 0.32 ``transformers_utils/configs/speculators/algos.py`` ``update_dspark``."""
    archs = [a for a in cfg.get("architectures") or [] if a in DSparkHead.architectures]
    flat["architectures"] = archs or ["Qwen3DSparkModel"]
    flat["sample_from_anchor"] = bool(cfg.get("sample_from_anchor", False))
    ids = cfg.get("aux_hidden_state_layer_ids")
    if not ids or cfg.get("mask_token_id") is None:
        raise HeadLoadError("a speculators DSpark head needs aux_hidden_state_layer_ids and mask_token_id")
    flat["target_layer_ids"] = [int(i) - 1 for i in ids]  # DSpark indexes target layers as aux id - 1
    for key in ("draft_vocab_size", "target_hidden_size", "mask_token_id", "markov_rank", "markov_head_type",
                "block_size", "enable_confidence_head", "confidence_head_with_markov"):
        if cfg.get(key) is not None:
            flat[key] = cfg[key]


SPECULATORS_TYPES["dspark"] = _speculators_dspark


@register_head("dspark")
class DSparkHead(DFlashHead):
    method: ClassVar[str] = "dspark"
    architectures: ClassVar[tuple[str, ...]] = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__(spec)
        kind = spec.get("markov_head_type", "vanilla")
        if kind != "vanilla":
            raise HeadLoadError(f"{spec.path}: markov_head_type {kind!r}: vLLM 0.32 runs only the vanilla Markov head")
        r = int(spec.get("markov_rank", 0))
        if r <= 0:
            raise HeadLoadError(f"{spec.path}: markov_rank {r}: a DSpark head needs its Markov head (rank > 0)")
        H = spec.hidden_size
        self.markov_w1 = nn.Embedding(spec.vocab_size, r)
        self.markov_w2 = nn.Linear(r, spec.draft_vocab_size, bias=False)
        self.conf_with_markov = spec.flag("confidence_head_with_markov")
        self.conf_proj = (nn.Linear(H + (r if self.conf_with_markov else 0), 1, bias=True)
                          if spec.flag("enable_confidence_head") else None)
        self.sample_from_anchor = bool(spec.get("sample_from_anchor", True))
        topk = spec.get("dspark_draft_topk")
        self.draft_topk = int(topk) if topk is not None else None

    @classmethod
    def adjust_fields(cls, flat: dict[str, Any]) -> dict[str, Any]:
        flat = super().adjust_fields(flat)
        if flat.get("mask_token_id") is None:  # vLLM get_parallel_drafting_token_id's order
            for key in ("dspark_noise_token_id", "pard_token", "ptd_token_id"):
                if flat.get(key) is not None:
                    flat = {**flat, "mask_token_id": flat[key]}
                    break
        return flat

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        rename = {"markov_head.markov_w1.": "markov_w1.", "markov_head.markov_w2.": "markov_w2.",
                  "confidence_head.proj.": "conf_proj."}
        out: dict[str, Tensor] = {}
        for name, t in super().load_hook(sd, spec, target).items():
            for old, new in rename.items():
                if name.startswith(old):
                    name = new + name[len(old):]
                    break
            out[name] = t
        return out

    def drafts(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None,
               known: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """B blocks -> (drafts [B, k] target ids, confidences [B, k] or None). ``known`` [B, k-1]: the true
        tokens after each anchor (-1 where unknown) used as the Markov head's previous token instead of the
        draft (the replay: a draft only counts while every earlier one was true, so this changes nothing
        that is counted); None: the drafts themselves (the engine)."""
        if self.sample_from_anchor:
            hidden = self.block_hidden(anchors, start, k - 1, ctx, ctx_mask)  # [B, k, H]: every row predicts
        else:
            hidden = self.block_hidden(anchors, start, k, ctx, ctx_mask)[:, 1:]  # DFlash's layout
        base = self.lm_head(hidden).float()  # [B, k, Vd]
        prev = anchors
        out, conf_in = [], []
        for i in range(k):
            e = self.markov_w1(prev)  # [B, r]
            logits = self._biased(base[:, i], e)
            d = self.to_target(logits.argmax(-1))
            out.append(d)
            conf_in.append(e)
            if known is not None and i < k - 1:
                prev = torch.where(known[:, i] >= 0, known[:, i], d)
            else:
                prev = d
        conf = None
        if self.conf_proj is not None:
            e = torch.stack(conf_in, 1).to(hidden.dtype)
            x = torch.cat([hidden, e], -1) if self.conf_with_markov else hidden
            conf = torch.sigmoid(self.conf_proj(x.to(self.conf_proj.weight.dtype)).squeeze(-1).float())
        return torch.stack(out, 1), conf

    def draft_ids(self, anchors: Tensor, start: Tensor, k: int, ctx: ContextKV, ctx_mask: Tensor | None,
                  known: Tensor | None = None) -> Tensor:
        return self.drafts(anchors, start, k, ctx, ctx_mask, known)[0]

    def _biased(self, base: Tensor, e: Tensor) -> Tensor:
        """base [B, Vd] + the Markov bias of e [B, r] (top-k variant: only base's top ``draft_topk``)."""
        bias = self.markov_w2(e.to(self.markov_w2.weight.dtype)).float()
        if self.draft_topk is None:
            return base + bias
        vals, idx = base.topk(self.draft_topk, dim=-1)
        return torch.full_like(base, float("-inf")).scatter_(1, idx, vals + bias.gather(1, idx))


__all__ = ["DSparkHead"]
