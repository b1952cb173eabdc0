"""The first hour with one's own logs (issue 40), through the real entry point (``python -m specgauge``):
what a newcomer trips over when the input is not what a command wants, each as the person reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgauge", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def _prompts(tmp_path: Path, n: int = 3) -> Path:
    w = tmp_path / "prompts.jsonl"
    w.write_text("".join(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"hello {i}"}]}) + "\n"
                         for i in range(n)))
    return w


def test_simulate_on_prompts_only_says_nothing_to_replay(tmp_path: Path) -> None:
    """Item 1: a prompts file has nothing to replay: one line naming the file and why, exit 2 — not a
    table of dashes labelled EXACT with exit 0."""
    w = _prompts(tmp_path)
    for args in ((), ("--json",)):
        r = cli("simulate", str(w), "-m", "ngram", "-k", "1,2", *args)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "EXACT" not in r.stdout + r.stderr and '"exact": true' not in r.stdout
        assert "nothing to replay in prompts.jsonl (3 request(s) with no logged response)" in r.stderr
        assert "specgauge bench" in r.stderr
    ko = cli("simulate", str(w), "-m", "ngram", "-k", "1", "--lang", "ko")
    assert ko.returncode == 2 and "재생할 것이 없습니다" in ko.stderr and "기록된 응답 없음" in ko.stderr


def test_nothing_replayed_is_not_exact(tmp_path: Path) -> None:
    """Item 1, the library: a result with no replayed request is not labelled exact (nor its summaries)."""
    from specgauge.simulate.run import SimulateConfig, simulate
    from specgauge.workload.tokenizer import ApproxTokenizer

    r = simulate(SimulateConfig(workload=[_prompts(tmp_path)], methods=["ngram"], ks=[1]), ApproxTokenizer())
    assert r.requests_replayed == 0 and not r.exact and not any(s.exact for s in r.overall.summaries)
