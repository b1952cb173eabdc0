"""/metrics snapshots and diffs: label sets kept apart, _created dropped, resets reported."""

from __future__ import annotations

import pytest

from specgauge.loadgen.metrics_scrape import MetricsParseError, Snapshot, diff, parse_key, render_key

BEFORE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 10
vllm:spec_decode_num_drafts_total{engine="0",model_name="b"} 100
vllm:spec_decode_num_drafts_created{engine="0",model_name="a"} 1.7e9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",model_name="a",finished_reason="stop"} 3
"""
AFTER = BEFORE.replace("} 10\n", "} 14\n").replace("} 100\n", "} 150\n").replace("} 0.5", "} 0.1").replace(
    '"stop"} 3', '"stop"} 5\nvllm:request_success_total{engine="0",model_name="a",finished_reason="length"} 2'
)


def test_label_sets_kept_apart_and_created_dropped() -> None:
    s = Snapshot.parse(BEFORE)
    assert s.select("vllm:spec_decode_num_drafts_total") == {
        (("engine", "0"), ("model_name", "a")): 10.0,
        (("engine", "0"), ("model_name", "b")): 100.0,
    }
    assert s.get("vllm:spec_decode_num_drafts_total", model_name="b") == 100.0
    assert not any(n.endswith("_created") for n in s.names())


def test_diff_per_label_set_gauges_excluded_new_series_from_zero() -> None:
    d = diff(Snapshot.parse(BEFORE), Snapshot.parse(AFTER))
    assert d.get("vllm:spec_decode_num_drafts_total", model_name="a") == 4
    assert d.get("vllm:spec_decode_num_drafts_total", model_name="b") == 50
    assert d.by_label("vllm:request_success_total", "finished_reason") == {"stop": 2.0, "length": 2.0}
    assert d.get("vllm:kv_cache_usage_perc") is None
    assert not d.resets


def test_counter_going_down_is_a_reset_not_a_negative_delta() -> None:
    d = diff(Snapshot.parse(AFTER), Snapshot.parse(BEFORE))
    assert d.get("vllm:spec_decode_num_drafts_total") is None
    assert any("model_name=\"a\"" in r for r in d.resets)


def test_json_round_trip() -> None:
    s = Snapshot.parse(BEFORE)
    assert Snapshot.from_json(s.to_json()).values == s.values
    k = ("x:y_total", (("a", "1"), ("b", "q")))
    assert parse_key(render_key(k)) == k


def test_not_prometheus_text() -> None:
    with pytest.raises(MetricsParseError, match="not Prometheus text"):
        Snapshot.parse("<html>\n{{{ bad")
