"""Per-request sampling settings and logits -> probabilities (temperature, top-k, top-p).

Knows nothing about speculation: ``verify`` consumes the probabilities made here.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor


class SamplingParams(BaseModel):
    """What one request asks for. ``temperature == 0`` means greedy (argmax)."""

    model_config = ConfigDict(frozen=True)

    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0, le=2**31 - 1)  # 0 (or -1 at the API) = no top-k; the server caps it at the vocab
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)  # what torch.Generator.manual_seed takes
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def make_generator(seed: int | None) -> torch.Generator:
    """A per-request generator: seeded -> reproducible, else seeded from the global RNG."""
    g = torch.Generator(device="cpu")  # on the CPU whatever the engine's device (its draws are copied over)
    g.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,), device="cpu").item()))
    return g


def logits_to_probs(
    logits: Tensor,  # [N, V] float32
    temperature: Tensor,  # [N] float32; rows with 0 are greedy and get a one-hot at the argmax
    top_k: Tensor,  # [N] int64; 0 = off
    top_p: Tensor,  # [N] float32; 1.0 = off
) -> Tensor:  # probs [N, V] float32, each row sums to 1
    """Apply temperature, then top-k, then top-p (vLLM's order), then softmax."""
    greedy = temperature == 0
    x = logits / torch.where(greedy, 1.0, temperature)[:, None]
    V = x.shape[-1]
    if bool((top_k > 0).any()) or bool((top_p < 1.0).any()):
        sorted_x, idx = x.sort(dim=-1, descending=True)
        ranks = torch.arange(V)[None, :]
        k = torch.where(top_k > 0, top_k.clamp(max=V), V)[:, None]
        drop = ranks >= k
        sorted_x = sorted_x.masked_fill(drop, float("-inf"))
        p = sorted_x.softmax(-1)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept)
        drop |= (p.cumsum(-1) - p) >= top_p[:, None]
        sorted_x = sorted_x.masked_fill(drop, float("-inf"))
        x = torch.full_like(x, float("-inf")).scatter(-1, idx, sorted_x)
    probs = x.softmax(-1)
    if bool(greedy.any()):
        onehot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        probs = torch.where(greedy[:, None], onehot, probs)
    return probs
