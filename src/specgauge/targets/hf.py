"""``TransformersTarget``: any architecture Hugging Face transformers loads (``AutoModelForCausalLM``),
behind the :class:`~specgauge.targets.base.Target` interface. Nothing is downloaded: a directory here,
or a Hub id already in the local Hugging Face cache (``local_files_only``).

A pass runs the decoder (``model.get_decoder()``: embeddings, ``layers``, ``norm``; no lm_head) with
forward hooks on exactly the modules that hold the layer ids asked (``layers.capture_point``), so only
those tensors are kept — never all N + 1 hidden states. Sequences are batched by a token budget,
right-padded without an attention mask (causal attention: no real token sees a pad to its right; pad
rows are dropped), and yielded one request at a time, in order: peak memory is one batch whatever the
log's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from specgauge.targets.kv import kernel_kv
from specgauge.targets.base import (
    LayerId,
    TargetError,
    TargetPass,
    budget_batches,
    check_layer_ids,
    check_tokens,
)
from specgauge.targets.layers import capture_point

DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
DEVICES = ("cpu", "cuda", "auto")


def pick_device(device: str) -> torch.device:
    """``cpu`` | ``cuda`` (ROCm is ``cuda`` in torch) | ``auto`` (cuda where torch sees one)."""
    if device not in DEVICES and not device.startswith("cuda:"):
        raise TargetError(f"--device {device!r}: expected one of {', '.join(DEVICES)}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise TargetError(f"--device {device}: torch sees no CUDA/ROCm device on this machine (use --device cpu)")
    return torch.device(device)


def pick_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``auto``: float32 on the CPU (exact against the reference loop), bfloat16 on a GPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise TargetError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return getattr(torch, dtype)


def resolve_model_path(spec: str | Path) -> tuple[str, str]:
    """(what ``from_pretrained`` gets, a name for messages): a local directory, or a Hub id found in the
    local Hugging Face cache; anything else is an error saying nothing is downloaded."""
    p = Path(spec)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise TargetError(f"target {spec}: no config.json in that directory")
        return str(p), p.name
    text = str(spec)
    if p.is_absolute() or text.startswith(".") or text.count("/") != 1:
        raise TargetError(f"target {spec}: no such directory")
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(text, "config.json")
    if not isinstance(hit, str):
        raise TargetError(f"target {spec}: not a directory here and not in the local Hugging Face cache "
                          "(nothing is downloaded: `huggingface-cli download` it first, or pass its directory)")
    return text, text


def local_dir(spec: str | Path) -> Path:
    """The checkpoint directory of ``spec``: itself, or a Hub id's snapshot in the local cache."""
    path, name = resolve_model_path(spec)
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(path, local_files_only=True))
    except Exception as e:  # noqa: BLE001 - any failure of the cache lookup reads the same to the user
        raise TargetError(f"target {name}: not complete in the local Hugging Face cache (nothing is downloaded): "
                          f"{type(e).__name__}") from None


def decoder_of(model: nn.Module) -> nn.Module:
    """The module holding ``embed_tokens``, ``layers`` and ``norm`` (text models: ``get_decoder()``;
    multimodal ones: their ``language_model``)."""
    for cand in (getattr(model, "get_decoder", lambda: None)(), getattr(getattr(model, "model", None), "language_model", None),
                 getattr(model, "model", None)):
        if cand is not None and hasattr(cand, "layers") and hasattr(cand, "norm"):
            return cand
    raise TargetError(f"{type(model).__name__}: no decoder with layers and a final norm found")


