"""THE one load path of a head: registry {format name -> head class}; ``config.read_head_config`` reads
its config once; the checkpoint's tensors are read once (``nn.weights.read_safetensors``) and renamed
to the module's names in ONE load hook per head class (gpt-fast's ``load_hook`` style); tensors a head
shares with its target (the input embedding, an lm_head) come from the target where the checkpoint has
none, as vLLM shares them; shapes are checked and every error names the place.

A new family adds a module with a :class:`HeadModule` subclass and one line here (its import in
:func:`_builtin`); nothing else changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.config import HeadLoadError, HeadSpec, read_head_config
from specgauge.targets.base import LayerId, Target, TargetError, check_layer_ids

_REGISTRY: dict[str, type[HeadModule]] = {}
#: modules that register head classes (imported on first use; a family adds its module here)
_BUILTIN = ("eagle3", "mtp_deepseek", "dflash", "mtp_native", "gemma4_assistant", "dspark", "peagle")


class HeadModule(nn.Module):
    """What every registered head class is: built from a :class:`HeadSpec`, loaded by :func:`load_head`."""

    format: ClassVar[str] = ""
    method: ClassVar[str] = ""  #: vLLM's ``method`` that runs it ("eagle3", "mtp", "dflash", ...)
    architectures: ClassVar[tuple[str, ...]] = ()  #: config.json ``architectures`` names it reads
    default_model_type: ClassVar[str] = "llama"  #: the layer family when the config names none
    #: module key -> what of the target stands in when the checkpoint lacks it ("embed" | "lm_head")
    shared: ClassVar[Mapping[str, str]] = {}
    #: shared keys a freshly made head trains itself (``make.new_head``) instead of taking the target's
    trained: ClassVar[tuple[str, ...]] = ()

    spec: HeadSpec
    from_target: set[str]  #: shared keys filled from the target (not the checkpoint's; never saved)

    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        """The target hidden states it reads, in vLLM's numbering (``targets/layers.py``)."""
        raise NotImplementedError

    @classmethod
    def adjust_fields(cls, flat: dict[str, Any]) -> dict[str, Any]:
        """The flat config with this method's defaults filled where vLLM fills them."""
        return flat

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        """Checkpoint names -> this module's names (tensors to drop are left out)."""
        return sd

    @classmethod
    def checkpoint_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target_num_layers: int) -> dict[str, Tensor]:
        """This module's names -> the checkpoint's (the inverse of ``load_hook``, for ``save_head``)."""
        return sd

    @classmethod
    def check(cls, spec: HeadSpec, target: Target) -> None:
        """Format-specific checks against the target (an ``HeadLoadError`` naming the place)."""

    def after_load(self, target: Target) -> None:
        """Anything derived after the weights are in (float32 RoPE tables, checks on d2t)."""

    def replay_levels(self, feed: Any, seq: list[int], n_levels: int, start: int, **opts: Any) -> list[Tensor]:
        """Draft logits of every chain step over one sequence, in ``chain.levels``' layout (level s, row p:
        step s+1 of the chain starting at p - s), from the target's teacher-forced pass (``feed``: the
        drafter, ``target_hidden`` / ``target_pass``): the chain (EAGLE-3, MTP on vLLM's V1 runner). A head
        whose step is not the chain's overrides it (Gemma 4's assistant, MTP with several modules on V2,
        P-EAGLE's mask slots); ``opts``: the method's options (``parallel_drafting``, ``mtp_runner``, ...)."""
        from specgauge.drafters.heads.chain import levels

        if opts.get("parallel_drafting"):
            raise HeadLoadError(f"{self.spec.path}: parallel_drafting needs a P-EAGLE head "
                                "(mask_hidden and a mask token)")
        nxt = torch.tensor(seq[1:], device=self.device_of())
        return levels(self, nxt, feed.target_hidden(seq), n_levels, start=start)

    def replay_drafts(self, feed: Any, seq: list[int], n_levels: int, start: int, **opts: Any) -> Tensor:
        """Target ids [n_levels, T] in ``replay_levels``' layout, -1 where no count reads them: the chain's
        pruned readout (``chain.draft_ids``: the lm_head only where a chain is still alive) for a head
        that keeps the chain's rule, else the argmax of its own ``replay_levels``."""
        if type(self).replay_levels is HeadModule.replay_levels and not opts.get("parallel_drafting"):
            from specgauge.drafters.heads.chain import draft_ids

            nxt = torch.tensor(seq[1:], device=self.device_of())
            return draft_ids(self, nxt, feed.target_hidden(seq), n_levels, start=start)
        lv = self.replay_levels(feed, seq, n_levels, start, **opts)
        T = len(seq) - 1
        pred = torch.full((n_levels, T), -1, dtype=torch.long, device=self.device_of())
        pred[0] = self.to_target(lv[0].argmax(-1))
        for s, x in enumerate(lv[1:], start=1):
            pred[s, start:] = self.to_target(x.argmax(-1))
        return pred

    def online(self, **opts: Any) -> bool:
        """Whether ``chain.propose`` is vLLM's proposer for this head and these options (the embedded
        engine runs only those; the others replay offline)."""
        return not opts.get("parallel_drafting")

    def device_of(self) -> torch.device:
        return next(self.parameters()).device

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """Draft-vocabulary ids -> target ids (vLLM: target = draft + d2t[draft]; identity without d2t)."""
        d2t = getattr(self, "d2t", None)
        return draft_ids if d2t is None else draft_ids + d2t[draft_ids]


