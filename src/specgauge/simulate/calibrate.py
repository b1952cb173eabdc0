"""Measure a cost profile for the cost model on a model you can run here (the embedded engine).

Times the target's forward over n tokens per sequence at batch B (n = 1 is a plain decode step,
n = k + 1 a verification) on a warm KV cache, fits the cost model's ``saturation_tokens`` to the
measured ratios T(B·n) / T(B), and measures a draft model's step cost relative to the target's
(``draft_cost``). The result is a ``--cost-profile`` file: ``{"default": {...}, "draft_model": {...}}``.
On a GPU server, measure the same ratios there (``specgauge bench`` at k = 0 and k > 0) instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specgauge.simulate.cost_model import CostProfile, CostProfiles


def fit_saturation(points: Sequence[tuple[int, int, float]]) -> float:
    """The ``saturation_tokens`` whose model max(1, B·n/s) / max(1, B/s) best fits measured
    ratios (B, n, T(B·n)/T(B)), least squares on the log scale over a grid of s."""
    grid = np.unique(np.round(np.geomspace(0.25, 4096, 400), 3))
    best, best_err = float(grid[-1]), float("inf")
    for s in grid:
        err = 0.0
        for b, n, r in points:
            model = max(1.0, b * n / s) / max(1.0, b / s)
            err += (np.log(model) - np.log(max(r, 1e-9))) ** 2
        if err < best_err:
            best, best_err = float(s), err
    return best


def _time_forward(model, b: int, n: int, context: int, repeats: int) -> float:  # type: ignore[no-untyped-def]
    import torch

    cache = model.new_cache(b, context + n + 2)
    slots = torch.arange(b)
    vocab = model.args.vocab_size
    g = torch.Generator().manual_seed(0)
    model(torch.randint(0, vocab, (b, context), generator=g), slots, torch.zeros(b, dtype=torch.long), cache)
    x = torch.randint(0, vocab, (b, n), generator=g)
    start = torch.full((b,), context, dtype=torch.long)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        model(x, slots, start, cache, last_only=None)
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def calibrate_engine(target_dir: str | Path, draft_dir: str | Path | None = None, batch_sizes: Sequence[int] = (1, 4),
                     ks: Sequence[int] = (1, 4, 8), context: int = 256, repeats: int = 5) -> CostProfiles:
    import torch

    from specgauge.nn.weights import load_model

    target = load_model(target_dir, torch.float32)
    points, base = [], {}
    for b in batch_sizes:
        base[b] = _time_forward(target, b, 1, context, repeats)
        for k in ks:
            points.append((b, k + 1, _time_forward(target, b, k + 1, context, repeats) / base[b]))
    sat = fit_saturation(points)
    default = CostProfile(saturation_tokens=sat)
    per: dict[str, CostProfile] = {}
    if draft_dir is not None:
        draft = load_model(draft_dir, torch.float32)
        b0 = batch_sizes[0]
        c = _time_forward(draft, b0, 1, context, repeats) / base[b0]
        per["draft_model"] = CostProfile(saturation_tokens=sat, draft_cost=round(c, 4))
    return CostProfiles(default=default, per_method=per)


def save(profiles: CostProfiles, path: Path) -> Path:
    data = {"default": profiles.default.model_dump(exclude_none=True),
            **{k: v.model_dump(exclude_none=True) for k, v in profiles.per_method.items()}}
    path.write_text(json.dumps(data, indent=1))
    return path
