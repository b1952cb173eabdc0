"""The first hour with one's own server (issue 40), against the real embedded server (``specgauge serve`` in a
child process, real HTTP) and through the real entry point (``python -m specgauge bench``): a speculative
server started without per-request metrics, as vLLM runs by default (item 4), and capping output length
(item 6). Short: a handful of requests of at most 12 tokens."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specgauge.models import available, target_dir
from specgauge.servers import ManagedServer, embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="shipped tiny models missing")]

ROOT = Path(__file__).parents[2]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
PROMPTS = ["the cat sat on the mat. the cat sat on the mat. the cat", "one two three four one two three four one two",
           "red green blue red green blue red", "def f(x):\n    return x\n\ndef f(x):\n   "]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgauge", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedServer]:
    """ngram speculation, no --per-request-spec-decode-metrics: only the aggregate /metrics counters."""
    root = tmp_path_factory.mktemp("srv")
    with embedded_server(target_dir(), root / "server.log", NGRAM, max_batch=2, per_request_metrics=None) as srv:
        yield srv


def _workload(path: Path, caps: dict[int, int] | None = None) -> Path:
    """Prompts only, temperature 0; ``caps``: the requests (by index) that set their own max_tokens."""
    rows = []
    for i, p in enumerate(PROMPTS):
        row: dict = {"id": f"q{i}", "prompt": p, "temperature": 0}
        if caps and i in caps:
            row["max_tokens"] = caps[i]
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_bench_without_per_request_counts_reports_the_totals(server: ManagedServer, tmp_path: Path) -> None:
    """Item 4: the replay check of a server with counters only says the run's totals agree and why requests
    were not compared one by one — not "0 of N requests equal the replay", which reads as a failure."""
    w = _workload(tmp_path / "w.jsonl")
    r = cli("bench", "--base-url", server.base_url, "-w", str(w), "-o", str(tmp_path / "out"), "--max-tokens", "12",
            "--max-concurrency", "2")
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "Replay check (ngram, k=3): the run's totals agree with the replay of its outputs" in out, out
    assert "server gave no per-request counts (start it with --per-request-spec-decode-metrics)" in out
    assert not re.search(r"\b0 of \d+ requests equal", out)
    check = json.loads((tmp_path / "out" / "summary.json").read_text())["specgauge"]["replay_check"]
    assert check["no_server_counts"] == check["requests"] == len(PROMPTS) and not check["gap"]
    ko = cli("bench", "--base-url", server.base_url, "-w", str(w), "-o", str(tmp_path / "ko"), "--max-tokens", "12",
             "--lang", "ko")
    assert ko.returncode == 0 and "실행 전체 합계가 출력의 재생과 맞음" in ko.stdout


def test_bench_max_tokens_caps_every_request(server: ManagedServer, tmp_path: Path) -> None:
    """Item 6: --max-tokens caps what a prompts file (no max_tokens) would generate until EOS; a request's
    own lower max_tokens stays; the cap is stored with the run."""
    w = _workload(tmp_path / "w.jsonl", caps={1: 3, 2: 40})
    out = tmp_path / "out"
    r = cli("bench", "--base-url", server.base_url, "-w", str(w), "-o", str(out), "--max-tokens", "6")
    assert r.returncode == 0, r.stderr
    got = {rec["id"]: rec["output_tokens"] for rec in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert got == {"q0": 6, "q1": 3, "q2": 6, "q3": 6}  # temperature 0 on this model: no EOS within 6 tokens
    assert json.loads((out / "run.json").read_text())["config"]["max_tokens"] == 6


def test_serve_on_a_busy_port_fails_before_saying_it_serves(server: ManagedServer) -> None:
    """Item 7: the port is bound before "serving … (Ctrl-C to stop)" is printed: a port in use is one line."""
    r = cli("serve", "--port", str(server.port), "--threads", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"--port {server.port}: cannot listen there" in r.stderr and "serving" not in r.stderr
