"""bench: durable results, resume, secrets kept out, vLLM-compatible summary, acceptance equality."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, BenchError, plan_requests, run_bench
from specgauge.testing.fakeserver import FakeServer
from specgauge.records import ResultsFile
from specgauge.report.bench_console import format_summary
from specgauge.workload.schema import ApiKind, Request


def workload(tmp: Path, prompts: list[str], segments: list[str] | None = None) -> Path:
    p = tmp / "w.jsonl"
    lines = []
    for i, pr in enumerate(prompts):
        d = {"id": f"q{i}", "prompt": pr, "max_tokens": 32}
        if segments:
            d["metadata"] = {"team": segments[i]}
        lines.append(json.dumps(d))
    p.write_text("\n".join(lines) + "\n")
    return p


def cfg(srv: FakeServer, w: Path, out: Path, **kw) -> BenchConfig:
    return BenchConfig(base_url=srv.base_url, workload=[w], output_dir=out, progress=False, timeout=2.0, **kw)


def test_clean_run_summary_keys_acceptance_equal_and_secret_not_written(tmp_path: Path) -> None:
    w = workload(tmp_path, ["tokens:9 per:3", "tokens:7 per:2", "tokens:12 per:5", "tokens:4 per:1"], ["a", "b", "a", "b"])
    with FakeServer() as srv:
        res = run_bench(cfg(srv, w, tmp_path / "o", api_key="sk-SECRET-123", max_concurrency=2, segment_by="metadata.team",
                            metric_percentiles="50,99", goodput=["ttft:10000"]))
    s = res.summary
    assert res.exit_code == 0 and s["completed"] == 4 and s["failed"] == 0
    for k in ("duration", "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
              "median_tpot_ms", "p99_itl_ms", "p50_ttft_ms", "std_ttft_ms", "request_goodput", "max_concurrent_requests"):
        assert k in s, k
    assert s["total_output_tokens"] == 9 + 7 + 12 + 4
    assert s["request_goodput"] == pytest.approx(s["request_throughput"])
    acc = s["specgauge"]["acceptance"]
    assert acc["agreement"]["compared"] and acc["agreement"]["equal"], acc["agreement"]
    # 9 per 3: steps 3,3,2 -> accepted 2+2+1; 7 per 2: 2,2,2 -> 3; 12 per 5: 5,5,1 -> 8; 4 per 1: 0
    assert s["spec_decode_accepted_tokens"] == 5 + 3 + 8 + 0
    assert s["spec_decode_num_drafts"] == 3 + 3 + 3 + 3
    assert set(s["specgauge"]["segments"]) == {"a", "b"}
    seg_a = s["specgauge"]["segments"]["a"]["acceptance"]["per_request_total"]
    assert seg_a["accepted_tokens"] == 5 + 8
    for f in tmp_path.joinpath("o").iterdir():
        assert "sk-SECRET-123" not in f.read_text(), f
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["config"]["api_key_set"] is True and "api_key" not in run["config"]
    assert run["sessions"][0]["counters_before"] is not None and run["server"]["/version"] == {"version": "fake-1"}
    assert run["server"]["speculative_config_inferred"]["num_speculative_tokens"] == 4
    text = format_summary(s)
    assert "Serving Benchmark Result" in text and "Per-request sums equal counters:         yes" in text


def test_existing_results_need_resume_and_resume_skips_done_ids(tmp_path: Path) -> None:
    w = workload(tmp_path, [f"tokens:{3 + i}" for i in range(5)])
    out = tmp_path / "o"
    with FakeServer() as srv:
        run_bench(cfg(srv, w, out, num_prompts=2))
        with pytest.raises(BenchError, match="--resume"):
            run_bench(cfg(srv, w, out))
        # a crash in the middle of a write left half a line
        with open(out / "results.jsonl", "a") as f:
            f.write('{"id": "q2", "seg')
        before = srv.requests
        res = run_bench(cfg(srv, w, out, resume=True))
        assert srv.requests - before == 3  # q2, q3, q4 only
    ids = [r.id for r in ResultsFile(out / "results.jsonl").existing()]
    assert sorted(ids) == [f"q{i}" for i in range(5)] and len(ids) == 5
    assert res.summary["completed"] == 5 and res.summary["specgauge"]["sessions"] == 2
    assert res.summary["specgauge"]["acceptance"]["agreement"]["equal"]


def test_num_prompts_cycles_with_distinct_ids() -> None:
    reqs = [Request(id="a", api=ApiKind.completion, prompt="x"), Request(id="b", api=ApiKind.completion, prompt="y")]
    assert [r.id for r in plan_requests(reqs, 5)] == ["a", "b", "a~r1", "b~r1", "a~r2"]


def test_bad_flags_are_user_errors(tmp_path: Path) -> None:
    w = workload(tmp_path, ["tokens:2"])
    with pytest.raises(BenchError, match="metric-percentiles"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=tmp_path / "o", metric_percentiles="x"))
    with pytest.raises(BenchError, match="percentile-metrics"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=tmp_path / "o", percentile_metrics="ttft,foo"))
    with pytest.raises(BenchError, match="goodput"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=tmp_path / "o", goodput=["ttft"]))
    with pytest.raises(BenchError, match="takes chat requests"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=tmp_path / "o", endpoint="/v1/chat/completions"))


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    w = workload(tmp_path, ["tokens:2"])
    with FakeServer() as srv:
        url = srv.base_url
    with pytest.raises(BenchError, match=f"connection refused at {url}: .*nothing was written"):
        run_bench(BenchConfig(base_url=url, workload=[w], output_dir=tmp_path / "o", progress=False))
    assert not (tmp_path / "o").exists()  # no folder of failures left behind (issue 40 item 5)


def test_other_traffic_is_warned_and_kv_sampled_during_the_run(tmp_path: Path) -> None:
    w = workload(tmp_path, ["tokens:6 per:2 delay_ms:40"] * 3)
    with FakeServer() as srv:
        def intruder() -> None:  # someone else's requests finish on the server mid-run
            while srv.requests < 1:
                time.sleep(0.005)
            srv.counters["success"] += 7
            srv.counters["drafts"] += 3

        th = threading.Thread(target=intruder)
        th.start()
        res = run_bench(cfg(srv, w, tmp_path / "o", memory_interval=0.05))
        th.join()
    g = res.summary["specgauge"]
    assert any("other traffic" in x for x in g["warnings"]), g["warnings"]
    assert g["acceptance"]["agreement"]["equal"] is False
    assert g["memory"]["kv_cache"]["samples_during_run"] >= 1 and "peak_kv_cache_usage_during_run" in g["memory"]["kv_cache"]
    assert "other traffic" in format_summary(res.summary)


def test_self_timed_trace_replay_records_scheduled_times(tmp_path: Path) -> None:
    p = tmp_path / "w.jsonl"
    p.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "tokens:2", "arrival_time": 100.0 + 0.2 * i}) + "\n" for i in range(3)))
    with FakeServer() as srv:
        run_bench(cfg(srv, p, tmp_path / "o", self_timed=True, trace_speed=2.0))
        with pytest.raises(BenchError, match="arrival_time"):
            run_bench(cfg(srv, workload(tmp_path, ["tokens:2"]), tmp_path / "o2", self_timed=True))
    recs = sorted(ResultsFile(tmp_path / "o" / "results.jsonl").existing(), key=lambda r: r.index)
    assert [r.scheduled_s for r in recs] == pytest.approx([0.0, 0.1, 0.2])
    assert all(r.sent_s >= r.scheduled_s for r in recs)


def test_unusable_output_dir_and_corrupt_results_are_user_errors(tmp_path: Path) -> None:
    w = workload(tmp_path, ["tokens:2"])
    (tmp_path / "file").write_text("x")
    with pytest.raises(BenchError, match="--output-dir"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=tmp_path / "file" / "sub"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.jsonl").write_text('{"not": "a record"}\n')
    with pytest.raises(BenchError, match="results.jsonl:1: not a specgauge request record"):
        run_bench(BenchConfig(base_url="http://127.0.0.1:9", workload=[w], output_dir=bad, resume=True))
