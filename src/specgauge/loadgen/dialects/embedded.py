"""The embedded specgauge server: vLLM's metric names and per-request shape, its own identity."""

from __future__ import annotations

from typing import Any

from specgauge.loadgen.dialects.vllm import VLLMDialect
from specgauge.loadgen.metrics_scrape import Snapshot


class EmbeddedDialect(VLLMDialect):
    """Same wire shape as vLLM (``vllm:*`` counters, ``metrics.speculative_decoding``)."""

    name = "embedded"

    def identity_paths(self) -> list[str]:
        return ["/version", "/v1/models", "/info"]

    def memory(self, snap: Snapshot) -> dict[str, Any]:
        """vLLM's KV gauge plus what the engine holds: ``specgauge:model_weight_bytes{role}``,
        ``specgauge:kv_cache_capacity_bytes{role}``, ``specgauge:kv_cache_capacity_tokens``."""
        out = super().memory(snap)
        eng: dict[str, Any] = {}
        for name, key in (("specgauge:model_weight_bytes", "weight_bytes"), ("specgauge:kv_cache_capacity_bytes", "kv_capacity_bytes")):
            for ls, v in snap.select(name).items():
                role = dict(ls).get("role")
                if role:
                    eng.setdefault(role, {})[key] = int(v)
        tokens = snap.get("specgauge:kv_cache_capacity_tokens")
        if tokens is not None:
            eng["kv_capacity_tokens"] = int(tokens)
        if eng:
            out["engine_memory"] = eng
        return out
