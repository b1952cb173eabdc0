"""A bench run (against the loopback fake server, real HTTP) with real telemetry executables on PATH:
a hanging ``amd-smi`` is stopped, warned about once, and the run completes with memory from the next
tool (``rocm-smi``, a real RX 7900 XT capture); the console summary shows the memory block in both
languages, the same numbers in each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.testing.fakeserver import FakeServer
from specgauge.report.bench_console import format_summary

DATA = Path(__file__).resolve().parents[1] / "data" / "smi"


def _tool(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)


def test_hanging_amd_smi_bench_goes_on_with_rocm_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "amd-smi", "exec sleep 300")
    _tool(bin_dir, "rocm-smi", f"cat {DATA / 'rocm-smi_showmeminfo_vram_showuse_rx7900xt.json'}")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "tokens:40 per:4 delay_ms:150", "max_tokens": 40}) + "\n" for i in range(4)))
    with FakeServer() as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", progress=False,
                                    timeout=10.0, max_concurrency=2, memory_interval=0.1, memory_tool_timeout=0.4))
    s = res.summary
    assert res.exit_code == 0 and s["completed"] == 4
    dev = s["specgauge"]["memory"]["device"]
    assert dev["tool"] == "rocm-smi" and dev["samples"] >= 1
    assert dev["devices"]["0"]["peak_used_mib"] == pytest.approx(27856896 / 2**20)  # summary.json: JSON object keys are strings
    assert any("did not answer within 0.4 s" in e for e in dev["errors"])  # tried amd-smi metric, then monitor
    assert not any("device memory not measured" in w for w in s["specgauge"]["warnings"])  # rocm-smi answered
    kv = s["specgauge"]["memory"]["kv_cache"]
    assert "kv_cache_usage" in kv  # the fake server's vLLM gauge, read after the run
    en_text, ko_text = format_summary(s, "en"), format_summary(s, "ko")
    assert "Device 0 peak used (MiB):" in en_text and "27 of 20464" in en_text
    assert "장치 0 최대 사용량 (MiB):" in ko_text and "20464 중 27" in ko_text
    assert "Memory" not in ko_text and "메모리" in ko_text


def test_only_a_hanging_tool_warns_once_and_the_run_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "nvidia-smi", "exec sleep 300")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "tokens:20 per:2 delay_ms:100"}) + "\n" for i in range(3)))
    with FakeServer() as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", progress=False,
                                    timeout=10.0, memory_interval=0.1, memory_tool_timeout=0.3))
    s = res.summary
    assert res.exit_code == 0 and s["completed"] == 3
    warns = [x for x in s["specgauge"]["warnings"] if "device memory not measured" in x]
    assert len(warns) == 1 and "nvidia-smi" in warns[0] and "did not answer within 0.3 s" in warns[0]
    assert s["specgauge"]["memory"]["device"]["devices"] == {}
