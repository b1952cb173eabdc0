"""``open_target``: the one place that picks a target source for a spec.

* an object that already is a Target -> itself; the engine's lean ``Transformer`` -> ``LeanTarget``;
* a directory or a Hub id -> ``TransformersTarget`` (``source="transformers"``, the default), or the
  lean model (``source="lean"``: Llama / Qwen2 / Qwen3 checkpoints only);
* with ``hidden_states`` (a directory of vLLM dumps) -> ``VllmDumpTarget``, the spec naming the target's
  checkpoint (read for its config and the few tensors a dump does not hold, never run).

Opened targets are shared while anyone holds them (one per spec, source, device and dtype): a replay
at several k builds one drafter per k, all reading one target.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, Literal

from specgauge.targets.base import Target, TargetError

Source = Literal["transformers", "lean"]
_open: weakref.WeakValueDictionary[tuple[str, ...], Any] = weakref.WeakValueDictionary()


def open_target(spec: Any, device: str = "cpu", dtype: Any = "auto", device_map: str | None = None,
                source: Source = "transformers", hidden_states: str | Path | None = None) -> Target:
    """The Target for ``spec`` (see the module's docstring); errors are ``TargetError`` naming it."""
    if hidden_states is not None:
        from specgauge.targets.dumps import VllmDumpTarget
        from specgauge.targets.hf import local_dir, pick_device, pick_dtype

        dev = pick_device(device)
        return VllmDumpTarget(hidden_states, local_dir(spec), str(dev), pick_dtype(dtype, dev))
    if isinstance(spec, Target):
        return spec
    if hasattr(spec, "forward_flat_hidden"):  # the embedded engine's model
        from specgauge.targets.lean import LeanTarget

        return LeanTarget(spec)
    if not isinstance(spec, str | Path):
        raise TargetError(f"target {spec!r}: expected a directory or a Hub id")
    key = (str(Path(spec).resolve()) if Path(spec).exists() else str(spec), source, str(device), str(dtype), str(device_map))
    hit = _open.get(key)
    if hit is not None:
        return hit  # type: ignore[no-any-return]
    target: Any
    if source == "lean":
        from specgauge.nn.weights import torch_dtype
        from specgauge.targets.lean import LeanTarget

        if device not in ("cpu", "auto"):
            raise TargetError(f"target {spec}: the embedded engine's model runs on the CPU only")
        target = LeanTarget.open(spec, torch_dtype("float32" if dtype == "auto" else dtype))
    elif source == "transformers":
        from specgauge.targets.hf import TransformersTarget

        target = TransformersTarget.open(spec, device, dtype, device_map)
    else:
        raise TargetError(f"target source {source!r}: expected transformers or lean")
    _open[key] = target
    return target  # type: ignore[no-any-return]


__all__ = ["Source", "open_target"]
