"""`specgauge bench` end to end through the CLI against the scripted loopback server
(a real HTTP server; the scripted faults are what a real server cannot be made to do on demand)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specgauge.testing.fakeserver import FakeServer


def test_bench_cli_sweeps_concurrency_and_reports_failures(tmp_path: Path) -> None:
    w = tmp_path / "w.txt"
    w.write_text("tokens:12 per:3\ntokens:20 per:2\nfault:http500\n")
    with FakeServer() as srv:
        r = subprocess.run(
            [sys.executable, "-m", "specgauge", "bench", "--base-url", srv.base_url, "-w", str(w), "-o", str(tmp_path / "out"),
             "--max-concurrency", "1,2", "--api-key", "sk-secret-123"],
            capture_output=True, text=True, timeout=120,
        )
    assert r.returncode == 1, r.stderr  # the run completed but had a failed request
    assert "Traceback" not in r.stderr
    for c in ("c1", "c2"):
        d = tmp_path / "out" / c
        recs = [json.loads(x) for x in (d / "results.jsonl").read_text().splitlines()]
        assert len(recs) == 3 and sum(not x["ok"] for x in recs) == 1
        summary = json.loads((d / "summary.json").read_text())
        assert summary["completed"] == 2 and summary["failed"] == 1 and summary["max_concurrency"] == int(c[1:])
        for f in d.iterdir():
            assert "sk-secret-123" not in f.read_text(), f
    assert r.stdout.count("Serving Benchmark Result") == 2 and "Acceptance rate" in r.stdout


def test_bench_cli_unreachable_server_is_one_line(tmp_path: Path) -> None:
    w = tmp_path / "w.txt"
    w.write_text("hello\n")
    r = subprocess.run(
        [sys.executable, "-m", "specgauge", "bench", "--base-url", "http://127.0.0.1:9", "-w", str(w), "-o", str(tmp_path / "o"),
         "--timeout", "5"],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "127.0.0.1:9" in r.stderr and "is the server up?" in r.stderr
