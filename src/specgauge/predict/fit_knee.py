"""The GPU-regime terms of the step-cost law, fitted where the rows ask for them (``law``: knee, hidden host).

``fit.fit_profile`` first fits the straight line (NNLS over per-request windows) and picks the
verification shape; ``extend`` then tries, on that shape:

1. a **knee**: a hinge column ``max(0, tokens of the forward − knee)`` per step, for every candidate
   knee (quantiles of the steps' forward sizes), each fitted by the same NNLS; the best knee by the
   residual;
2. a **host proposer overlapping the step** (per model-free method ``m``): ``T_s = max(L_s,
   host_par[m]·B_s + host_par0[m])``. Not linear in its parameters, so each row is the sum over its
   steps of that max. At a fixed host cost per request it is linear once it is known which steps the
   host sets (``host_par0`` then a column of those steps): NNLS and that mask alternate to a fixed point
   (``fit_hidden``); the host cost per request is searched on a grid of the steps' own cost per request
   under the current law (and the current host cost), then by a bounded scalar search (``search_host``).

Each extension stays only when it earns its parameters: the residual sum of squares must fall by at
least ``MIN_GAIN`` and the Bayesian information criterion must improve. A CPU server's rows (linear
from the first token, a proposer in series with the forward) keep the straight line. The bootstrap
refits with the chosen knee fixed (``refit``): the hinge slope and the host costs are resampled, so
the band widens where rows are sparse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar

from specgauge.i18n import en
from specgauge.predict.law import KNEE, KNEE_PARAM, hidden_host_params, is_model_method, method_kind
from specgauge.predict.lsq import ELL
from specgauge.predict.lsq import solve as lsq_solve
from specgauge.predict.rows import Rows

#: an extension must cut the residual sum of squares by at least this share
MIN_GAIN = 0.05
#: the host-cost search stops within this share of its bracket (grid neighbours)
XATOL = 1e-3


@dataclass
class Steps:
    """Every row's steps stacked: ``phi`` (steps × names) with the TTFT rows' round trip on their step."""

    phi: np.ndarray
    start: np.ndarray  # (R,) first step of each row (rows are contiguous runs of steps)
    batch: np.ndarray  # (steps,)
    method: np.ndarray  # (steps,) index into ``methods`` of the step's hidden-host method, -1 none
    y: np.ndarray  # (R,)
    methods: list[str] = field(default_factory=list)

    def sums(self, v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, self.start, axis=0)


def expand(rows: Sequence[Rows], shape: str, names: list[str], knee: float | None, methods: Sequence[str]) -> Steps:
    phis, batch, meth, starts, ys = [], [], [], [], []
    ell = names.index(ELL) if ELL in names else None
    n = 0
    for r in rows:
        for kind, yy, tab in zip(r.kind, r.y, r.tables, strict=True):
            phi = tab.features(shape, names, knee)
            if len(phi) == 0:  # a row without steps still needs one (zero) step for reduceat
                phi = np.zeros((1, len(names)))
                b = np.zeros(1)
            else:
                b = tab.batch.astype(float)
            if kind == "ttft" and ell is not None:
                phi[0, ell] = 1.0
            m = method_kind(tab.method)
            mi = methods.index(m) if m in methods else -1
            phis.append(phi)
            batch.append(b)
            meth.append(np.full(len(b), mi))
            starts.append(n)
            ys.append(yy)
            n += len(b)
    return Steps(phi=np.vstack(phis), start=np.asarray(starts), batch=np.concatenate(batch), method=np.concatenate(meth),
                 y=np.asarray(ys), methods=list(methods))


def _host_index(names: list[str], methods: Sequence[str]) -> list[tuple[int, int]]:
    return [(names.index(f"host_par[{m}]"), names.index(f"host_par0[{m}]")) for m in methods]


def predict_rows(st: Steps, theta: np.ndarray, hidx: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(per-row prediction, per-step mask where the host proposer sets the step time)."""
    lin = st.phi @ theta
    host = np.zeros_like(lin)
    for mi, (ih, ih0) in enumerate(hidx):
        on = (st.method == mi) & (st.batch > 0)
        host[on] = theta[ih] * st.batch[on] + theta[ih0]
    mask = host > lin
    return st.sums(np.where(mask, host, lin)), mask


