"""Targets: the model a hidden-state head reads, behind one narrow interface (``base.Target``), from
transformers (``hf``), the embedded engine's model (``lean``) or vLLM's own dumps (``dumps``);
``open.open_target`` picks the source; ``layers`` owns layer numbering. Imports torch lazily."""

from specgauge.targets.base import LayerId, Target, TargetError, TargetPass

__all__ = ["LayerId", "Target", "TargetError", "TargetPass"]
