"""KV-cache and model-weight memory as the server reports it, on real vLLM 0.32 (CPU) output captured
here (``tests/data/vllm_memory/README.md``), the embedded engine's own gauges, and the comparison row."""

from __future__ import annotations

from pathlib import Path

from specgauge.loadgen.dialects import get_dialect
from specgauge.loadgen.metrics_scrape import Snapshot
from specgauge.stats.memory import compare_memory, run_memory
from specgauge.stats.server_memory import (
    GIB,
    kv_from_cache_config,
    parse_vllm_log,
    server_memory,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_memory"


def _snap(name: str) -> Snapshot:
    return Snapshot.parse((DATA / f"vllm-0.32.0-cpu_{name}.metrics.txt").read_text())


def test_vllm_cache_config_info_gives_kv_capacity() -> None:
    base, spec = (get_dialect("vllm").memory(_snap(n)) for n in ("baseline", "draft_model"))
    assert base["kv_cache_usage"] == 0.0
    assert kv_from_cache_config(base["cache_config"]) == {"capacity_bytes": 2**30, "capacity_tokens": 262144, "cache_dtype": "auto"}
    # the draft model's KV shares the same 1 GiB budget: fewer tokens fit
    assert kv_from_cache_config(spec["cache_config"])["capacity_tokens"] == 209664
    assert kv_from_cache_config({"num_gpu_blocks": "2048", "block_size": "128"}) == {"capacity_tokens": 262144}


def test_vllm_cpu_log_checkpoint_sizes_and_kv() -> None:
    base = parse_vllm_log((DATA / "vllm-0.32.0-cpu_baseline.log").read_text())
    spec = parse_vllm_log((DATA / "vllm-0.32.0-cpu_draft_model.log").read_text())
    assert base == {"checkpoint_gib": {"target": 0.01}, "kv_cache_gib": 1.0, "kv_cache_tokens": 262144}
    assert spec == {"checkpoint_gib": {"target": 0.01, "draft": 0.0}, "kv_cache_gib": 1.0, "kv_cache_tokens": 209664}


def test_vllm_gpu_log_lines() -> None:
    text = ("INFO [gpu_model_runner.py:5150] Model loading took 14.9596 GiB memory and 5.0 seconds\n"
            "INFO [gpu_worker.py:760] Available KV cache memory: 52.3 GiB\n"
            "INFO [kv_cache_utils.py:2327] GPU KV cache size: 1,234,567 tokens, Maximum concurrency ...\n")
    assert parse_vllm_log(text) == {"model_loading_gib": 14.9596, "kv_cache_gib": 52.3, "kv_cache_tokens": 1234567}


def test_server_memory_of_a_vllm_run() -> None:
    kv = {**get_dialect("vllm").memory(_snap("draft_model")), "peak_kv_cache_usage_during_run": 0.25}
    log = parse_vllm_log((DATA / "vllm-0.32.0-cpu_draft_model.log").read_text())
    m = server_memory(kv, log)
    assert m is not None
    assert m["kv"]["capacity_bytes"] == 2**30 and m["kv"]["peak_bytes"] == 0.25 * 2**30
    assert m["kv"]["peak_tokens"] == 0.25 * 209664 and "cache_config_info" in m["kv"]["source"]
    assert m["weights"]["target_bytes"] == int(0.01 * GIB) and m["weights"]["draft_bytes"] == 0
    assert "2 decimals" in m["weights"]["source"]
    assert m["draft_plus_kv_bytes"] == 0.25 * 2**30  # draft rounds to 0 GiB in vLLM's own log


def test_nothing_reported_is_none() -> None:
    assert server_memory(None, None) is None
    assert server_memory({"kv_cache_usage": 0.0}, {}) is None  # a usage share without a capacity or peak says nothing


def test_embedded_engine_gauges() -> None:
    text = """# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="t"} 0.0
# TYPE specgauge:model_weight_bytes gauge
specgauge:model_weight_bytes{engine="0",model_name="t",role="target"} 1.9997696e+07
specgauge:model_weight_bytes{engine="0",model_name="t",role="draft"} 9.441024e+06
# TYPE specgauge:kv_cache_capacity_bytes gauge
specgauge:kv_cache_capacity_bytes{engine="0",model_name="t",role="target"} 4.276224e+06
specgauge:kv_cache_capacity_bytes{engine="0",model_name="t",role="draft"} 1.069056e+06
# TYPE specgauge:kv_cache_capacity_tokens gauge
specgauge:kv_cache_capacity_tokens{engine="0",model_name="t"} 1024.0
"""
    mem = get_dialect("embedded").memory(Snapshot.parse(text))
    assert mem["engine_memory"] == {"target": {"weight_bytes": 19997696, "kv_capacity_bytes": 4276224},
                                    "draft": {"weight_bytes": 9441024, "kv_capacity_bytes": 1069056}, "kv_capacity_tokens": 1024}
    m = server_memory({**mem, "peak_kv_cache_usage_during_run": 0.5}, None)
    assert m is not None and m["kv"]["peak_bytes"] == 0.5 * 4276224 and m["kv"]["peak_tokens"] == 512
    assert m["draft_plus_kv_bytes"] == 9441024 + 1069056 + 0.5 * 4276224


def _summary(server: dict | None, device: dict | None = None) -> dict:
    return {"specgauge": {"memory": {"device": device, "server": server}}}


def test_compare_memory_rows_and_derived_draft_weights() -> None:
    gib = 2**30
    base = _summary({"kv": {"capacity_bytes": 50 * gib, "peak_usage": 0.2, "peak_bytes": 10 * gib, "source": "/metrics"},
                     "weights": {"loaded_total_bytes": 15 * gib, "source": "server log"}},
                    {"tool": "amd-smi", "devices": {0: {"peak_used_mib": 150000.0}, 1: {"peak_used_mib": 170000.0}}})
    cand = _summary({"kv": {"capacity_bytes": 48 * gib, "peak_usage": 0.25, "peak_bytes": 12 * gib, "source": "/metrics"},
                     "weights": {"loaded_total_bytes": 16 * gib, "source": "server log"}},
                    {"tool": "amd-smi", "devices": {0: {"peak_used_mib": 175000.0}}})
    rows = {r.key: r for r in compare_memory(base, cand)}
    assert rows["device_peak_used_mib"].baseline == 170000.0  # the largest device, never a sum
    assert rows["device_peak_used_mib"].delta == 5000.0
    assert rows["draft_weight_bytes"].baseline is None and rows["draft_weight_bytes"].candidate == 1 * gib
    assert "minus the baseline" in rows["draft_weight_bytes"].source
    assert rows["draft_plus_kv_bytes"].candidate == 13 * gib
    assert rows["kv_peak_usage"].delta == 0.25 - 0.2
    assert [f.key for f in run_memory(base)] == ["device_peak_used_mib", "kv_capacity_bytes", "kv_peak_usage", "kv_peak_bytes"]
    assert compare_memory(_summary(None), _summary(None)) == []
