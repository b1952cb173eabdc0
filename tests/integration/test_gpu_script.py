"""``benchmarks/gpu/run.py`` end to end on the CPU with tiny shapes: what it does on a GPU, small.

Random-weight target and draft directories, the workload answered by the target in-process, calibrate
(planned for concurrency 1-2, n-gram and the draft model, synthetic-acceptance points on the embedded
engine), a sweep at concurrency 1 and 2 against ``specgauge serve`` started per config from a command
template, and one JSON with predicted beside measured per cell and the crossovers. Asserts the file's
content, not the figures (tiny models on a shared 2-core host: the GPU run is where they mean something).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "run.py"


def test_gpu_script_runs_on_the_cpu_with_tiny_shapes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "gpu"
    r = subprocess.run([sys.executable, str(SCRIPT), "--shape", "tiny", "--device", "cpu", "--dtype", "float32",
                        "--concurrency", "1,2", "--k", "2", "--cal-k", "ngram=2,draft_model=2", "--predict-k", "2",
                        "--max-tokens", "8", "--num-prompts", "4", "--min-prompts", "2", "--cal-prompts", "2",
                        "--synthetic-acceptance", "1.5", "--synthetic-forward", "4", "--bootstrap", "10", "--out", str(out)],
                       capture_output=True, text=True, timeout=1200)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "gpu_run.json").read_text())
    assert res["device_name"] == "cpu" and res["shape"] == "tiny"
    # the models are random weights made from a config (nothing written but the config and the tokenizer)
    for role in ("target", "draft"):
        d = out / "models" / role
        assert (d / "config.json").is_file() and not list(d.glob("*.safetensors"))
    # calibrate ran synthetic points on the embedded engine, and the fit read their steps from its counters
    runs = res["measured_range"]["methods"]
    assert set(runs) == {"ngram", "draft_model"} and max(runs["ngram"]) > 2, runs
    synth = [r for r in res["calibration_runs"] if (r["speculative_config"] or {}).get("rejection_sample_method") == "synthetic"]
    assert {r["label"].split("-")[0] for r in synth} == {"ngram", "draft_model"}, res["calibration_runs"]
    cells = res["cells"]
    assert {(c["label"], c["concurrency"]) for c in cells} == {(lb, c) for lb in ("ngram-k2", "draft_model-k2") for c in (1, 2)}
    for c in cells:
        assert c["predicted"] is not None and c["measured"] is not None and c["measured_low"] is not None, c
    assert set(res["crossovers"]) == {"ngram-k2", "draft_model-k2"}
    for x in res["crossovers"].values():
        assert {"predicted", "measured"} <= set(x) and x["measured"]["status"] != "no_data"
    assert res["timings"]["total_s"] > 0
