"""`specgauge sweep` and `specgauge recommend` end to end on the embedded server, as a user runs them:
2 configs (off + n-gram k=3) × concurrency 1, 2, 8 requests per cell. Every server really starts
(one per config), every cell is a real bench run, and resuming the finished sweep sends nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.models import available
from specgauge.records import ResultsFile

pytestmark = pytest.mark.slow

PROMPTS = [
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return",
    "one two three four five one two three four five one two three",
    "red green blue red green blue red green blue red green",
]


def _workload(tmp: Path) -> Path:
    p = tmp / "w.jsonl"
    p.write_text("".join(json.dumps({"id": f"p{i}", "prompt": PROMPTS[i % 4], "max_tokens": 24, "temperature": 0.0,
                                     "segment": ["repeat", "code"][i % 2]}) + "\n" for i in range(8)))
    return p


def _renders(html: Path, png: Path) -> None:
    """Every plot of the sweep report draws in headless chromium, offline, without a console error."""
    try:
        from test_report_browser import _chromium, load_in_browser  # the report's own browser harness
    except ImportError:
        return
    if _chromium() is None:
        return
    res = load_in_browser(html, png)
    assert res["loaded"] and res["plotly"] == "object"
    assert res["plot_divs"] >= 3 and res["svg_divs"] == res["plot_divs"], res["errors"]
    assert res["errors"] == [] and res["network"] == [], res
    assert "Recommendation" in res["body_text"] and "Crossover" in res["body_text"]


def _sg(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgauge", *args], capture_output=True, text=True, check=False, timeout=600)


@pytest.mark.skipif(not available(), reason="shipped tiny models missing")
def test_sweep_then_recommend_on_the_embedded_server(tmp_path: Path) -> None:
    w, out = _workload(tmp_path), tmp_path / "sweep"
    args = ["sweep", str(w), "--method", "ngram", "--k", "3", "--concurrency", "1,2", "--num-prompts", "8", "-o", str(out)]
    r = _sg(*args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    m = json.loads((out / "sweep.json").read_text())
    assert [(c["label"], c["concurrency"], c["status"]) for c in m["cells"]] == [
        ("off", 1, "done"), ("off", 2, "done"), ("ngram-k3", 1, "done"), ("ngram-k3", 2, "done")]
    for c in m["cells"]:
        assert len(ResultsFile(out / c["dir"] / "results.jsonl").existing()) == 8
        assert (out / c["server_log"]).is_file()
    a = m["analysis"]
    for c in a["cells"]:
        if c["label"] == "ngram-k3":
            assert c["speedup"]["n"] == 8 and c["speedup"]["low"] <= c["speedup"]["estimate"] <= c["speedup"]["high"]
            assert c["acceptance_rate"] and c["acceptance_source"]  # the server's own counters
            assert c["greedy_pairs"] == 8 and c["greedy_matches"] == 8  # the engine is lossless at temperature 0
            assert {s["segment"] for s in c["segments"]} == {"code", "repeat"}
    assert a["crossovers"][0]["label"] == "ngram-k3" and a["pareto"]
    assert "speedup [95 % CI]" in r.stdout and "crossover: ngram-k3" in r.stdout
    html = (out / "report.html").read_text()
    assert html.count('class="plotly-graph-div"') >= 3 and 'id="recommendation-0"' in html
    assert str(tmp_path) not in (out / "sweep.json").read_text()  # no machine paths in the manifest
    _renders(out / "report.html", tmp_path / "report.png")

    resumed = _sg(*args, "--resume")
    assert resumed.returncode == 0 and "every cell already done" in resumed.stderr, resumed.stderr[-2000:]
    for c in m["cells"]:
        assert len(ResultsFile(out / c["dir"] / "results.jsonl").existing()) == 8

    rec = _sg("recommend", str(out), "--json")
    assert rec.returncode == 0, rec.stderr
    data = json.loads(rec.stdout)
    assert data["verdict"] in ("speculate", "off") and len(data["bands"]) == 2
    if data["verdict"] == "speculate":
        assert data["speculative_config"]["method"] == "ngram"
        assert "--speculative-config" in data["flags"]["vllm"]
    else:
        assert data["flags"]["vllm"] == "vllm serve MODEL" and data["reasons"]
