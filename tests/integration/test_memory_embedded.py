"""Draft + KV memory measured on a CPU server: the embedded engine (really started, draft-model
speculation) reports its target and draft weights and KV-cache capacity in /metrics; bench samples
the KV usage gauge during the run and the summary carries draft + KV memory, equal to what the
engine holds (weights counted from the same model files here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.models import available, draft_dir, target_dir
from specgauge.nn.weights import load_model
from specgauge.report.bench_console import format_summary
from specgauge.servers import embedded_server

pytestmark = pytest.mark.skipif(not available(), reason="shipped tiny models missing")


def _weight_bytes(d: Path) -> int:
    import torch

    m = load_model(d, torch.float32)
    return sum(p.numel() * p.element_size() for p in m.parameters())


def test_embedded_draft_model_server_reports_draft_and_kv_memory(tmp_path: Path) -> None:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "the cat sat on the mat. the cat sat on the mat. the cat",
                                      "max_tokens": 48, "temperature": 0}) + "\n" for i in range(4)))
    spec = {"model": str(draft_dir()), "num_speculative_tokens": 3}
    with embedded_server(target_dir(), tmp_path / "server.log", spec, max_batch=2) as srv:
        res = run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "o", max_concurrency=2,
                                    progress=False, timeout=120, memory_interval=0.05))
    s = res.summary
    assert res.exit_code == 0 and s["completed"] == 4
    m = s["specgauge"]["memory"]["server"]
    assert m["weights"]["target_bytes"] == _weight_bytes(target_dir())
    assert m["weights"]["draft_bytes"] == _weight_bytes(draft_dir())
    assert m["kv"]["peak_usage"] > 0 and m["kv"]["capacity_bytes"] > 0  # the gauge was sampled while requests ran
    draft_kv = m["draft_kv_capacity_bytes"]
    assert m["draft_plus_kv_bytes"] == pytest.approx(m["weights"]["draft_bytes"] + draft_kv + m["kv"]["peak_bytes"])
    text = format_summary(s, "en")
    assert "Draft + KV memory (MiB):" in text and f"{m['draft_plus_kv_bytes'] / 2**20:.1f}" in text
