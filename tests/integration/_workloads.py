"""Small workloads cut from the shipped logged sample, shared by the prediction tests: the product's own
cutter (``specgauge.testing.gpu_check.cut_logged``, which the GPU-shaped benchmark uses too)."""

from __future__ import annotations

from specgauge.testing.gpu_check import cut_logged as cut_logged_sample

__all__ = ["cut_logged_sample"]