class TransformersTarget:
    """A transformers causal LM as a :class:`~specgauge.targets.base.Target`."""

    def __init__(self, model: nn.Module, name: str) -> None:
        self.model = model.eval()
        self.name = name
        self.decoder = decoder_of(model)
        cfg = model.config
        self.config = getattr(cfg, "get_text_config", lambda: cfg)()
        self.num_layers = len(self.decoder.layers)
        self.hidden_size = int(self.config.hidden_size)
        out = model.get_output_embeddings()
        self.vocab_size = int(out.weight.shape[0]) if out is not None else int(self.config.vocab_size)
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype

    @classmethod
    def open(cls, spec: str | Path, device: str = "cpu", dtype: str | torch.dtype = "auto",
             device_map: str | None = None) -> TransformersTarget:
        """Load ``spec`` (a directory, or a Hub id in the local cache) on ``device`` in ``dtype``;
        ``device_map="auto"`` spreads a target larger than one GPU (accelerate)."""
        from transformers import AutoModelForCausalLM

        path, name = resolve_model_path(spec)
        dev = pick_device(device)
        dt = pick_dtype(dtype, dev)
        kw: dict[str, Any] = {"dtype": dt, "local_files_only": True}
        if device_map is not None:
            try:
                import accelerate  # noqa: F401
            except ImportError:
                raise TargetError(f"target {name}: device_map={device_map!r} needs the accelerate package "
                                  "(pip install accelerate)") from None
            kw["device_map"] = device_map
        from transformers.utils import logging as hf_logging

        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # its "Loading weights" bar wrote English into every command's console
        try:
            model = AutoModelForCausalLM.from_pretrained(path, **kw)
        except (OSError, ValueError, KeyError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TargetError(f"target {name}: transformers cannot load it: {first}") from None
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        if device_map is None:
            model = model.to(dev)
        return cls(model, name)

    # -- weights -----------------------------------------------------------------------------------
    def embed_weight(self) -> Tensor:
        return self.decoder.get_input_embeddings().weight  # type: ignore[no-any-return]

    def embed(self, ids: Tensor) -> Tensor:
        with torch.inference_mode():
            return self.decoder.embed_tokens(ids.to(self.device))  # type: ignore[no-any-return]

    def lm_head_weight(self) -> Tensor:
        out = self.model.get_output_embeddings()
        return (out.weight if out is not None else self.embed_weight())  # type: ignore[no-any-return]

    def final_norm(self, h: Tensor) -> Tensor:
        with torch.inference_mode():
            return self.decoder.norm(h)  # type: ignore[no-any-return]

    # -- passes ------------------------------------------------------------------------------------
    def run(self, token_ids: Sequence[int], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = ()) -> TargetPass:
        return next(self.passes([token_ids], layer_ids, kv_layers))

    def passes(self, seqs: Iterable[Sequence[int]], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = (),
               token_budget: int = 8192) -> Iterator[TargetPass]:
        ids = check_layer_ids(layer_ids, self.num_layers, f"target {self.name}")
        kvl = tuple(int(i) for i in kv_layers)
        bad = [i for i in kvl if not 0 <= i < self.num_layers]
        if bad:
            raise TargetError(f"target {self.name}: KV of layer {bad[0]} asked; the target has layers 0..{self.num_layers - 1}")
        checked = (check_tokens(s, self.vocab_size, f"target {self.name}") for s in seqs)
        for group in budget_batches(checked, token_budget):
            yield from self._batch(group, ids, kvl)

    def _batch(self, group: list[list[int]], ids: tuple[LayerId, ...], kvl: tuple[int, ...]) -> Iterator[TargetPass]:
        B, T = len(group), max(len(s) for s in group)
        tokens = torch.zeros(B, T, dtype=torch.long)  # right-padded with id 0: no real token attends to a pad
        for b, s in enumerate(group):
            tokens[b, : len(s)] = torch.tensor(s)
        grabbed: dict[LayerId, Tensor] = {}
        handles = []
        for i in dict.fromkeys(ids):
            kind, j = capture_point(i)
            mod = {"embed": self.decoder.embed_tokens, "final_norm": self.decoder.norm}.get(kind) or self.decoder.layers[j]

            def hook(_m: nn.Module, _a: Any, out: Any, i: LayerId = i) -> None:
                grabbed[i] = out[0] if isinstance(out, tuple) else out

            handles.append(mod.register_forward_hook(hook))
        watched = {i: self.decoder.layers[i].self_attn for i in kvl}
        try:
            with torch.inference_mode(), kernel_kv(watched, self.config._attn_implementation) as kvs:
                self.decoder(input_ids=tokens.to(self.device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        hid = torch.stack([grabbed[i].to(self.device) for i in ids], 2)  # [B, T, L, H]
        for b, s in enumerate(group):
            n = len(s)
            kv = {i: (kvs[i][0][b, :, :n].transpose(0, 1).clone(), kvs[i][1][b, :, :n].transpose(0, 1).clone())
                  for i in kvl}  # [n, hkv, D] post-RoPE, as the attention kernel saw them
            yield TargetPass(tuple(s), hid[b, :n].clone(), kv)


__all__ = ["DEVICES", "DTYPES", "TransformersTarget", "decoder_of", "local_dir", "pick_device", "pick_dtype", "resolve_model_path"]