def register_head(name: str) -> Callable[[type[HeadModule]], type[HeadModule]]:
    def deco(cls: type[HeadModule]) -> type[HeadModule]:
        cls.format = name
        _REGISTRY[name] = cls
        return cls

    return deco


def head_formats() -> dict[str, type[HeadModule]]:
    """Every registered head class by name (the built-in ones imported first)."""
    for mod in _BUILTIN:
        importlib.import_module(f"specgauge.drafters.heads.{mod}")
    return dict(_REGISTRY)


def read_spec(head_dir: str | Path, target_num_layers: int,
              cfg: dict[str, Any] | None = None) -> tuple[HeadSpec, type[HeadModule]]:
    """The head's spec (its ``aux_layer_ids`` filled and checked against the target) and its class;
    ``cfg``: a config dict instead of ``head_dir/config.json`` (a head made in memory)."""
    formats = head_formats()
    spec = read_head_config(head_dir, formats, cfg)
    cls = formats[spec.format]
    ids = cls.aux_layer_ids(spec, target_num_layers)
    try:
        check_layer_ids(ids, target_num_layers, f"{spec.path}")
    except TargetError as e:
        raise HeadLoadError(str(e)) from None
    return replace(spec, aux_layer_ids=ids), cls


def load_head(head_dir: str | Path, target: Target, dtype: torch.dtype = torch.float32) -> HeadModule:
    """The head at ``head_dir`` for ``target``, in ``dtype`` on the target's device, in eval mode."""
    from specgauge.nn.weights import read_safetensors

    spec, cls = read_spec(head_dir, target.num_layers)
    where = spec.path
    if spec.vocab_size != target.vocab_size:
        raise HeadLoadError(f"{where}: vocab_size {spec.vocab_size} but the target has {target.vocab_size}")
    if spec.target_hidden_size != target.hidden_size:
        raise HeadLoadError(f"{where}: target_hidden_size {spec.target_hidden_size} but the target's hidden size is "
                            f"{target.hidden_size}")
    cls.check(spec, target)
    sd = cls.load_hook(read_safetensors(Path(head_dir), HeadLoadError, ""), spec, target)
    head = cls(spec)  # type: ignore[call-arg]
    own = head.state_dict()
    head.from_target = share_from_target(head, sd, target)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    if missing or unexpected:
        raise HeadLoadError(f"{where}: weights do not fit the config: missing {missing[:6]}, unexpected {unexpected[:6]}")
    bad = next((k for k in own if tuple(own[k].shape) != tuple(sd[k].shape)), None)
    if bad is not None:
        raise HeadLoadError(f"{where}: weight {bad!r} has shape {tuple(sd[bad].shape)}, the config says "
                            f"{tuple(own[bad].shape)}")
    head.load_state_dict({k: (v.to(own[k].dtype) if v.is_floating_point() else v.to(own[k].dtype)) for k, v in sd.items()})
    head = head.to(device=target.device, dtype=dtype)
    head.after_load(target)
    return head.eval()


def share_from_target(head: HeadModule, sd: dict[str, Tensor], target: Target, skip: tuple[str, ...] = ()) -> set[str]:
    """Fill ``sd`` with the target's tensors for the head's shared keys the checkpoint lacks (vLLM shares
    them) -> the keys filled."""
    own = head.state_dict()
    filled = set()
    for key, what in type(head).shared.items():
        if key in own and key not in sd and key not in skip:
            sd[key] = (target.embed_weight() if what == "embed" else target.lm_head_weight()).detach()
            filled.add(key)
    return filled


def head_state(head: HeadModule, target_num_layers: int) -> dict[str, Tensor]:
    """The head's checkpoint tensors under the checkpoint's names (what it took from the target left out)."""
    sd = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items() if k not in head.from_target}
    return type(head).checkpoint_hook(sd, head.spec, target_num_layers)


def module_names(prefix_map: Mapping[str, str], sd: Mapping[str, Tensor], drop: tuple[str, ...] = ()) -> dict[str, Tensor]:
    """Rename by prefix (first match wins) and drop names containing any of ``drop``."""
    out: dict[str, Tensor] = {}
    for name, t in sd.items():
        if any(d in name for d in drop):
            continue
        for old, new in prefix_map.items():
            if name.startswith(old):
                name = new + name[len(old):]
                break
        out[name] = t
    return out


__all__ = ["HeadLoadError", "HeadModule", "head_formats", "head_state", "load_head", "module_names", 
           "read_spec", "register_head", "share_from_target"]
