"""Summaries of one sample: mean / median / std / percentiles / max, NaN with a reason when empty (a base
module: workload profiles, replay tables, bench latencies and canary windows all describe samples with it).

Percentiles use numpy's default (linear interpolation), as ``vllm bench serve`` does, so the same
data gives the same p99 in both tools.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)


def pct_label(p: float) -> str:
    """vLLM's naming: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


@dataclass(frozen=True)
class Dist:
    n: int
    mean: float
    median: float
    std: float
    max: float
    percentiles: dict[float, float] = field(default_factory=dict)
    reason: str | None = None  #: why the values are NaN (no data), None when they are real

    def pct(self, p: float) -> float:
        return self.percentiles.get(p, math.nan)

    def scaled(self, k: float) -> Dist:
        return Dist(n=self.n, mean=self.mean * k, median=self.median * k, std=self.std * k, max=self.max * k,
                    percentiles={p: v * k for p, v in self.percentiles.items()}, reason=self.reason)

    def to_json(self, unit: str = "") -> dict[str, Any]:
        sfx = f"_{unit}" if unit else ""
        out: dict[str, Any] = {"n": self.n}
        for k, v in (("mean", self.mean), ("median", self.median), ("std", self.std), ("max", self.max)):
            out[k + sfx] = finite_or_none(v)
        for p, v in sorted(self.percentiles.items()):
            out[f"p{pct_label(p)}{sfx}"] = finite_or_none(v)
        if self.reason:
            out["reason"] = self.reason
        return out


def finite_or_none(v: float | None) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def describe(values: Iterable[float], percentiles: Sequence[float] = DEFAULT_PERCENTILES, empty_reason: str = "no data") -> Dist:
    arr = np.fromiter(values, dtype=float)
    if arr.size == 0:
        nan = math.nan
        return Dist(n=0, mean=nan, median=nan, std=nan, max=nan, percentiles={p: nan for p in percentiles},
                    reason=empty_reason)
    ps = np.percentile(arr, list(percentiles)) if percentiles else []
    return Dist(n=int(arr.size), mean=float(arr.mean()), median=float(np.median(arr)), std=float(arr.std()),
                max=float(arr.max()), percentiles={p: float(v) for p, v in zip(percentiles, ps)}, reason=None)
