"""`specgauge sweep --cost-profile` sets predicted beside measured for every cell, on servers whose
step-cost law is KNOWN (``specgauge.testing.scripted_server``: real HTTP, continuous batching, the
workload's logged outputs, real drafters, each step sleeping the law's time).

A profile is calibrated on off + n-gram k=4 at concurrency 1 and 4 — on a virtual clock
(``testing.virtual_bench`` + ``calibrate --from-runs``: runs synthesised from the same law, so the profile
is the law to rounding and its prediction for n-gram k=2 at concurrency 2 equals that cell's virtual
measurement); the sweep then runs through the CLI over real HTTP with ``--url`` on that config and
concurrency, which the profile never saw, and every speculative cell carries its prediction, the error
against the measured speedup and whether the prediction lies inside the measured CI — asserted for what
they are, not for how close a measurement on real sleeps came (``benchmarks/calibrate_scripted.py``
prints that). Then ``specgauge recommend --cost-profile`` recommends from replay + that profile, with
prediction bands in place of CIs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_live, run_calibration
from specgauge.predict import CellSpec
from specgauge.testing.scripted_server import ScriptedServer
from specgauge.sweep.grid import grid_method
from specgauge.sweep.models import SweepManifest
from specgauge.testing.virtual_bench import law_servers
from tests.integration._workloads import cut_logged_sample

pytestmark = pytest.mark.slow

LAW = {"a": 0.010, "r": 0.0012, "b": 0.0006, "c": 4e-7, "p": 4e-6, "q": 0.0015, "host[ngram]": 0.0008}
MAX_TOKENS = 24
N = 12


def _workload(tmp: Path) -> Path:
    """The first logged sample requests, outputs cut to 24 tokens (max_tokens says so too)."""
    return cut_logged_sample(tmp / "logged.jsonl", N, MAX_TOKENS)


def test_sweep_sets_predicted_beside_measured(tmp_path: Path) -> None:
    w = _workload(tmp_path)
    ng2 = grid_method("ngram", 2)
    cfg = CalibrateConfig(workload=[w], out_dir=tmp_path / "cal", methods=["ngram"], concurrencies=[1, 4], num_prompts=N,
                          bootstrap=50, warmup=0)
    dirs = law_servers(w, LAW).grid(tmp_path / "cal" / "runs", plan_live(cfg, False))
    cal = run_calibration(cfg.model_copy(update={"from_runs": list(dirs.values())}))
    off2, ng2_cell = CellSpec(label="off", speculative_config=None, concurrency=2), CellSpec(label="ngram-k2", speculative_config=ng2, concurrency=2)
    virt = law_servers(w, LAW).grid(tmp_path / "virtual", [(off2, N), (ng2_cell, N)])
    virtual_measured, _, _ = measure_cell(virt[("off", 2)], virt[("ngram-k2", 2)])
    profile = cal.profile_path
    with ExitStack() as stack:
        off = stack.enter_context(ScriptedServer([w], LAW, "flattened", None)).base_url
        on = stack.enter_context(ScriptedServer([w], LAW, "flattened", ng2)).base_url
        r = subprocess.run([sys.executable, "-m", "specgauge", "sweep", str(w), "--url", f"off={off}", "--url", f"ngram-k2={on}",
                            "--concurrency", "2", "--num-prompts", str(N), "--num-warmups", "0", "--cost-profile", str(profile),
                            "-o", str(tmp_path / "sweep")], capture_output=True, text=True, check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "predicted" in r.stdout and "error" in r.stdout
    m = SweepManifest.load(tmp_path / "sweep")
    a = m.analysis
    assert a is not None and a.prediction.available and a.prediction.profile == profile.name
    cell = a.cell("ngram-k2", 2)
    assert cell is not None and cell.speculative_config == ng2
    assert cell.predicted is not None and cell.predicted.label == "ngram-k2" and cell.predicted.concurrency == 2
    assert cell.speedup is not None and cell.speedup.estimate is not None
    assert cell.prediction_error == pytest.approx(cell.predicted.speedup / cell.speedup.estimate - 1)  # type: ignore[operator]
    print(f"ngram-k2 @ 2: predicted {cell.predicted.speedup:.3f}, measured {cell.speedup.estimate:.3f} [{cell.speedup.low:.3f}, {cell.speedup.high:.3f}]")
    # the prediction the sweep set is the law's: the virtual clock's measurement of the same cell (exact)
    assert cell.predicted.speedup == pytest.approx(virtual_measured, rel=1e-6), (cell.predicted.speedup, virtual_measured)
    assert cell.prediction_in_ci is not None and cell.speedup.low is not None and cell.speedup.high is not None
    assert cell.prediction_in_ci == (cell.speedup.low <= cell.predicted.speedup <= cell.speedup.high)
    html = (tmp_path / "sweep" / "report.html").read_text()
    assert "(predicted)" in html and "predicted [band]" in html

    # recommend from replay + the same profile (no server): predicted speedups with their bands
    rec = subprocess.run([sys.executable, "-m", "specgauge", "recommend", str(w), "--cost-profile", str(profile), "--method", "ngram",
                          "--k", "2,4", "--concurrency", "1,4", "--num-prompts", str(N), "--json"],
                         capture_output=True, text=True, check=False, timeout=600)
    assert rec.returncode == 0, rec.stderr[-3000:]
    data = json.loads(rec.stdout)
    assert data["source"] == "prediction" and data["source_name"] == profile.name
    assert [b["concurrency"] for b in data["bands"]] == [1, 4]
    for b in data["bands"]:
        shown = b["option"] or b["best"]
        assert shown["source"] == "predicted" and shown["label"] in ("ngram-k2", "ngram-k4")
        assert shown["low"] is not None and shown["low"] <= shown["estimate"] <= shown["high"]
    assert data["verdict"] in ("speculate", "off")
