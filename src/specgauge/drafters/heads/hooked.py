"""Any transformers decoder layer, split where a chain needs it — q / k / v out of the layer, the layer's
output for a given attention output — by running the family's **own** forward with its attention kernel
swapped for a hook (transformers' ``AttentionInterface``). Everything around the kernel stays
transformers': MLA's low-rank projections and decoupled RoPE (DeepSeek-V3), Qwen3-Next's output gate,
partial rotary (GLM), q/k norms, biases, MoE routing, Gemma's sandwich norms.

* :meth:`HookedBlock.qkv` runs the layer until its attention kernel is called, keeps the kernel's
  inputs — q [N, h, D], k [N, hkv, D] post-RoPE, v [N, hkv, Dv], the module's softmax ``scaling`` — and
  stops there (a private exception unwinds the rest of the forward: nothing past the kernel is computed).
* :meth:`HookedBlock.finish` runs the whole layer again with the kernel answering the attention output
  the chain computed ([N, h * Dv]); the projections before the kernel are recomputed (the price of not
  copying the family's code), the rest is the layer's output.

Knows nothing about chains, heads or checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

HOOK = "specgauge_hooked"
#: (positions [N]) -> the layer's ``position_embeddings`` argument (cos, sin), each [1, N, D]
RopeFn = Callable[[Tensor], tuple[Tensor, Tensor]]


class _Captured(Exception):  # noqa: N818 - control flow, never escapes qkv()
    pass


def _kernel(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
            scaling: float | None = None, dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention-function signature: q [B, h, T, D], k/v [B, hkv, T, D] -> [B, T, h, Dv]."""
    return module._specgauge_hook(query, key, value, scaling, kwargs), None  # type: ignore[operator]


def register() -> None:
    """Make ``HOOK`` a valid ``_attn_implementation`` (idempotent)."""
    from transformers import AttentionInterface

    if HOOK not in AttentionInterface._global_mapping:
        AttentionInterface.register(HOOK, _kernel)


class HookedBlock:
    """One decoder layer ``layer`` whose attention module is ``layer.<attn_name>``; ``rope`` gives its
    position embeddings; ``call_kwargs`` go to every ``layer(...)`` call (Gemma 4: ``shared_kv_states``)."""

    def __init__(self, layer: nn.Module, rope: RopeFn, attn_name: str = "self_attn",
                 call_kwargs: dict[str, Any] | None = None) -> None:
        register()
        self.layer = layer
        self.attn: nn.Module = getattr(layer, attn_name)
        self.attn.config._attn_implementation = HOOK  # the config the head's own modules were built from
        self.rope = rope
        self.call_kwargs = dict(call_kwargs or {})
        self.extra: dict[str, Any] = {}  #: the kernel's keyword arguments last seen (sliding_window, ...)

    def _run(self, x: Tensor, pos: Tensor, hook: Callable[..., Tensor]) -> Tensor:
        self.attn._specgauge_hook = hook  # type: ignore[assignment]
        try:
            out = self.layer(hidden_states=x[None], position_embeddings=self.rope(pos), attention_mask=None,
                             position_ids=pos[None], **self.call_kwargs)
        finally:
            del self.attn._specgauge_hook
        return (out[0] if isinstance(out, tuple) else out)[0]

    def qkv(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, float]:
        """x [N, H] (the layer's input), positions [N] -> q [N, h, D], k [N, hkv, D], v [N, hkv, Dv], scaling."""
        got: dict[str, Any] = {}

        def capture(q: Tensor, k: Tensor, v: Tensor, scaling: float | None, kw: dict[str, Any]) -> Tensor:
            got.update(q=q, k=k, v=v, scaling=scaling, kw=kw)
            raise _Captured

        try:
            self._run(x, pos, capture)
        except _Captured:
            pass
        q, k, v = (got[n][0].transpose(0, 1) for n in "qkv")  # [1, h, N, D] -> [N, h, D]
        self.extra = got["kw"]
        s = got["scaling"]
        return q, k, v, float(q.shape[-1] ** -0.5 if s is None else s)

    def finish(self, x: Tensor, pos: Tensor, attn: Tensor) -> Tensor:
        """The layer's output [N, H] for input x [N, H] when its attention kernel yields ``attn`` [N, h * Dv]."""

        def inject(q: Tensor, k: Tensor, v: Tensor, scaling: float | None, kw: dict[str, Any]) -> Tensor:
            return attn.reshape(1, attn.shape[0], q.shape[1], -1).to(q.dtype)

        return self._run(x, pos, inject)


def rope_of(rotary: nn.Module, dtype: torch.dtype, **kw: Any) -> RopeFn:
    """``rope`` from a transformers rotary-embedding module (``rotary(x, position_ids, **kw)``), cos/sin
    computed in float32 and cast to ``dtype`` as the family's model does."""

    def f(pos: Tensor) -> tuple[Tensor, Tensor]:
        probe = torch.empty(0, dtype=dtype, device=pos.device)
        cos, sin = rotary(probe, pos[None].to(torch.long), **kw)
        return cos, sin

    return f


__all__ = ["HOOK", "HookedBlock", "RopeFn", "register", "rope_of"]
