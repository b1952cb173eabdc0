"""`specgauge demo --lang ko` end to end, as a newcomer runs it (smaller: 8 live requests, 4 per calibration run,
k = 1..2): the embedded server really starts for the calibration grid and the A/B, and every artefact
the demo promises is written — the calibrated profile, the predictions, and the prediction set beside
the measurement."""

from __future__ import annotations

import json

import pytest

from specgauge.models import available
from tests.integration._demo_run import NUM_PROMPTS, demo_ko

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not available(), reason="shipped tiny models missing")
def test_demo_writes_profile_replay_runs_verdict_and_report() -> None:
    out, r = demo_ko()  # in Korean: test_report_ko.py checks that report in a browser from the same run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    for name in ("profile.json", "simulate.json", "compare.json", "report.html", "predictions.json",
                 "prediction_check.json", "calibration/cost_profile.json"):
        assert (out / name).is_file(), name
    for run in ("bench-baseline", "bench-speculative"):
        recs = (out / run / "results.jsonl").read_text().splitlines()
        assert len(recs) == NUM_PROMPTS and all(json.loads(x)["ok"] for x in recs)
    spec_run = json.loads((out / "bench-speculative" / "summary.json").read_text())
    assert spec_run["spec_decode_draft_tokens"] > 0  # the candidate server really speculated
    cmp = json.loads((out / "compare.json").read_text())
    assert cmp["verdict"]["overall"]["verdict"] in ("GO", "NO-GO", "INCONCLUSIVE")
    sim = json.loads((out / "simulate.json").read_text())
    assert {"ngram", "suffix"} <= set(sim["methods"]) and any(m.startswith("draft_model") for m in sim["methods"])
    assert "eagle3:tiny-eagle3" in sim["methods"]  # the shipped EAGLE-3 head is a candidate too
    head = [x for x in sim["overall"]["summaries"] if x["method"] == "eagle3:tiny-eagle3"]
    assert head and all(x["teacher_forced_acceptance_rate"] is not None for x in head)  # its optimistic figure beside it
    prof = json.loads((out / "calibration" / "cost_profile.json").read_text())
    assert prof["params"] and prof["provenance"]  # a fitted law, with where it was measured
    preds = json.loads((out / "predictions.json").read_text())
    assert {p["label"] for p in preds} >= {"ngram-k1", "ngram-k2", "suffix-k1", "suffix-k2", "draft_model-k1", "draft_model-k2",
                                           "eagle3-k1", "eagle3-k2"}
    assert all(p["speedup"] is not None for p in preds if p["label"].startswith("eagle3"))  # calibrated: the law has its cost
    check = json.loads((out / "prediction_check.json").read_text())
    assert check["predicted"] is not None and check["measured"] is not None  # the prediction beside the measurement
    assert "예측 대 측정" in r.stdout  # the prediction beside the measurement, on the console too
    assert "(python 백엔드)" in r.stdout or "(native 백엔드)" in r.stdout  # which suffix backend ran
    html = (out / "report.html").read_text()
    assert "plotly-graph-div" in html and "<script src=\"http" not in html
    assert str(out / "report.html") in r.stdout.replace("\n", "")
