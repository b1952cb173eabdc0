"""The target interface every hidden-state head reads through (the contract: TARGET_PROTOCOL.md).

Knows nothing about heads, requests or logs. A *target* is the model whose outputs were logged; a head
reads, at each position, the target's residual stream at a few layers (:data:`LayerId`), its input
embedding and lm_head weights, and (DeepSeek-style MTP) its final norm. Three sources implement it:
``hf.TransformersTarget`` (any architecture transformers loads), ``lean.LeanTarget`` (the embedded
engine's own model) and ``dumps.VllmDumpTarget`` (hidden states vLLM wrote itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import Tensor

#: ``int`` i in 0..N: vLLM's auxiliary-layer id, the residual stream *entering* decoder layer i (N: the
#: last layer's output before the final norm); ``"final"``: after the final norm (what lm_head reads).
#: ``layers.py`` owns how other tools number the same tensors.
LayerId = int | Literal["final"]


class TargetError(ValueError):
    """A target that cannot be opened or cannot give what a head asks; the message names the place."""


@dataclass(frozen=True)
class TargetPass:
    """One teacher-forced pass of the target over one token sequence."""

    token_ids: tuple[int, ...]
    hidden: Tensor  # [T, len(layer_ids), H] in the order asked
    #: layer index -> (k, v) [T, num_kv_heads, head_dim] post-RoPE, only for ``kv_layers`` asked
    kv: dict[int, tuple[Tensor, Tensor]] = field(default_factory=dict)

    def flat(self) -> Tensor:
        """``hidden`` as the engine feeds it: [T, len(layer_ids) * H], layers side by side."""
        return self.hidden.reshape(self.hidden.shape[0], -1)


@runtime_checkable
class Target(Protocol):
    name: str  #: for messages (never an absolute path in results)
    config: Any  #: the HF ``PretrainedConfig`` (or an equivalent object) of the target
    num_layers: int
    hidden_size: int
    vocab_size: int
    device: torch.device
    dtype: torch.dtype

    def embed_weight(self) -> Tensor:  # [V, H] the raw input embedding table (what vLLM shares with a head)
        ...

    def embed(self, ids: Tensor) -> Tensor:  # [N] -> [N, H] with the family's scale (Gemma: sqrt(H))
        ...

    def lm_head_weight(self) -> Tensor:  # [V, H]
        ...

    def final_norm(self, h: Tensor) -> Tensor:  # [..., H] -> [..., H] the target's own final norm
        ...

    def run(self, token_ids: Sequence[int], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = ()) -> TargetPass:
        ...

    def passes(self, seqs: Iterable[Sequence[int]], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = (),
               token_budget: int = 8192) -> Iterator[TargetPass]:
        ...


def check_layer_ids(layer_ids: Sequence[LayerId], num_layers: int, where: str) -> tuple[LayerId, ...]:
    """``layer_ids`` checked against a target of ``num_layers`` decoder layers (one line naming ``where``)."""
    ids = tuple(layer_ids)
    bad = [i for i in ids if i != "final" and not (isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= num_layers)]
    if bad:
        raise TargetError(f"{where}: hidden-state layer id {bad[0]!r} is not in 0..{num_layers} or 'final' "
                          f"(the target has {num_layers} layers)")
    return ids


def check_tokens(token_ids: Sequence[int], vocab_size: int, where: str) -> list[int]:
    seq = [int(t) for t in token_ids]
    if not seq:
        raise TargetError(f"{where}: an empty token sequence")
    bad = next((t for t in seq if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise TargetError(f"{where}: token id {bad} outside the target's vocabulary (size {vocab_size})")
    return seq


def budget_batches(seqs: Iterable[Sequence[int]], token_budget: int) -> Iterator[list[list[int]]]:
    """Consecutive sequences grouped so that each group's padded size (rows x longest) stays within
    ``token_budget``; a sequence longer than the budget goes alone. Order is kept; at most one group
    is held at a time (a log of any size streams through)."""
    group: list[list[int]] = []
    longest = 0
    for s in seqs:
        s = list(s)
        n = max(longest, len(s))
        if group and n * (len(group) + 1) > token_budget:
            yield group
            group, n = [], len(s)
        group.append(s)
        longest = n
    if group:
        yield group


__all__ = ["LayerId", "Target", "TargetError", "TargetPass", "budget_batches", "check_layer_ids", "check_tokens"]
