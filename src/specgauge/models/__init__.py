"""The tiny models shipped with specgauge: a target LM and a smaller draft LM sharing one tokenizer.

Both are Hugging Face directories (``config.json``, ``model.safetensors`` in bfloat16, ``tokenizer.json``,
``tokenizer_config.json`` with a ChatML-style chat template, ``tokenizer.model`` for llama.cpp's GGUF
converter, ``generation_config.json``) made by ``scripts/train_tiny_models.py``; each directory's
``README.md`` and ``training_figures.json`` give the training figures and the draft's acceptance.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent

TARGET_NAME = "tiny-target"
DRAFT_NAME = "tiny-draft"


def target_dir() -> Path:
    """Directory of the shipped tiny target model (loadable by transformers, vLLM and the engine)."""
    return _HERE / TARGET_NAME


def draft_dir() -> Path:
    """Directory of the shipped tiny draft model (same tokenizer and vocabulary as the target)."""
    return _HERE / DRAFT_NAME


EAGLE3_NAME = "tiny-eagle3"
MTP_NAME = "tiny-mtp"


def eagle3_dir() -> Path:
    """Directory of the shipped EAGLE-3 head for the tiny target (vLLM's EAGLE-3 checkpoint format)."""
    return _HERE / EAGLE3_NAME


def mtp_dir() -> Path:
    """Directory of the shipped MTP head for the tiny target (a DeepSeek-V3-style MTP layer)."""
    return _HERE / MTP_NAME


def heads_available() -> bool:
    """True when both shipped hidden-state heads carry weights."""
    return all((d / "model.safetensors").is_file() for d in (eagle3_dir(), mtp_dir()))


DFLASH_NAME = "tiny-dflash"


def dflash_dir() -> Path:
    """Directory of the shipped DFlash block-parallel head for the tiny target (vLLM's ``DFlashDraftModel`` format)."""
    return _HERE / DFLASH_NAME


def dflash_available() -> bool:
    """True when the shipped DFlash head carries weights."""
    return (dflash_dir() / "model.safetensors").is_file()


def available() -> bool:
    """True when both shipped directories carry weights and a tokenizer."""
    return all((d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file() for d in (target_dir(), draft_dir()))


__all__ = ["DFLASH_NAME", "DRAFT_NAME", "EAGLE3_NAME", "MTP_NAME", "TARGET_NAME", "available", "dflash_available",
           "dflash_dir", "draft_dir", "eagle3_dir",
           "heads_available", "mtp_dir", "target_dir"]
