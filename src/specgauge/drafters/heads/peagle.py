"""P-EAGLE (parallel drafting) as vLLM 0.32 runs it: an EAGLE-3 head (``heads/eagle3.py``) with a learned
``mask_hidden`` and a mask token, served as ``{"method": "eagle3", "model": HEAD, "parallel_drafting": true,
"num_speculative_tokens": K}`` (Model Runner V1 only: ``_get_v2_model_runner_unsupported_features``).

One head forward per step (``SpecDecodeBaseProposer.propose``'s ``parallel_drafting`` early exit): after the
verified rows (token t[p+1], the target's hidden state at p) the first pass carries k - 1 more slots per
request at positions P+1..P+k-1 (``_copy_and_expand_eagle_inputs``) holding the mask token and
``combine(mask_hidden)`` (``load_model``: EAGLE-3 projects ``mask_hidden`` through ``combine_hidden_states``);
the head's attention is its ordinary causal one, so slot j sees the verified positions <= P and the slots
before it; draft j+1 is the argmax at slot j. speculators' training mask (``models/peagle/attention.py``)
is the same. Replay: :func:`specgauge.drafters.heads.chain.levels` with level s >= 1 fed the mask inputs
instead of the chain's own (:func:`mask_inputs`). Checkpoints: vLLM's (``PeagleLlamaForCausalLM`` /
``PeagleQwen3ForCausalLM``, ``pard_token``) and speculators' (``speculators_model_type: peagle``,
``mask_token_id``), flattened as vLLM's ``update_peagle`` does.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from specgauge.drafters.heads.config import SPECULATORS_TYPES, HeadLoadError, HeadSpec
from specgauge.drafters.heads.eagle3 import Eagle3Head
from specgauge.drafters.heads.loader import register_head
from specgauge.targets.base import Target

_ARCH = {"qwen3": "PeagleQwen3ForCausalLM", "llama": "PeagleLlamaForCausalLM"}


def _speculators_peagle(cfg: dict[str, Any], flat: dict[str, Any]) -> None:
    """vLLM 0.32 ``transformers_utils/configs/speculators/algos.py`` ``update_peagle``."""
    mt = flat.get("model_type", "llama")
    if mt not in _ARCH:
        raise HeadLoadError(f"model_type {mt!r}: vLLM 0.32 runs P-EAGLE heads of {', '.join(_ARCH)} only")
    if cfg.get("mask_token_id") is None:
        raise HeadLoadError("a speculators P-EAGLE head needs mask_token_id")
    flat["architectures"] = [_ARCH[mt]]
    flat["draft_vocab_size"] = cfg.get("draft_vocab_size")
    if cfg.get("target_hidden_size") is not None:
        flat["target_hidden_size"] = cfg["target_hidden_size"]
    flat["norm_before_residual"] = cfg.get("norm_before_residual", False)
    flat["norm_before_fc"] = cfg.get("norm_before_fc", False)
    flat["pard_token"] = cfg["mask_token_id"]
    if cfg.get("eagle_aux_hidden_state_layer_ids"):
        flat["eagle_aux_hidden_state_layer_ids"] = cfg["eagle_aux_hidden_state_layer_ids"]


SPECULATORS_TYPES["peagle"] = _speculators_peagle


def mask_token(spec: HeadSpec) -> int:
    """vLLM's ``_init_parallel_drafting_params`` order (``mask_token_id``, ``pard_token``, ``ptd_token_id``)."""
    for key in ("mask_token_id", "pard_token", "ptd_token_id"):
        if spec.get(key) is not None:
            return int(spec.get(key))
    raise HeadLoadError(f"{spec.path}: a parallel-drafting head needs mask_token_id (or pard_token / ptd_token_id)")


@register_head("peagle")
class PEagleHead(Eagle3Head):
    method: ClassVar[str] = "eagle3"  # vLLM's method; parallel drafting is a flag beside it
    architectures: ClassVar[tuple[str, ...]] = ("PeagleLlamaForCausalLM", "PeagleQwen3ForCausalLM", "PEagleDraftModel")

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__(spec)
        self.mask_token_id = mask_token(spec)
        self.register_buffer("mask_hidden", torch.zeros(spec.target_hidden_size * len(spec.aux_layer_ids)))

    @classmethod
    def check(cls, spec: HeadSpec, target: Target) -> None:
        m = mask_token(spec)
        if not 0 <= m < target.vocab_size:
            raise HeadLoadError(f"{spec.path}: mask token {m} outside the vocabulary (size {target.vocab_size})")

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        mask = sd.get("mask_hidden", sd.get("model.mask_hidden"))
        if mask is None:
            raise HeadLoadError(f"{spec.path}: no mask_hidden in the weights "
                                "(vLLM refuses parallel drafting without it)")
        out = super().load_hook({k: v for k, v in sd.items() if not k.endswith("mask_hidden")}, spec, target)
        out["mask_hidden"] = mask.reshape(-1)
        return out

    def replay_levels(self, feed: Any, seq: list[int], n_levels: int, start: int, parallel_drafting: bool = False,
                      **opts: Any) -> list[Tensor]:
        """With ``parallel_drafting`` (vLLM's flag) levels >= 1 are the mask slots; without it the head
        drafts EAGLE-3's chain, as vLLM runs it then."""
        from specgauge.drafters.heads.chain import levels

        nxt = torch.tensor(seq[1:], device=self.device_of())
        return levels(self, nxt, feed.target_hidden(seq), n_levels, start=start,
                      inputs=self.mask_inputs if parallel_drafting else None)

    def online(self, parallel_drafting: bool = False, **opts: Any) -> bool:
        return not parallel_drafting

    def mask_inputs(self, s: int, tokens: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        """Level s >= 1's inputs: the mask token and ``combine(mask_hidden)`` on every row (vLLM's
        ``parallel_drafting_hidden_state_tensor``), whatever the chain's own would be."""
        h = self.combine(self.mask_hidden[None].to(self.fc.weight.dtype))
        return torch.full_like(tokens, self.mask_token_id), h.expand(tokens.shape[0], -1)


__all__ = ["PEagleHead", "mask_token"]
