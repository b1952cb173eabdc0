"""The target families issue 38 names, for the target / head tests (built by ``testing.tiny_families``)."""

from __future__ import annotations

from pathlib import Path

from specgauge.testing.tiny_families import make_tiny_family

FAMILIES = ("llama", "qwen3", "qwen3_moe", "gemma4", "deepseek_v3", "gpt_oss")


def tiny_family(name: str, out: Path, seed: int = 0) -> Path:
    """A random tiny ``name`` checkpoint (+ tokenizer) saved in ``out``."""
    return make_tiny_family(name, out, seed=seed)
