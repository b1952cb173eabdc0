"""THE one reader of a head's ``config.json``, in every layout heads are published in:

* **flat** (vLLM / EAGLE / SpecForge ``LlamaForCausalLMEagle3``, ``Eagle3LlamaForCausalLM``; z-lab's
  ``DFlashDraftModel``; our MTP heads): one dict, with method fields at the top level or under
  ``eagle_config`` / ``dflash_config`` (which win, as in vLLM);
* **nested** (vllm-project/speculators): ``speculators_model_type``, the layer config under
  ``transformer_layer_config``, the target under ``speculators_config.verifier``. It is flattened the way
  vLLM 0.32 flattens it (``transformers_utils/configs/speculators/algos.py``) — including its defaults,
  which differ from the flat layout's: a speculators EAGLE-3 head has ``norm_before_residual`` True
  unless it says otherwise; a speculators DFlash head's ``aux_hidden_state_layer_ids`` are already
  vLLM aux ids (a flat DFlash head's ``target_layer_ids`` are layer outputs: ``targets/layers.py``).

The result is a :class:`HeadSpec`: the head's decoder-layer config as transformers' own config class of
its family (``CONFIG_MAPPING[model_type]``, legacy RoPE keys and all), and the fields every head reads.
Which head class reads it is decided by the loader's registry (``architectures`` names), not here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgauge.targets.base import LayerId


class HeadLoadError(ValueError):
    """A head directory cannot be loaded; the message names the place and says why."""


def _speculators_eagle3(cfg: dict[str, Any], flat: dict[str, Any]) -> None:
    flat["architectures"] = ["Eagle3LlamaForCausalLM"]
    for name, default in (("draft_vocab_size", None), ("target_hidden_size", None), ("norm_before_residual", True),
                          ("norm_before_fc", False), ("fc_norm", False), ("norm_output", False),
                          ("eagle_aux_hidden_state_layer_ids", None)):
        if cfg.get(name, default) is not None:
            flat[name] = cfg.get(name, default)


def _speculators_dflash(cfg: dict[str, Any], flat: dict[str, Any]) -> None:
    flat["architectures"] = ["DFlashDraftModel"]
    for name in ("draft_vocab_size", "target_hidden_size", "block_size"):
        if cfg.get(name) is not None:
            flat[name] = cfg[name]
    ids = cfg.get("aux_hidden_state_layer_ids")
    if not ids or cfg.get("mask_token_id") is None:
        raise HeadLoadError("a speculators DFlash head needs aux_hidden_state_layer_ids and mask_token_id")
    flat["dflash_config"] = {"mask_token_id": cfg["mask_token_id"], "target_layer_ids": [int(i) - 1 for i in ids],
                             "causal": not cfg.get("sliding_window_non_causal", True)}
    if cfg.get("sample_from_anchor"):
        raise HeadLoadError("sample_from_anchor DFlash heads are not modelled")


#: speculators_model_type -> how vLLM flattens it (a family that adds one registers its updater here)
SPECULATORS_TYPES: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "eagle3": _speculators_eagle3,
    "dflash": _speculators_dflash,
}


@dataclass(frozen=True)
class HeadSpec:
    """A head's configuration, read once. ``fields`` is the flat view (top level, then ``eagle_config`` /
    ``dflash_config``); :meth:`get` reads it. ``aux_layer_ids`` (vLLM numbering) is the head class's
    reading of it (``loader``)."""

    path: Path
    format: str  #: the registry name of the head class that reads it
    nested: bool  #: speculators' nested layout
    fields: Mapping[str, Any]
    layer_config: Any  #: transformers' config of the head's decoder layer(s)
    target_hint: str | None  #: what the config names its target by (``target_model``, the speculators verifier)
    aux_layer_ids: tuple[LayerId, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)  #: config.json as written

    def get(self, name: str, default: Any = None) -> Any:
        v = self.fields.get(name)
        return default if v is None else v

    def flag(self, name: str) -> bool:
        return bool(self.fields.get(name, False))

    @property
    def num_layers(self) -> int:
        return int(self.get("num_hidden_layers", 1))

    @property
    def text_config(self) -> Any:
        """The decoder's config (a composite config's text part: Gemma 4's assistant)."""
        return getattr(self.layer_config, "get_text_config", lambda: self.layer_config)()

    @property
    def hidden_size(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def vocab_size(self) -> int:
        """The target's vocabulary (what d2t maps into)."""
        return int(self.text_config.vocab_size)

    @property
    def draft_vocab_size(self) -> int:
        return int(self.get("draft_vocab_size", self.vocab_size))

    @property
    def target_hidden_size(self) -> int:
        return int(self.get("target_hidden_size", self.hidden_size))

    def where(self) -> str:
        return str(self.path)


def read_config_json(head_dir: Path) -> dict[str, Any]:
    path = Path(head_dir) / "config.json"
    if not path.is_file():
        raise HeadLoadError(f"{head_dir}: no config.json (expected a head directory)")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise HeadLoadError(f"{path}: not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise HeadLoadError(f"{path}: not a JSON object")
    return cfg


def named_target(cfg: Mapping[str, Any]) -> str | None:
    """What a head's config names its target by: ``target_model`` (the shipped heads), else a
    ``speculators``-format checkpoint's ``speculators_config.verifier.name_or_path``."""
    sc = cfg.get("speculators_config")
    verifier = sc.get("verifier") if isinstance(sc, dict) else None
    hint = cfg.get("target_model") or (verifier.get("name_or_path") if isinstance(verifier, dict) else None)
    return str(hint) if hint else None


def flatten(cfg: dict[str, Any], where: str) -> tuple[dict[str, Any], bool, str | None]:
    """(the flat view, nested?, the named target) of a config.json, as vLLM reads it."""
    stype = cfg.get("speculators_model_type")
    if stype is None and "transformer_layer_config" not in cfg:
        flat = dict(cfg)
        nested = False
    else:
        if stype not in SPECULATORS_TYPES:
            raise HeadLoadError(f"{where}: speculators_model_type {stype!r} is not one of {', '.join(SPECULATORS_TYPES)}")
        layer = cfg.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise HeadLoadError(f"{where}: a speculators config needs transformer_layer_config (a JSON object)")
        flat = dict(layer)
        try:
            SPECULATORS_TYPES[stype](cfg, flat)
        except HeadLoadError as e:
            raise HeadLoadError(f"{where}: {e}") from None
        nested = True
    for sub in ("eagle_config", "dflash_config"):
        if isinstance(flat.get(sub), dict):
            flat = {**flat, **flat[sub]}
    return flat, nested, named_target(cfg)


def layer_config(flat: Mapping[str, Any], where: str, default_type: str = "llama") -> Any:
    """transformers' config object of the head's decoder layer (its family's own class)."""
    from transformers import CONFIG_MAPPING

    mt = flat.get("model_type") or default_type
    if mt not in CONFIG_MAPPING:
        raise HeadLoadError(f"{where}: model_type {mt!r} is not a family transformers knows")
    kw = {k: v for k, v in flat.items() if k != "model_type"}
    try:
        return CONFIG_MAPPING[mt](**kw)
    except (TypeError, ValueError, KeyError) as e:
        raise HeadLoadError(f"{where}: its layer config does not build as {mt!r}: {e}") from None


def read_head_config(head_dir: str | Path, formats: Mapping[str, Any], cfg: dict[str, Any] | None = None) -> HeadSpec:
    """The :class:`HeadSpec` of ``head_dir``; ``formats``: registry name -> head class, each with
    ``architectures`` (the names it reads), ``default_model_type`` and ``adjust_fields`` (vLLM's
    defaults for its fields). ``cfg``: the config as a dict (a head made in memory), else config.json."""
    head_dir = Path(head_dir)
    cfg = read_config_json(head_dir) if cfg is None else cfg
    flat, nested, hint = flatten(cfg, str(head_dir))
    arch = [str(a) for a in flat.get("architectures") or []]
    fmt = next((name for name, cls in formats.items() if set(arch) & set(cls.architectures)), None)
    if fmt is None:
        known = sorted(a for cls in formats.values() for a in cls.architectures)
        why = " (DFlash2's convolutions and candidate selector are not modelled)" if any("DFlash2" in a for a in arch) else ""
        raise HeadLoadError(f"{head_dir}: architectures {arch or 'none'!r} is no head this tool reads{why}; "
                            f"known: {', '.join(known)}")
    flat = formats[fmt].adjust_fields(flat)
    lc = layer_config(flat, str(head_dir), formats[fmt].default_model_type)
    return HeadSpec(path=head_dir, format=fmt, nested=nested, fields=flat, layer_config=lc, target_hint=hint, raw=cfg)


__all__ = ["SPECULATORS_TYPES", "HeadLoadError", "HeadSpec", "flatten", "layer_config", "named_target", "read_config_json",
           "read_head_config"]
