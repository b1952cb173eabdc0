"""What vLLM decides for itself, side by side: one method at each fixed k, the
``num_speculative_tokens_per_batch_size`` schedule recommend builds from those, and — for DSpark —
adaptive verification's upper bound, each predicted on the same workload from the same replay and the same law.

The schedule's cells are simulated with k chosen per step from the requests the step schedules (as vLLM
keys it), every request's drafts taken at its position from one table of proposals
(``offline.traces.PositionTrace``), so a schedule is not read off its fixed-k cells: where the batch
ramps up and drains, its steps draft at the other bands' k. Adaptive verification (DSpark's
``enable_adaptive_verification``: the server verifies fewer drafts where its confidence head is unsure)
needs the drafter's own replay of that cut (``predict.replay.WorkloadReplay._adaptive_positions``); a
method without one gets a row saying why instead of a figure.

Boundary: recommend's builder on predictions (``predict.predict_cells``); nothing here measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specgauge.config import SCHEDULE_KEY, ConfigError
from specgauge.i18n import en
from specgauge.predict import CellSpec, StepCostProfile, predict_cells
from specgauge.predict.replay import ADAPTIVE_KEY, WorkloadReplay
from specgauge.predict.types import CellPrediction, ProfileError
from specgauge.recommend.build import RecommendSettings, family_key, recommend
from specgauge.recommend.sources import options_from_predictions

#: methods whose server can verify fewer drafts than it proposed, per request (vLLM: DSpark only)
ADAPTIVE_METHODS = ("dspark",)


class VariantRow(BaseModel):
    """One way of choosing k, at one concurrency."""

    variant: Literal["fixed", "schedule", "adaptive"]
    label: str
    concurrency: int
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    tokens_per_forward: float | None = None
    unidentified: list[str] = Field(default_factory=list)
    reason: str | None = None  #: why there is no figure


class KComparison(BaseModel):
    """One method: fixed k against the recommended schedule (and adaptive verification where it exists)."""

    method: str
    schedule: list[list[int]] | None = None  #: the recommended schedule (None: one k for every band, or off)
    headline: str = ""  #: recommend's, from the fixed-k predictions
    rows: list[VariantRow] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _row(variant: Literal["fixed", "schedule", "adaptive"], p: CellPrediction) -> VariantRow:
    return VariantRow(variant=variant, label=p.label, concurrency=p.concurrency, speedup=p.speedup, speedup_low=p.speedup_low,
                      speedup_high=p.speedup_high, tokens_per_forward=p.tokens_per_forward, unidentified=list(p.unidentified))


def compare_k(profile: StepCostProfile, workload: Sequence[Path], configs: Sequence[dict[str, Any]], concurrencies: Sequence[int],
              *, tokenizer: Any = None, num_prompts: int | None = None, settings: RecommendSettings | None = None,
              replay: WorkloadReplay | None = None, fixed: Sequence[CellPrediction] | None = None,
              reused_server: bool = False) -> KComparison:
    """``configs``: one method at several k (``sweep.grid.expand_grid``'s configs of one family);
    ``fixed``: their predictions at ``concurrencies`` when the caller has them (else made here)."""
    from specgauge.sweep.grid import config_label

    if not configs:
        raise ProfileError("compare_k: no configuration given")
    fams = {family_key(c) for c in configs}
    if len(fams) != 1:
        raise ProfileError("compare_k: give one method at several k (one family)")
    replay = replay or WorkloadReplay(workload, tokenizer, num_prompts)
    concs = sorted({int(c) for c in concurrencies})
    by_label = {config_label(c): c for c in configs}
    cells = [CellSpec(label=lb, speculative_config=sp, concurrency=c) for lb, sp in by_label.items() for c in concs]
    if fixed is None:
        fixed = predict_cells(profile, workload, cells, tokenizer=tokenizer, num_prompts=num_prompts, replay=replay, reused_server=reused_server)
    else:
        fixed = [p for p in fixed if p.label in by_label and p.concurrency in concs]
    opts, notes = options_from_predictions(fixed)
    for o in opts:
        o.speculative_config = by_label.get(o.label)
    s = settings or RecommendSettings()
    rec = recommend(opts, concs, source="prediction", source_name="cost_profile.json", notes=notes, settings=s)
    method = str(configs[0].get("method") or "draft_model")
    out = KComparison(method=method, headline=rec.headline, rows=[_row("fixed", p) for p in fixed], notes=list(rec.notes))
    spec = rec.speculative_config
    if spec is not None and spec.get(SCHEDULE_KEY):
        out.schedule = spec[SCHEDULE_KEY]
        label = config_label(spec)
        sched = predict_cells(profile, workload, [CellSpec(label=label, speculative_config=spec, concurrency=c) for c in concs],
                              tokenizer=tokenizer, num_prompts=num_prompts, replay=replay, reused_server=reused_server)
        out.rows += [_row("schedule", p) for p in sched]
    else:
        out.rows += [VariantRow(variant="schedule", label="-", concurrency=c, reason=en("variants.r.no_schedule")) for c in concs]
    if method in ADAPTIVE_METHODS:
        kmax = max(int(c.get("num_speculative_tokens") or 0) for c in configs)
        spec_a = {**max(configs, key=lambda c: int(c.get("num_speculative_tokens") or 0)), "num_speculative_tokens": kmax,
                  ADAPTIVE_KEY: "oracle"}
        label = f"{config_label(spec_a)}-adaptive-oracle"
        try:
            ad = predict_cells(profile, workload, [CellSpec(label=label, speculative_config=spec_a, concurrency=c) for c in concs],
                               tokenizer=tokenizer, num_prompts=num_prompts, replay=replay, reused_server=reused_server)
            out.rows += [_row("adaptive", p) for p in ad]
            out.notes.append(en("variants.n.oracle", label=label))
        except (ProfileError, ConfigError) as e:  # a config the planner cannot replay, or one vLLM would refuse
            out.rows += [VariantRow(variant="adaptive", label=label, concurrency=c, reason=str(e)) for c in concs]
    return out
