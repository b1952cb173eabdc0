"""Optional native backend of the ``suffix`` drafter: ArcticInference 0.3.0's own
``SuffixDecodingCache`` (C++ ``SuffixTree`` behind nanobind), driven as vLLM 0.32's
``SuffixDecodingProposer`` drives it, through its public calls only (``cache.SuffixCache``).

Install with ``pip install nanobind==2.9.2 grpcio-tools wheel`` then
``pip install --no-build-isolation arctic-inference==0.3.0`` (``scripts/test.sh`` does it): the
``arctic_inference.suffix_decoding`` package imports numpy and its extension only, never torch or vLLM.
Without it the pure-Python twin (``cache.PythonCache``) is used; the two give identical drafts
(``tests/unit/test_suffix.py``).

This module only talks to the cache; request bookkeeping (which tokens are already learned, the
``max_model_len`` skip) stays in ``SuffixDrafter`` so that both backends share it.
"""

from __future__ import annotations

import os
from typing import Any

from specgauge.drafters.suffix.cache import Steps, walk_steps

try:
    from arctic_inference.suffix_decoding import SuffixDecodingCache
except ImportError as exc:  # the optional extra is not installed (or did not build)
    SuffixDecodingCache = None
    IMPORT_ERROR = f"arctic_inference.suffix_decoding is not importable ({type(exc).__name__}: {exc}); " \
        "install it with scripts/test.sh or: pip install nanobind==2.9.2 grpcio-tools wheel && " \
        "pip install --no-build-isolation arctic-inference==0.3.0"
else:
    IMPORT_ERROR = ""


BACKENDS = ("auto", "python", "native")


def native_available() -> bool:
    return SuffixDecodingCache is not None


def resolve_backend(backend: str) -> str:
    """``auto``: ``SPECGAUGE_SUFFIX_BACKEND`` if set, else native when importable, else python."""
    if backend not in BACKENDS:
        raise ValueError(f"suffix drafter: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        backend = os.environ.get("SPECGAUGE_SUFFIX_BACKEND", "auto")
        if backend not in BACKENDS:
            raise ValueError(f"SPECGAUGE_SUFFIX_BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend == "auto":
            return "native" if native_available() else "python"
    return backend


class NativeCache:
    """``cache.SuffixCache`` on a real ``SuffixDecodingCache``."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int, max_spec_factor: float, min_token_prob: float) -> None:
        if SuffixDecodingCache is None:
            raise RuntimeError(f"suffix drafter: backend 'native' unavailable: {IMPORT_ERROR}")
        self.max_tree_depth = max_tree_depth
        self.factor, self.min_prob = max_spec_factor, min_token_prob
        self.cache: Any = SuffixDecodingCache(max_tree_depth=max_tree_depth, max_cached_requests=max_cached_requests)

    def start(self, request_id: str, prompt: list[int]) -> None:
        # SuffixDecodingProposer.propose: a reused id's cached response is evicted before starting
        if request_id in self.cache.cached_requests:
            self.cache.evict_cached_response(request_id)
        self.cache.start_request(request_id, prompt)

    def extend(self, request_id: str, tokens: list[int]) -> None:
        self.cache.add_active_response(request_id, tokens)

    def speculate(self, request_id: str, context: list[int], k: int) -> list[int]:
        draft = self.cache.speculate(request_id, context, max_spec_tokens=k, max_spec_factor=self.factor,
                                     min_token_prob=self.min_prob)
        return list(draft.token_ids)

    def stop(self, request_id: str) -> None:
        self.cache.stop_request(request_id)

    def is_cached(self, request_id: str) -> bool:
        return request_id in self.cache.cached_requests

    def replay(self, request_id: str, tokens: list[int], prompt_len: int, seen: int, k: int,
               max_model_len: int | None, check: bool) -> Steps:
        """The decode steps of a started request (``cache.SuffixCache.replay``): per step, the tokens
        emitted since the last one are added (``add_active_response``), then ``speculate`` on the last
        ``max_tree_depth`` tokens, and the matching prefix is accepted. ``check`` has no effect: the native
        cache cannot say which drafts unknown tokens could change."""
        depth = self.max_tree_depth
        learned = [seen]

        def draft_at(n: int, kk: int, _checking: bool) -> tuple[list[int], bool]:
            if n > learned[0]:
                self.cache.add_active_response(request_id, tokens[learned[0] : n])
                learned[0] = n
            return self.speculate(request_id, tokens[n - depth : n] if n > depth else tokens[:n], kk), True

        out = walk_steps(tokens, prompt_len, k, max_model_len, draft_at)
        out.seen = learned[0]
        return out