def fit_hidden(st: Steps, theta0: np.ndarray, hidx: Sequence[tuple[int, int]], idx: np.ndarray | None = None,
               solve: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
               iters: int = 6) -> np.ndarray:
    """The max-shaped law at fixed host costs per request (``theta0``'s ``host_par`` entries): alternate
    between which steps the host sets (the mask) and an NNLS of the other steps' linear law and the host
    steps' fixed part ``host_par0`` on what the host's per-request cost leaves."""
    rows = np.arange(len(st.y)) if idx is None else idx
    theta = theta0.copy()
    fixed = [ih for ih, _ in hidx]
    free = np.setdiff1d(np.arange(len(theta)), fixed)
    nnls = solve or _nnls
    prev: np.ndarray | None = None
    for _ in range(iters):
        _, mask = predict_rows(st, theta, hidx)
        if prev is not None and np.array_equal(mask, prev):
            break
        prev = mask
        host = np.zeros(len(st.batch))
        phi = st.phi * (~mask)[:, None]
        for mi, (ih, ih0) in enumerate(hidx):
            on = mask & (st.method == mi)
            host[on] = theta[ih] * st.batch[on]
            phi[:, ih0] = on  # host_par0: linear once the mask is known, fitted with the rest
        X = st.sums(phi[:, free])
        yy = st.y - st.sums(host)
        theta[free] = nnls(X[rows], yy[rows], np.ones(len(rows)))
    return theta


def _nnls(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    return lsq_solve(X, y, w)


def search_host(st: Steps, theta0: np.ndarray, hidx: Sequence[tuple[int, int]], which: int, idx: np.ndarray | None,
                solve: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], grid: np.ndarray) -> tuple[float, np.ndarray]:
    """One method's host cost per request: the best of ``grid``, refined by a bounded scalar search
    (``scipy.optimize.minimize_scalar``) between that point's neighbours on the grid; the best point seen."""
    rows = np.arange(len(st.y)) if idx is None else idx
    ih = hidx[which][0]
    seen: list[tuple[float, np.ndarray]] = []

    def ssr(h: float) -> float:
        x0 = theta0.copy()
        x0[ih] = h
        th = fit_hidden(st, x0, hidx, rows, solve)
        pred, _ = predict_rows(st, th, hidx)
        seen.append((float(((pred - st.y)[rows] ** 2).sum()), th))
        return seen[-1][0]

    vals = [ssr(float(h)) for h in grid]
    i = int(np.argmin(vals))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, len(grid) - 1)])
    if hi > lo:
        minimize_scalar(ssr, bounds=(lo, hi), method="bounded", options={"xatol": XATOL * (hi - lo)})
    return min(seen, key=lambda v: v[0])


def _bic(ssr: float, n: int, p: int) -> float:
    return n * np.log(max(ssr, 1e-300) / max(n, 1)) + p * np.log(max(n, 2))


def _better(new: float, old: float, n: int, extra: int) -> bool:
    return new <= (1 - MIN_GAIN) * old and _bic(new, n, 0) + extra * np.log(max(n, 2)) < _bic(old, n, 0)


@dataclass
class Extension:
    names: list[str]
    coef: np.ndarray
    knee: float | None
    hidden: list[str]  #: methods with an overlapping host proposer
    notes: list[str]
    refit: Callable[[np.ndarray], np.ndarray]  #: rows -> coefficients (the bootstrap's refit)
    predict: Callable[[np.ndarray], np.ndarray]  #: coefficients -> per-row prediction

    def params(self) -> dict[str, float]:
        out = {n: float(v) for n, v in zip(self.names, self.coef, strict=True)}
        if self.knee is not None:
            out[KNEE] = float(self.knee)
        return out


