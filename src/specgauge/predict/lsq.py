"""The least-squares core of the step-cost fit: the design matrix of the regression rows, a column-scaled
non-negative least squares (``scipy.optimize.nnls``), the robust pass that drops rows far off the fit,
and the request resampling of the bootstrap. Used by ``fit`` (the straight line) and ``fit_knee`` (the
GPU terms); knows nothing about runs or profiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls
from scipy.stats import median_abs_deviation

from specgauge.predict.rows import Rows

#: the HTTP round trip's column (the TTFT rows' one step carries it)
ELL = "ell"


def design(rows: Sequence[Rows], shape: str, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X (rows × names), y, weights, steps — one row per request window / idle TTFT."""
    X, y, w, st = [], [], [], []
    ell_col = names.index(ELL)
    for r in rows:
        for kind, yy, s, tab in zip(r.kind, r.y, r.steps, r.tables, strict=True):
            x = tab.features(shape, names).sum(axis=0)
            if kind == "ttft":
                x[ell_col] = 1.0
            X.append(x)
            y.append(yy)
            w.append(1.0)
            st.append(s)
    return np.asarray(X, dtype=float), np.asarray(y), np.asarray(w), np.asarray(st, dtype=float)


def solve(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted non-negative least squares with column scaling (the columns differ by 10^6)."""
    Xw = X * w[:, None]
    scale = np.linalg.norm(Xw, axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(Xw / scale, y * w, maxiter=50 * X.shape[1])
    return coef / scale


def trim_rows(res: np.ndarray, trim: float, params: int) -> np.ndarray:
    """Rows within ``trim`` MADs of the fit (all of them when that would drop more than 20 %); the MAD scaled
    to a normal distribution's standard deviation (×1.4826)."""
    mad = float(median_abs_deviation(res, scale="normal"))
    keep = np.ones(len(res), dtype=bool)
    if mad > 0:
        keep = np.abs(res) <= trim * mad
        if keep.sum() < max(params + 1, int(0.8 * len(res))):
            keep[:] = True
    return keep


def robust_fit(X: np.ndarray, y: np.ndarray, w: np.ndarray, trim: float) -> tuple[np.ndarray, np.ndarray]:
    """The fit, then the fit again on the rows within ``trim`` MADs of it (``trim_rows``)."""
    coef = solve(X, y, w)
    keep = trim_rows((y - X @ coef) * w, trim, len(coef))
    if not keep.all():
        coef = solve(X[keep], y[keep], w[keep])
    return coef, keep


def run_groups(rows: Sequence[Rows], keep: np.ndarray) -> list[np.ndarray]:
    """Indices of each run's kept rows (the bootstrap resamples requests within a run)."""
    run_of = np.concatenate([np.full(len(r.y), i) for i, r in enumerate(rows)])
    return [np.flatnonzero((run_of == i) & keep) for i in range(len(rows))]


def resample(rng: np.random.Generator, groups: Sequence[np.ndarray]) -> np.ndarray:
    """One bootstrap draw: each run's rows drawn with replacement, as many as it has."""
    return np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups if len(g)])
