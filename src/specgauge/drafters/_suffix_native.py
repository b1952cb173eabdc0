"""Optional native backend of the ``suffix`` drafter: ArcticInference 0.3.0's own
``SuffixDecodingCache`` (C++ ``SuffixTree`` behind nanobind), driven as vLLM 0.32's
``SuffixDecodingProposer`` drives it.

Install with ``pip install nanobind==2.9.2 grpcio-tools wheel`` then
``pip install --no-build-isolation arctic-inference==0.3.0`` (``scripts/test.sh`` does it): the
``arctic_inference.suffix_decoding`` package imports numpy and its extension only, never torch or vLLM.
Without it the pure-Python twin in ``suffix.py`` is used; the two give identical drafts
(``tests/unit/test_suffix.py``).

This module only talks to the cache; request bookkeeping (which tokens are already learned, the
``max_model_len`` skip) stays in ``SuffixDrafter`` so that both backends share it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from specgauge.drafters._suffix_replay import accepted_prefix

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


class NativeSuffixCache:
    """Start / learn / speculate / stop on a real ``SuffixDecodingCache``."""

    def __init__(self, max_tree_depth: int, max_cached_requests: int) -> None:
        if SuffixDecodingCache is None:
            raise RuntimeError(f"suffix drafter: backend 'native' unavailable: {IMPORT_ERROR}")
        self.max_tree_depth = max_tree_depth
        self.cache: Any = SuffixDecodingCache(max_tree_depth=max_tree_depth, max_cached_requests=max_cached_requests)

    def start(self, request_id: str, prompt_ids: list[int]) -> None:
        # SuffixDecodingProposer.propose: a reused id's cached response is evicted before starting
        if request_id in self.cache.cached_requests:
            self.cache.evict_cached_response(request_id)
        self.cache.start_request(request_id, prompt_ids)

    def learn(self, request_id: str, tokens: list[int]) -> None:
        self.cache.add_active_response(request_id, tokens)

    def speculate(self, request_id: str, context: Sequence[int], k: int, factor: float, min_prob: float) -> list[int]:
        draft = self.cache.speculate(request_id, context, max_spec_tokens=k, max_spec_factor=factor, min_token_prob=min_prob)
        return list(draft.token_ids)

    def stop(self, request_id: str) -> None:
        self.cache.stop_request(request_id)

    def replay_steps(
        self,
        request_id: str,
        tokens: list[int],
        prompt_len: int,
        seen: int,
        k: int,
        factor: float,
        min_prob: float,
        max_model_len: int | None,
    ) -> tuple[list[int], list[int], int, list[int]]:
        """The decode steps of one started request whose prompt + whole output is ``tokens``, each
        step exactly ``propose`` then accept-the-matching-prefix (``base.replay_by_stepping``), with
        the per-step Python overhead stripped: the request's two native trees are called directly
        (``add_active_response`` and ``speculate`` do the same calls after argument checks).
        Returns (drafted, accepted, tokens learned so far, the final step's draft)."""
        cache = self.cache
        local = cache._local_trees[request_id]
        glob = cache._global_tree
        seq = cache._req_to_seq_id.get(request_id)
        depth = self.max_tree_depth
        total = len(tokens)
        drafted: list[int] = []
        accepted: list[int] = []
        n = prompt_len + 1  # output token 0 came from the prefill
        draft: list[int] = []
        while n < total:
            if max_model_len is not None and n >= max_model_len:
                draft = []  # vLLM skips the request, learning nothing
            else:
                kk = k if max_model_len is None else min(k, max_model_len - n - 1)
                new = tokens[seen:n]
                local.extend(0, new)
                if seq is not None:
                    glob.extend(seq, new)
                seen = n
                context = tokens[n - depth : n] if n > depth else tokens[:n]
                d1 = local.speculate(context, kk, factor, 0.0, min_prob, False)
                d2 = glob.speculate(context, kk, factor, 0.0, min_prob, False)
                draft = list((d1 if d1.score >= d2.score else d2).token_ids)
            a = accepted_prefix(draft, tokens, n)
            drafted.append(len(draft))
            accepted.append(a)
            n += a + 1
        return drafted, accepted, seen, draft
