"""specgauge bench against the embedded specgauge server (shipped tiny target + draft): detected as
its own dialect, acceptance from per-request metrics equal to its /metrics counters exactly."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.records import ResultsFile, TokenCountSource

pytestmark = pytest.mark.slow
MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"


@pytest.fixture(scope="module")
def embedded() -> Iterator[str]:
    if not (MODELS / "tiny-target" / "config.json").exists() or not (MODELS / "tiny-draft" / "config.json").exists():
        pytest.skip("the shipped tiny models are absent")
    pytest.importorskip("torch")
    uvicorn = pytest.importorskip("uvicorn")
    from specgauge.engine.serve import build_app

    spec = json.dumps({"model": str(MODELS / "tiny-draft"), "num_speculative_tokens": 3})
    app = build_app(MODELS / "tiny-target", spec, served_model_name="tiny", per_request_spec_decode_metrics="detailed", num_threads=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    t0 = time.monotonic()
    while not srv.started:
        if time.monotonic() - t0 > 60 or not th.is_alive():
            raise RuntimeError("embedded server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    th.join(10)


def test_embedded_acceptance_equals_counters(embedded: str, tmp_path: Path) -> None:
    prompts = ["the cat sat on the mat. the cat", "hello world hello world", "one two three one two three", "a b c a b c a b"]
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"e{i}", "prompt": prompts[i % 4], "max_tokens": 24, "temperature": 0}) + "\n"
                         for i in range(8)))
    chat = tmp_path / "c.jsonl"
    chat.write_text("".join(json.dumps({"id": f"c{i}", "messages": [{"role": "user", "content": prompts[i % 4]}], "max_tokens": 16})
                            + "\n" for i in range(4)))
    res = run_bench(BenchConfig(base_url=embedded, workload=[w, chat], output_dir=tmp_path / "o", max_concurrency=4,
                                progress=False, warmup=1))
    s = res.summary
    assert s["failed"] == 0 and s["completed"] == 12 and res.exit_code == 0
    assert s["specgauge"]["dialect"] == "embedded"
    ag = s["specgauge"]["acceptance"]["agreement"]
    assert ag["compared"] and ag["equal"], ag
    assert set(ag["fields"]) == {"drafts", "draft_tokens", "accepted_tokens", "accepted_per_pos"}
    assert s["spec_decode_num_drafts"] > 0
    for r in ResultsFile(tmp_path / "o" / "results.jsonl").existing():
        assert r.token_counts is TokenCountSource.usage and sum(c.n for c in r.chunks) == r.output_tokens
