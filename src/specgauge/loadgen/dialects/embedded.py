"""The embedded specgauge server: vLLM's metric names and per-request shape, its own identity."""

from __future__ import annotations

from specgauge.loadgen.dialects.vllm import VLLMDialect


class EmbeddedDialect(VLLMDialect):
    """Same wire shape as vLLM (``vllm:*`` counters, ``metrics.speculative_decoding``)."""

    name = "embedded"

    def identity_paths(self) -> list[str]:
        return ["/version", "/v1/models", "/info"]
