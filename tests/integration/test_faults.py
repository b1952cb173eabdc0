"""Fault injection on loopback: the run completes, every request is classified, nothing finished is
lost (also across a killed process and --resume), and the exit status says there were failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from specgauge.bench import BenchConfig, run_bench
from specgauge.testing.fakeserver import FakeServer
from specgauge.records import ResultsFile

FAULTS = {
    "fault:http429": "http_status", "fault:http500": "http_status", "fault:drop tokens:10": "connection_reset",
    "fault:cut": "stream_cut_short", "fault:nousage": "stream_cut_short", "fault:malformed": "malformed_sse",
    "fault:badjson": "invalid_json", "fault:error": "error_payload", "fault:stall tokens:6": "timeout",
    "fault:endless": "timeout",
}


def write_workload(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": p, "max_tokens": 64}) + "\n" for i, p in enumerate(prompts)))
    return path


def test_mixed_faults_all_classified_nothing_lost(tmp_path: Path) -> None:
    prompts = []
    for f in FAULTS:
        prompts += [f, "tokens:6 per:2"]  # a good request after every fault
    w = write_workload(tmp_path / "w.jsonl", prompts)
    with FakeServer() as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", timeout=1.0,
                                    max_concurrency=4, request_rate=50.0, seed=1, progress=False))
    recs = {r.id: r for r in ResultsFile(tmp_path / "o" / "results.jsonl").existing()}
    assert len(recs) == len(prompts)
    for i, p in enumerate(prompts):
        r = recs[f"q{i}"]
        if p in FAULTS:
            assert not r.ok and r.failure is not None and r.failure.value == FAULTS[p], (p, r.failure, r.error)
        else:
            assert r.ok and r.output_tokens == 6, (p, r.error)
    s = res.summary
    assert res.exit_code == 1
    assert s["failed"] == len(FAULTS) and s["completed"] == len(FAULTS)
    expected: dict[str, int] = {}
    for v in FAULTS.values():
        expected[v] = expected.get(v, 0) + 1
    assert s["specgauge"]["latency"]["failures"] == expected
    assert s["specgauge"]["latency"]["failure_rate"] == 0.5


BENCH = """
import sys
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)  # a child of a background job starts with SIGINT ignored
from specgauge.bench import BenchConfig, run_bench
r = run_bench(BenchConfig(base_url=sys.argv[1], workload=[sys.argv[2]], output_dir=sys.argv[3], max_concurrency=2,
              progress=False, resume=sys.argv[4] == "1"))
sys.exit(r.exit_code)
"""


def test_killed_run_resumes_without_losing_or_repeating(tmp_path: Path) -> None:
    n = 16
    w = write_workload(tmp_path / "w.jsonl", ["tokens:5 per:1 delay_ms:40"] * n)  # ~0.2 s each, 2 at a time
    out = tmp_path / "o"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with FakeServer() as srv:
        p = subprocess.Popen([sys.executable, "-c", BENCH, srv.base_url, str(w), str(out), "0"], env=env)
        deadline = time.monotonic() + 30
        results = out / "results.jsonl"
        while time.monotonic() < deadline:
            if results.exists() and results.read_text().count("\n") >= 4:
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        first = ResultsFile(results).existing()
        assert 4 <= len(first) < n, len(first)
        sent_before = srv.requests
        p2 = subprocess.run([sys.executable, "-c", BENCH, srv.base_url, str(w), str(out), "1"], env=env, timeout=60)
        assert p2.returncode == 0
        resent = srv.requests - sent_before
    recs = ResultsFile(results).existing()
    ids = [r.id for r in recs]
    assert sorted(ids) == sorted(f"q{i}" for i in range(n)) and len(set(ids)) == n
    assert resent == n - len(first)  # only what was not finished, in-flight ones included
    assert all(r.ok for r in recs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == n


BENCH_CATCH = """
import sys
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)  # a child of a background job starts with SIGINT ignored
from specgauge.bench import BenchConfig, run_bench
from specgauge.errors import UserError
try:
    r = run_bench(BenchConfig(base_url=sys.argv[1], workload=[sys.argv[2]], output_dir=sys.argv[3], max_concurrency=2,
                  progress=False))
except UserError as e:
    print("ERR", e)
    sys.exit(2)
sys.exit(r.exit_code)
"""


def test_sigint_leaves_a_resumable_run_and_a_clear_message(tmp_path: Path) -> None:
    w = write_workload(tmp_path / "w.jsonl", ["tokens:5 per:1 delay_ms:40"] * 12)
    out = tmp_path / "o"
    with FakeServer() as srv:
        p = subprocess.Popen([sys.executable, "-c", BENCH_CATCH, srv.base_url, str(w), str(out)], stdout=subprocess.PIPE, text=True)
        results = out / "results.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        stdout, _ = p.communicate(timeout=20)
    assert p.returncode == 2 and "--resume" in stdout
    assert json.loads((out / "run.json").read_text())["sessions"][0]["interrupted"] is True
    assert len(ResultsFile(results).existing()) >= 2


def test_counters_after_an_interrupted_session_are_not_claimed_to_cover_the_run(tmp_path: Path) -> None:
    w = write_workload(tmp_path / "w.jsonl", ["tokens:5 per:1 delay_ms:40"] * 10)
    out = tmp_path / "o"
    with FakeServer() as srv:
        p = subprocess.Popen([sys.executable, "-c", BENCH, srv.base_url, str(w), str(out), "0"])
        results = out / "results.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 3):
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        p.wait(20)
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=out, max_concurrency=2, progress=False, resume=True))
    acc = res.summary["specgauge"]["acceptance"]
    assert res.summary["completed"] == 10
    assert not acc["counters"]["available"] and "interrupted" in acc["counters"]["reason"]
    assert acc["per_request_total"]["available"]  # the per-request counts still cover every request
