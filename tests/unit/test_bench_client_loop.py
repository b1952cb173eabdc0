"""bench watches its own event loop: a starved or blocked client times chunks late and must say so."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.loadgen.client_loop import STALL_WARNING_PREFIX
from specgauge.testing.fakeserver import FakeServer
from specgauge.records import ResultsFile


def workload(tmp: Path, n: int) -> Path:
    p = tmp / "w.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "tokens:6 per:1", "max_tokens": 32}) + "\n" for i in range(n)))
    return p


def cfg(srv: FakeServer, w: Path, out: Path, **kw) -> BenchConfig:
    return BenchConfig(base_url=srv.base_url, workload=[w], output_dir=out, progress=False, timeout=2.0, **kw)


def test_a_blocked_client_loop_is_measured_and_warned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench watches its own event loop: writing one record blocks it for 150 ms here (as a starved or
    blocked client would be), and run.json says by how much, with a warning."""
    w = workload(tmp_path, 4)
    orig = ResultsFile.append
    blocked = []

    def slow_append(self: ResultsFile, rec) -> None:  # noqa: ANN001
        orig(self, rec)
        if not blocked:
            blocked.append(rec.id)
            time.sleep(0.15)  # on the event loop's thread, between requests still streaming

    monkeypatch.setattr(ResultsFile, "append", slow_append)
    with FakeServer() as srv:
        res = run_bench(cfg(srv, w, tmp_path / "o", max_concurrency=2))
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    loop = run["sessions"][0]["client_loop"]
    assert loop["max_stall_ms"] >= 100 and loop["stalls"] >= 1 and loop["stalled_s"] >= 0.1
    warned = [x for x in run["warnings"] if x.startswith(STALL_WARNING_PREFIX)]
    assert len(warned) == 1, run["warnings"]
    if "stalled_waiting_for_cpu_s" in loop:  # Linux: a sleeping client is blocked, not waiting for a CPU
        assert loop["stalled_waiting_for_cpu_s"] < loop["stalled_s"] - 0.1, loop
        assert "waiting for a CPU while other processes ran, the rest blocked" in warned[0]
    assert res.summary["completed"] == 4

    monkeypatch.setattr(ResultsFile, "append", orig)
    with FakeServer() as srv:  # unblocked: no such warning (a 100 ms stall does not happen by itself here)
        run_bench(cfg(srv, w, tmp_path / "o2", max_concurrency=2))
    run = json.loads((tmp_path / "o2" / "run.json").read_text())
    assert "client_loop" in run["sessions"][0]
