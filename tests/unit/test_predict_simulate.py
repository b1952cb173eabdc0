"""``simulate --cost-profile``: a fitted profile routes the predicted speedup through the calibrated law;
an old cost-model file keeps the uncalibrated fallback, labelled so."""

from __future__ import annotations

import json
from pathlib import Path

from specgauge.api import resolve_tokenizer
from specgauge.predict import StepCostProfile
from specgauge.predict.profile import MeasuredRange
from specgauge.simulate.run import SimulateConfig, simulate
from specgauge.workload.samples import sample_logged_path


def test_fitted_profile_gives_calibrated_predictions_with_a_band(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text("\n".join(sample_logged_path().read_text(encoding="utf-8").splitlines()[:6]) + "\n", encoding="utf-8")
    prof = StepCostProfile(params={"a": 0.004, "r": 0.001, "b": 0.0005, "c": 0.0, "p": 1e-5, "q": 0.001,
                                   "host[ngram]": 0.0002, "ell": 0.002},
                           param_names=["a", "r", "b", "c", "p", "q", "host[ngram]", "ell"],
                           bootstrap=[[0.004 * f, 0.001, 0.0005, 0.0, 1e-5, 0.001, 0.0002, 0.002] for f in (0.9, 1.0, 1.1)],
                           measured=MeasuredRange(max_tokens_per_forward=100, max_batch=8))
    path = prof.save(tmp_path / "cost_profile.json")
    tok = resolve_tokenizer(None)
    res = simulate(SimulateConfig(workload=[w], methods=["ngram"], ks=[2, 4], batch_sizes=[1, 4], cost_profile=path), tok)
    preds = res.overall.predictions
    assert len(preds) == 4 and all(p.source == "calibrated step-cost law" for p in preds)
    assert all(p.low is not None and p.high is not None and p.low <= p.predicted_speedup <= p.high for p in preds)  # type: ignore[operator]
    assert any("calibrated step-cost law" in n for n in res.notes)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"default": {"saturation_tokens": 64}}))
    res2 = simulate(SimulateConfig(workload=[w], methods=["ngram"], ks=[2], batch_sizes=[1], cost_profile=old), tok)
    assert res2.overall.predictions[0].source == "uncalibrated cost model"
    assert any("UNCALIBRATED" in n for n in res2.notes)
