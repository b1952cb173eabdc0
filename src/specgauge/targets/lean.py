"""``LeanTarget``: the embedded engine's own model (``nn/transformer.py``: Llama / Qwen2 / Qwen3,
default RoPE) behind the :class:`~specgauge.targets.base.Target` interface, so the engine's heads read
their target the way every other head does. ``forward_flat_hidden`` numbers layers as vLLM does
(``layers.py``), so ids pass through unchanged. Its KV cache stores RoPE pairs interleaved, not in
transformers' layout: it gives no ``kv`` to heads."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from specgauge.nn.transformer import rms_norm
from specgauge.targets.base import (
    LayerId,
    TargetError,
    TargetPass,
    budget_batches,
    check_layer_ids,
    check_tokens,
)


class LeanTarget:
    """A lean :class:`~specgauge.nn.transformer.Transformer` as a Target."""

    def __init__(self, model: Any, name: str = "the engine's target") -> None:
        self.model = model
        self.name = name
        a = model.args
        self.config = a
        self.num_layers, self.hidden_size, self.vocab_size = a.num_layers, a.hidden_size, a.vocab_size
        w = model.embed.weight
        self.device, self.dtype = w.device, w.dtype

    @classmethod
    def open(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> LeanTarget:
        from specgauge.nn.transformer import ModelLoadError
        from specgauge.nn.weights import load_model

        try:
            return cls(load_model(path, dtype), Path(path).name)
        except ModelLoadError as e:
            raise TargetError(str(e)) from None

    def embed_weight(self) -> Tensor:
        return self.model.embed.weight  # type: ignore[no-any-return]

    def embed(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.model.embed.weight)

    def lm_head_weight(self) -> Tensor:
        return self.model.lm_head.weight  # type: ignore[no-any-return]

    def final_norm(self, h: Tensor) -> Tensor:
        return rms_norm(h, self.model.norm.weight.to(h.dtype), self.model.args.rms_norm_eps)

    def run(self, token_ids: Sequence[int], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = ()) -> TargetPass:
        return next(self.passes([token_ids], layer_ids, kv_layers))

    def passes(self, seqs: Iterable[Sequence[int]], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = (),
               token_budget: int = 8192) -> Iterator[TargetPass]:
        ids = check_layer_ids(layer_ids, self.num_layers, f"target {self.name}")
        if tuple(kv_layers):
            raise TargetError(f"target {self.name}: the embedded engine's model gives no KV cache to heads "
                              "(open the target with transformers)")
        checked = (check_tokens(s, self.vocab_size, f"target {self.name}") for s in seqs)
        for group in budget_batches(checked, token_budget):
            lens = [len(s) for s in group]
            cache = self.model.new_cache(len(group), max(lens))
            flat = torch.tensor([t for s in group for t in s])
            last = torch.tensor(lens).cumsum(0) - 1  # logits only where they are cheapest: each row's last token
            _, hid = self.model.forward_flat_hidden(flat, list(range(len(group))), [0] * len(group), lens, cache, ids,
                                                    logits_at=last)
            for s, h in zip(group, hid.split(lens), strict=True):
                yield TargetPass(tuple(s), h.reshape(len(s), len(ids), self.hidden_size).clone())


__all__ = ["LeanTarget"]
