"""Device memory: each tool's output parsed; an absent tool is reported absent, never as zero."""

from __future__ import annotations

import asyncio
import json

import pytest

from specgauge.loadgen import memory as M


def test_nvidia_smi() -> None:
    rows = M.parse_nvidia_smi("0, 1234, 81920\n1, 10, 81920\n")
    assert rows == [{"device": 0.0, "used_mib": 1234.0, "total_mib": 81920.0}, {"device": 1.0, "used_mib": 10.0, "total_mib": 81920.0}]


def test_rocm_smi_bytes_to_mib() -> None:
    out = json.dumps({"card0": {"VRAM Total Memory (B)": str(64 * 2**30), "VRAM Total Used Memory (B)": str(2**30)}})
    assert M.parse_rocm_smi(out) == [{"device": 0.0, "used_mib": 1024.0, "total_mib": 65536.0}]


def test_amd_smi_units() -> None:
    out = json.dumps([{"gpu": 0, "mem_usage": {"used_vram": {"value": 512, "unit": "MB"}, "total_vram": {"value": 192, "unit": "GB"}}}])
    assert M.parse_amd_smi(out) == [{"device": 0.0, "used_mib": 512.0, "total_mib": 192.0 * 1024}]


def test_absent_tool_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(M.shutil, "which", lambda name: None)

    async def go() -> dict:
        s = M.MemorySampler(0.01)
        s.start()
        await asyncio.sleep(0.03)
        await s.stop()
        return s.summary()

    summ = asyncio.run(go())
    assert summ["tool"] is None and "not measured" in summ["reason"] and "devices" not in summ


def test_peak_and_last_per_device() -> None:
    s = M.MemorySampler(tool="nvidia-smi")
    s.samples = [M.parse_nvidia_smi("0, 100, 1000"), M.parse_nvidia_smi("0, 300, 1000"), M.parse_nvidia_smi("0, 200, 1000")]
    d = s.summary()["devices"][0]
    assert d == {"peak_used_mib": 300.0, "total_mib": 1000.0, "last_used_mib": 200.0, "min_free_mib": 700.0}


def test_samples_a_tool_found_on_path(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '0, 1500, 81920'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))

    async def go() -> dict:
        s = M.MemorySampler(0.01)
        s.start()
        await asyncio.sleep(0.3)
        await s.stop()
        return s.summary()

    summ = asyncio.run(go())
    assert summ["tool"] == "nvidia-smi" and summ["samples"] >= 1
    assert summ["devices"][0]["peak_used_mib"] == 1500.0 and summ["devices"][0]["min_free_mib"] == 81920.0 - 1500.0


def test_failing_tool_is_reported_not_zero(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "rocm-smi"
    tool.write_text("#!/bin/sh\necho 'no GPU' >&2\nexit 3\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))

    async def go() -> dict:
        s = M.MemorySampler(0.01)
        s.start()
        await asyncio.sleep(0.2)
        await s.stop()
        return s.summary()

    summ = asyncio.run(go())
    assert summ["tool"] == "rocm-smi" and summ["samples"] == 0 and "exited 3" in summ["reason"] and summ["devices"] == {}