def knee_candidates(rows: Sequence[Rows], shape: str, count: int = 16) -> list[float]:
    """Forward sizes (decode + prefill tokens) at evenly spaced quantiles of the decode steps."""
    sizes = [t.n_forward(shape) + t.prefill_tokens for r in rows for k, t in zip(r.kind, r.tables, strict=True)
             if k == "decode" and len(t)]
    if not sizes:
        return []
    v = np.concatenate(sizes).astype(float)
    qs = np.unique(np.round(np.quantile(v, np.linspace(0.1, 0.9, count))))
    return [float(q) for q in qs if q > v.min()]


def _names_with(names: list[str], knee: bool, hidden: Sequence[str]) -> list[str]:
    out = [*names[:-1], KNEE_PARAM, names[-1]] if knee and names and names[-1] == ELL else [*names, KNEE_PARAM] if knee else list(names)
    return out + [p for m in hidden for p in hidden_host_params(m)]


def _fit_at(rows: Sequence[Rows], shape: str, names: list[str], knee: float | None, hidden: Sequence[str],
            start: dict[str, float], kept: np.ndarray, solve: Callable[..., np.ndarray]) -> tuple[float, np.ndarray, Steps]:
    """SSR and coefficients at a fixed knee and fixed host costs (``start``'s host_par values)."""
    st = expand(rows, shape, names, knee, hidden)
    hidx = _host_index(names, hidden)
    if not hidden:
        X = st.sums(st.phi)
        c = solve(X[kept], st.y[kept], np.ones(len(kept)))
    else:
        c = fit_hidden(st, np.asarray([start.get(n, 0.0) for n in names]), hidx, kept, solve)
    pred, _ = predict_rows(st, c, hidx)
    return float(((pred - st.y)[kept] ** 2).sum()), c, st


@dataclass
class _Search:
    """What every trial of ``extend``'s coordinate search fits on: the rows, the straight line's names,
    the kept rows and the NNLS."""

    rows: Sequence[Rows]
    shape: str
    names: list[str]
    kept: np.ndarray
    solve: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

    def knee_step(self, hidden: list[str], cur: dict[str, float], cands: Sequence[float]) -> tuple[float | None, dict[str, float], float]:
        """The best knee among ``cands`` at the current host costs, kept when it earns its parameter
        (else none): (knee, coefficients by name, SSR)."""
        n = len(self.kept)
        best: tuple[float, float, np.ndarray, list[str]] | None = None
        kn_names = _names_with(self.names, True, hidden)
        for kc in cands:
            ssr, c, _ = _fit_at(self.rows, self.shape, kn_names, kc, hidden, cur, self.kept, self.solve)
            if c[kn_names.index(KNEE_PARAM)] > 0 and (best is None or ssr < best[0]):
                best = (ssr, kc, c, kn_names)
        plain = _names_with(self.names, False, hidden)
        ssr_nk, c_nk, _ = _fit_at(self.rows, self.shape, plain, None, hidden, cur, self.kept, self.solve)
        if best is not None and _better(best[0], ssr_nk, n, 2):
            return best[1], {nm: float(v) for nm, v in zip(best[3], best[2], strict=True)}, best[0]
        return None, {nm: float(v) for nm, v in zip(plain, c_nk, strict=True)}, ssr_nk

    def host_step(self, knee: float | None, hidden: list[str], m: str,
                  cur: dict[str, float]) -> tuple[list[str], dict[str, float], float] | None:
        """Method ``m``'s host proposer overlapping the step, at ``knee``: searched on a grid of the steps'
        own cost per request (``search_host``) and kept when it earns its parameters; (hidden methods,
        coefficients by name, SSR), None when ``m`` has no steps."""
        n = len(self.kept)
        others = [h for h in hidden if h != m]
        without = _names_with(self.names, knee is not None, others)
        ssr_wo, c_wo, _ = _fit_at(self.rows, self.shape, without, knee, others, cur, self.kept, self.solve)
        trial = _names_with(self.names, knee is not None, [*others, m])
        st = expand(self.rows, self.shape, trial, knee, [*others, m])
        hidx = _host_index(trial, [*others, m])
        start = np.asarray([cur.get(nm, 0.0) for nm in trial])
        on = (st.method == len(others)) & (st.batch > 0)
        if not on.any():
            return None
        # the grid spans the steps' cost per request under the current law, the host included where it sets
        # the step: once ``m``'s host carries the large batches, the linear part alone no longer reaches its
        # cost (round two's grid then missed it, and the host was dropped for the in-series host[m]); and it
        # holds ``m``'s current host cost, so a round never loses the point it started from
        step = np.maximum(st.phi @ start, start[hidx[-1][0]] * st.batch + start[hidx[-1][1]])
        per_req = step[on] / st.batch[on]
        current = [start[hidx[-1][0]]] if start[hidx[-1][0]] > 0 else []
        grid = np.unique(np.concatenate([[0.0], current, np.quantile(per_req, [0.3, 0.6, 0.8, 0.9, 1.0]) * [1, 1, 1, 1, 1.2]]))
        ssr, th = search_host(st, start, hidx, len(others), self.kept, self.solve, grid)
        if th[hidx[-1][0]] > 0 and _better(ssr, ssr_wo, n, 2):
            return [*others, m], {nm: float(v) for nm, v in zip(trial, th, strict=True)}, ssr
        return others, {nm: float(v) for nm, v in zip(without, c_wo, strict=True)}, ssr_wo


