"""Keys and values of chosen attention layers exactly as the attention kernel receives them during one
forward: post-RoPE, after the family's k/v norms, over the whole sequence — also for sliding-window layers,
whose transformers cache keeps only the last window (a Gemma 4 assistant reads the target's sliding layer
at every position). Works for any family whose attention calls transformers' ``AttentionInterface``.

During the ``with`` block the interface's entry for the implementation in use (``sdpa``, ``eager``, ...)
is a wrapper that records the inputs of the watched modules and hands every call on unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn


def _original(module: nn.Module, name: str, saved: Mapping[str, Any]) -> Any:
    if name in saved:
        return saved[name]
    return getattr(sys.modules[type(module).__module__], "eager_attention_forward")  # the family's own eager


@contextmanager
def kernel_kv(watched: Mapping[int, nn.Module], implementation: str) -> Iterator[dict[int, tuple[Tensor, Tensor]]]:
    """``watched``: layer index -> its attention module; ``implementation``: the model's
    ``config._attn_implementation``. Yields {layer: (k, v)} filled by the forward run inside the block,
    each [B, hkv, T, D]."""
    from transformers import AttentionInterface

    mapping = AttentionInterface._global_mapping
    name = implementation or "eager"
    saved = {name: mapping[name]} if name in mapping else {}
    who = {id(m): i for i, m in watched.items()}
    got: dict[int, tuple[Tensor, Tensor]] = {}

    def wrapper(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any, **kw: Any) -> Any:
        i = who.get(id(module))
        if i is not None:
            got[i] = (key.detach(), value.detach())
        return _original(module, name, saved)(module, query, key, value, attention_mask, **kw)

    mapping[name] = wrapper
    try:
        yield got
    finally:
        if saved:
            mapping[name] = saved[name]
        else:
            del mapping[name]


__all__ = ["kernel_kv"]
