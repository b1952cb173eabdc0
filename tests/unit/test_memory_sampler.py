"""The memory sampler against real executables on PATH: a tool that answers, one that exits
non-zero, one that hangs (killed with everything it started, never asked again, one warning), and
the fallback from ``amd-smi metric --json`` to ``amd-smi monitor`` to ``rocm-smi``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from specgauge.loadgen import memory as M

DATA = Path(__file__).resolve().parents[1] / "data" / "smi"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    p = bin_dir / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)


def _sample(s: M.MemorySampler, seconds: float) -> dict:
    async def go() -> dict:
        s.start()
        await asyncio.sleep(seconds)
        await s.stop()
        return s.summary()

    return asyncio.run(go())


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}:/usr/bin:/bin")  # sh, sleep, cat; no real GPU tool
    return d


def test_amd_smi_monitor_answers_when_metric_json_is_refused(bin_dir: Path) -> None:
    # a guest's amd-smi rejects `metric --usage`; the monitor table (a real MI300X capture) answers
    table = DATA / "amd-smi_monitor_mi300x_8gpu_rocm6.1.txt"
    _tool(bin_dir, "amd-smi", f'if [ "$1" = metric ]; then echo "amd-smi metric: error: unrecognized arguments: --usage" >&2; exit 2; fi\ncat {table}')
    summ = _sample(M.MemorySampler(0.05, timeout=2), 0.4)
    assert summ["tool"] == "amd-smi" and summ["command"].startswith("amd-smi monitor") and summ["samples"] >= 1
    assert len(summ["devices"]) == 8
    assert summ["devices"][4]["peak_used_mib"] == 284.0 and summ["devices"][4]["peak_power_w"] == 178.0
    assert summ["devices"][0]["mean_util_pct"] == 0.0 and "warning" not in summ
    assert any("exited 2" in e for e in summ["errors"])


def test_hanging_tool_is_killed_and_the_next_tool_answers(bin_dir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    _tool(bin_dir, "amd-smi", f"sleep 300 &\necho $! > {pidfile}\nwait")  # hangs, and leaves a child
    _tool(bin_dir, "rocm-smi", f"cat {DATA / 'rocm-smi_showmeminfo_vram_showuse_rx7900xt.json'}")
    s = M.MemorySampler(0.05, timeout=0.5)
    summ = _sample(s, 1.5)
    assert summ["tool"] == "rocm-smi" and summ["samples"] >= 1
    assert summ["devices"][0]["total_mib"] == 21458059264 / 2**20
    assert any("did not answer within 0.5 s" in e for e in summ["errors"])
    assert not _alive(int(pidfile.read_text()))  # the hung tool's whole process group was killed


def _alive(pid: int) -> bool:
    """Running (a killed orphan may linger as a zombie until init reaps it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_a_tool_that_only_hangs_gives_one_warning_and_no_memory(bin_dir: Path) -> None:
    _tool(bin_dir, "nvidia-smi", "sleep 300")
    s = M.MemorySampler(0.05, timeout=0.3)
    summ = _sample(s, 1.2)
    assert summ["tool"] == "nvidia-smi" and summ["samples"] == 0 and summ["devices"] == {}
    assert len(s.errors) == 1  # asked once, never again
    assert s.warning is not None and "did not answer within 0.3 s" in s.warning and "for this run" in s.warning


def test_a_tool_that_starts_failing_is_dropped_after_repeated_failures(bin_dir: Path, tmp_path: Path) -> None:
    flag = tmp_path / "ran"
    _tool(bin_dir, "nvidia-smi", f'if [ -e {flag} ]; then echo "GPU is lost" >&2; exit 9; fi\ntouch {flag}\necho "0, 100, 1000, 50.5, 10"')
    s = M.MemorySampler(0.02, timeout=2)
    summ = _sample(s, 0.8)
    assert summ["samples"] == 1 and summ["devices"][0]["peak_used_mib"] == 100.0 and summ["devices"][0]["peak_power_w"] == 50.5
    assert len(s.errors) == M.MAX_FAILURES and "exited 9: GPU is lost" in s.errors[0]
    assert s.warning is not None and "from then on" in s.warning


def test_output_without_memory_is_no_sample(bin_dir: Path) -> None:
    _tool(bin_dir, "rocm-smi", f"cat {DATA / 'rocm-smi_showmemuse_2x_rx6800.json'}")
    s = M.MemorySampler(0.05, timeout=2)
    summ = _sample(s, 0.3)
    assert summ["samples"] == 0 and summ["devices"] == {} and "no memory figures" in summ["reason"]
    assert s.warning is not None