def extend(rows: Sequence[Rows], shape: str, names: list[str], coef: np.ndarray,
           solve: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray], keep: np.ndarray) -> Extension | None:
    """The law with a knee and/or overlapping host proposers, when the kept rows ask for them (None: the
    straight line stays). ``solve``: the NNLS of ``lsq``; ``keep``: rows the straight line's robust pass
    kept. Two rounds of coordinate search: the knee at the current host costs, then each method's host
    cost at that knee (a host that sets the step at large batch otherwise passes for an early knee)."""
    methods = sorted({m for r in rows for t in r.tables if (m := method_kind(t.method)) and not is_model_method(m)})
    kept = np.flatnonzero(keep)
    n = len(kept)
    base = expand(rows, shape, names, None, [])
    X0 = base.sums(base.phi)
    ssr0 = float(((X0[kept] @ coef - base.y[kept]) ** 2).sum())
    search = _Search(rows=rows, shape=shape, names=names, kept=kept, solve=solve)
    knee: float | None = None
    hidden: list[str] = []
    cur = {nm: float(v) for nm, v in zip(names, coef, strict=True)}
    cur_ssr = ssr0
    cands = knee_candidates(rows, shape)
    for _ in range(2):
        knee, cur, cur_ssr = search.knee_step(hidden, cur, cands)
        for m in methods:
            step = search.host_step(knee, hidden, m, cur)
            if step is not None:
                hidden, cur, cur_ssr = step
    if knee is None and not hidden:
        return None
    final = _names_with(names, knee is not None, hidden)
    coef_f = np.asarray([cur.get(nm, 0.0) for nm in final])
    st = expand(rows, shape, final, knee, hidden)
    hidx = _host_index(final, hidden)
    notes = []
    if knee is not None:
        notes.append(en("predict.n.knee", knee=f"{knee:.0f}", us=f"{cur[KNEE_PARAM] * 1e6:.3g}", r0=f"{ssr0:.3g}", r1=f"{cur_ssr:.3g}", n=n))
    for m in hidden:
        notes.append(en("predict.n.host_par", method=m, us=f"{cur[f'host_par[{m}]'] * 1e6:.3g}", us0=f"{cur[f'host_par0[{m}]'] * 1e6:.3g}"))
    point = coef_f

    def refit(idx: np.ndarray) -> np.ndarray:
        if not hidden:
            X = st.sums(st.phi)
            return solve(X[idx], st.y[idx], np.ones(len(idx)))
        return fit_hidden(st, point, hidx, idx, solve)

    def predict(c: np.ndarray) -> np.ndarray:
        return predict_rows(st, c, hidx)[0]

    return Extension(names=final, coef=coef_f, knee=knee, hidden=hidden, notes=notes, refit=refit, predict=predict)

