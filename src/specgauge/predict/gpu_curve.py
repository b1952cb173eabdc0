"""A measured GPU step-cost curve as a step-time function: the truth of the GPU-shaped scripted server.

Reads the curve ``measure_costs.py`` writes (``tests/data/gpu/h200-llama3-8b-costs.json``: one H200,
Llama-3-8B-shaped target, Llama-3.2-1B-shaped draft; seconds per decoder layer's GEMMs over n tokens,
per LM head over n tokens, per layer's attention over B sequences × ctx cached tokens) and turns it
into the time of one engine step, in the signature of ``predict.step_function`` — so the scripted
server (``scripted_server``) and the offline simulation (``schedule``) can both run on it:

    T = scale · ( host_a + host_r · B                               host work in series (scheduling, sampling)
                  + max( device, proposer ) )                       a host proposer overlaps the device step
    device   = layers · lin(n) + head(n) + layers · attn(B, ctx / B)     n = B + drafted + prefill tokens
               [+ k · (draft layers · lin_d(B) + head_d(B) + draft layers · attn(B, ctx / B))  a draft model]
               [+ verify]                                                a step that verifies drafts
    proposer = host_par[m] · B                                           n-gram / suffix lookups on the host

``lin``/``head`` are interpolated linearly between the measured token counts (and extended along the
last measured segment); attention bilinearly in (B, context per sequence) on the q = 1 column (the
memory-bound cost of any small q, as the curve's README says). ``scale`` stretches time so that a
Python server on a shared 2-core host keeps its deadlines (the speedups do not depend on it).

This is a test truth, not the law: the law (``law``) is what ``calibrate`` fits; the benchmark and the
GPU-shaped test check that the fitted law predicts what a server running on this curve measures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from specgauge.predict.law import is_model_method, method_kind
from specgauge.predict.types import ProfileError

StepFn = Callable[..., float]


class GpuServerCosts(BaseModel):
    """What the curve does not hold: a real server's host work around the forward (seconds)."""

    scale: float = Field(default=1.0, gt=0, description="time stretch: every step's time × scale")
    host_a: float = 0.0004  #: per step on the host (scheduling, sampling, detokenising; vLLM ~0.3–1 ms)
    host_r: float = 8e-6  #: per request in the decode batch, on the host
    verify: float = 0.00015  #: per step that verifies drafts (the rejection sampler's launch)
    #: per request per step, a host proposer overlapping the device step, by method
    host_par: dict[str, float] = Field(default_factory=lambda: {"ngram": 2e-5, "suffix": 2.5e-4})
    target: str = "llama3-8b"
    target_head: str = "128256x4096"
    draft: str = "llama3.2-1b"
    draft_head: str = "128256x2048"


def _interp(table: dict[str, float]) -> Callable[[float], float]:
    xs = np.asarray(sorted(int(k) for k in table), dtype=float)
    ys = np.asarray([table[str(int(x))] for x in xs], dtype=float)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])

    def f(n: float) -> float:
        if n <= xs[0]:
            return float(ys[0])
        if n >= xs[-1]:
            return float(ys[-1] + slope * (n - xs[-1]))
        return float(np.interp(n, xs, ys))

    return f


class GpuCurve:
    """The measured curve: forward and attention times (seconds, one GPU, unscaled)."""

    def __init__(self, data: dict[str, Any], source: str = "curve") -> None:
        try:
            self.layers = {name: int(v[5]) for name, v in data["models"].items()}
            self._lin = {name: _interp(t) for name, t in data["lin"].items()}
            self._head = {name: _interp(t) for name, t in data["head"].items()}
            attn = data["attn"]
            self._bs = np.asarray(sorted(int(b) for b in attn), dtype=float)
            self._ctx = np.asarray(sorted(int(c) for c in attn[str(int(self._bs[0]))]["1"]), dtype=float)
            self._attn = np.asarray([[attn[str(int(b))]["1"][str(int(c))] for c in self._ctx] for b in self._bs])
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ProfileError(f"{source}: not a GPU cost curve of measure_costs.py ({type(e).__name__}: {e})") from None
        self.device = str(data.get("device", "GPU"))

    @classmethod
    def load(cls, path: str | Path) -> GpuCurve:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ProfileError(f"GPU cost curve {path}: cannot read JSON ({e})") from None
        return cls(data, str(path))

    def forward(self, n: float, model: str, head: str) -> float:
        """All layers' GEMMs + the LM head over ``n`` tokens."""
        if n <= 0:
            return 0.0
        return self.layers[model] * self._lin[model](n) + self._head[head](n)

    def attention(self, batch: int, context: float, model: str) -> float:
        """All layers' attention for ``batch`` sequences holding ``context`` cached tokens in all."""
        if batch <= 0:
            return 0.0
        per_seq = context / batch
        rows = np.asarray([self._line(self._ctx, r, per_seq) for r in self._attn])
        return self.layers[model] * max(0.0, self._line(self._bs, rows, float(batch)))

    @staticmethod
    def _line(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
        """Linear interpolation, extended along the first / last segment."""
        if x <= xs[0]:
            lo, hi = 0, 1
        elif x >= xs[-1]:
            lo, hi = len(xs) - 2, len(xs) - 1
        else:
            return float(np.interp(x, xs, ys))
        return float(ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo]))


def gpu_step_function(curve: GpuCurve, costs: GpuServerCosts, method: str | None, k: int) -> StepFn:
    """One step's time on the curve (the signature of ``predict.step_function``)."""
    m = method_kind(method)
    model = is_model_method(method)
    hp = costs.host_par.get(m or "", 0.0) if m and not model else 0.0
    s = costs.scale

    def step(bs: int, dsum: int, dmax: int, ctx: int, ptok: int, preq: int, emit: int,
             sampled: int = 0, sampled_verify: int = 0, sampled_drafted: int = 0) -> float:
        n = bs + dsum + ptok
        device = curve.forward(n, costs.target, costs.target_head) + curve.attention(bs, ctx, costs.target)
        if dsum > 0:
            device += costs.verify
        if model and bs and k:
            one = (curve.forward(bs, costs.draft, costs.draft_head) + curve.attention(bs, ctx, costs.draft))
            device += k * one
        if model and ptok:
            device += curve.forward(ptok, costs.draft, costs.draft_head)  # the draft model's own prefill
        host = costs.host_a + costs.host_r * bs
        return s * (host + max(device, hp * bs))

    return step
