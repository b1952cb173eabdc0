"""Calibrated predictions for ``specgauge simulate --cost-profile FILE`` (a fitted profile): one cell per
replayed method × k × batch size, for all requests and per segment, as simulate's prediction rows.

The planner's requests and traces come from simulate's own pass (``replays_from_traces``): the workload
is read, tokenised and replayed once, and each segment's prediction uses the same traces as its table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specgauge.drafters.base import ReplayTrace
from specgauge.offline.replay import ReplayedRequest
from specgauge.predict.predict import predict_cells
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.replay import WorkloadReplay
from specgauge.predict.types import CellPrediction, CellSpec

#: (label, kind, options for one k) of one of simulate's methods
Method = tuple[str, str, Callable[[int], dict[str, Any]]]


def method_config(kind: str, drafter_options: dict[str, Any]) -> dict[str, Any]:
    """vLLM's --speculative-config for one of simulate's methods at one k (its resolved drafter options)."""
    if kind == "draft_model":
        return {"model": drafter_options["model"], "num_speculative_tokens": drafter_options["num_speculative_tokens"]}
    return {"method": kind, **drafter_options}


def replays_from_traces(requests: Sequence[ReplayedRequest], traces: Mapping[tuple[str, int], Sequence[ReplayTrace]],
                        skipped: Mapping[str, int], methods: Sequence[Method], segments: Sequence[str],
                        where: str) -> dict[str, WorkloadReplay]:
    """Segment ("" = all) -> a planner over the requests replayed already, its configs' traces seeded
    from ``traces[(label, k)]`` (one per request, in order); ``skipped[segment]``: requests left out."""
    out: dict[str, WorkloadReplay] = {}
    for seg in ["", *segments]:
        idx = [i for i, r in enumerate(requests) if not seg or r.segment == seg]
        rp = WorkloadReplay.from_replayed([requests[i] for i in idx], skipped.get(seg, 0), where)
        for (label, k), trs in traces.items():
            kind, options_for_k = next((kd, f) for lb, kd, f in methods if lb == label)
            rp.seed(method_config(kind, options_for_k(k)), [trs[i] for i in idx])
        out[seg] = rp
    return out


def predict_grid(profile: StepCostProfile, replays: Mapping[str, WorkloadReplay], methods: Sequence[Method],
                 ks: Sequence[int], batch_sizes: Sequence[int]) -> dict[str, dict[tuple[str, int, int], CellPrediction]]:
    """Segment -> (label, k, batch) -> prediction, each segment through its planner in ``replays``."""
    cells: list[CellSpec] = []
    keys: list[tuple[str, int, int]] = []
    for label, kind, options_for_k in methods:
        for k in ks:
            spec = method_config(kind, options_for_k(k))
            for b in batch_sizes:
                cells.append(CellSpec(label=f"{label}-k{k}", speculative_config=spec, concurrency=b))
                keys.append((label, k, b))
    return {seg: dict(zip(keys, predict_cells(profile, [], cells, replay=rp), strict=True)) for seg, rp in replays.items()}
