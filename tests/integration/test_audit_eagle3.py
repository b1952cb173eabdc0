"""``specgauge audit --embedded`` with an EAGLE-3 config: two real embedded engines, the candidate drafting
with the shipped EAGLE-3 head (a hidden-state drafter verified by the same rejection sampler), sampled
at temperature 0.8 and greedy in mixed batches. The engine is lossless, so the audit PASSES; the evidence
names the head by its directory name only (no machine path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.models import available, eagle3_dir, heads_available, target_dir

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (available() and heads_available()), reason="shipped heads missing")]

# 2 prompts x 3 positions, 200 samples per side: each test detects a TV distance of 0.3 with 80 % power
# at a family-wise alpha of 0.001; --greedy-tolerance 1 for the tiny target's exact logit tie (see
# test_audit_embedded.py)
ARGS = ["--num-prompts", "2", "--samples", "200", "--positions", "3", "--greedy-rounds", "1", "--alpha", "0.001",
        "--detect-tv", "0.3", "--greedy-tolerance", "1"]


def test_eagle3_candidate_passes_the_audit(tmp_path: Path) -> None:
    spec = {"method": "eagle3", "model": str(eagle3_dir()), "num_speculative_tokens": 3}
    out = tmp_path / "audit"
    r = CliRunner().invoke(app, ["audit", "--embedded", "--speculative-config", json.dumps(spec), "-o", str(out), *ARGS])
    assert r.exit_code == 0, r.output
    text = (out / "audit.json").read_text()
    res = json.loads(text)
    assert res["verdict"] == "PASS" and len(res["tests"]) == 6
    assert res["samples"] == {"reference": [200] * 2, "candidate": [200] * 2}
    assert res["greedy"]["mismatches"] <= 1 and res["greedy"]["control_mismatches"] == 0
    assert res["settings"]["speculative_config"] == {**spec, "model": eagle3_dir().name}
    assert str(tmp_path) not in text and str(eagle3_dir()) not in text and str(target_dir()) not in text
