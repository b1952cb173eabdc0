"""THE one owner of hidden-state layer numbering. Every tool names the same tensors differently:

* **vLLM auxiliary-layer id** i (what :data:`~specgauge.targets.base.LayerId` is, what EAGLE-3's
  ``eagle_aux_hidden_state_layer_ids`` and vLLM's ``extract_hidden_states`` use): the residual stream
  *entering* decoder layer i — in vLLM's fused layers ``hidden_states + residual`` before layer i runs.
  i = 0: the embeddings (with the family's scale); i = N: the last layer's output before the final norm.
* **transformers** ``output_hidden_states``: index 0 = the embeddings, index i = the output of layer
  i - 1 — the same tensor as vLLM's id i for 0 <= i < N — but its last entry (index N) is taken *after*
  the final norm: vLLM's id N has no transformers index, and index N is our ``"final"``.
* **layer outputs** (DFlash's ``target_layer_ids``, SGLang's capture ids): j names the output of layer
  j, which is vLLM's id j + 1 (vLLM's DFlash adds the 1 itself).

Worked example, N = 4 layers: vLLM id 2 = hidden_states[2] = output of layer 1 = DFlash id 1;
vLLM id 4 = output of layer 3 before the norm (no hidden_states entry); "final" = hidden_states[4].
``tests/unit/test_target_layers.py`` checks this on every family the tests build.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from specgauge.targets.base import LayerId

#: where a source captures a layer id: the embedding module's output, decoder layer j's output, or the final norm's
Capture = tuple[Literal["embed", "layer_output", "final_norm"], int]


def from_layer_output(j: int) -> int:
    """A layer-output id (DFlash ``target_layer_ids``, SGLang) -> vLLM's aux id: j + 1."""
    return int(j) + 1


def to_layer_output(layer_id: int) -> int:
    """vLLM's aux id i >= 1 -> the layer whose output it is: i - 1."""
    if layer_id < 1:
        raise ValueError(f"aux id {layer_id} is the embeddings, the output of no layer")
    return int(layer_id) - 1


def hf_hidden_states_index(layer_id: LayerId, num_layers: int) -> int | None:
    """The index of transformers' ``output_hidden_states`` holding ``layer_id``: i for 0 <= i < N,
    N for ``"final"``; None for i = N (transformers keeps only its normed version)."""
    if layer_id == "final":
        return num_layers
    return int(layer_id) if int(layer_id) < num_layers else None


def capture_point(layer_id: LayerId) -> Capture:
    """Which module's output holds ``layer_id`` in a model laid out as transformers does
    (``embed_tokens``, ``layers[j]``, ``norm``)."""
    if layer_id == "final":
        return ("final_norm", 0)
    if int(layer_id) == 0:
        return ("embed", 0)
    return ("layer_output", to_layer_output(int(layer_id)))


def vllm_aux_order(layer_ids: Sequence[int]) -> tuple[int, ...]:
    """The order vLLM hands auxiliary hidden states to a head (and writes them to a dump): ascending,
    each once (``models/interfaces.py``: ``tuple(sorted(set(layers)))``), whatever order the head's
    config lists them in — so a head's ``fc`` columns follow this order."""
    return tuple(sorted({int(i) for i in layer_ids}))


def default_eagle3_aux_ids(num_layers: int) -> tuple[int, ...]:
    """vLLM's default EAGLE-3 auxiliary layers for a target of ``num_layers`` (``models/interfaces.py``:
    (2, N // 2, N - 3)), deduplicated and sorted as vLLM does."""
    n = num_layers
    return vllm_aux_order((2, n // 2, n - 3))


def dflash_aux_ids(target_layer_ids: Iterable[int]) -> tuple[int, ...]:
    """DFlash's ``target_layer_ids`` (layer outputs) as vLLM aux ids, in vLLM's order."""
    return vllm_aux_order(from_layer_output(j) for j in target_layer_ids)


__all__ = ["Capture", "capture_point", "default_eagle3_aux_ids", "dflash_aux_ids", "from_layer_output",
           "hf_hidden_states_index", "to_layer_output", "vllm_aux_order"]
