"""Acceptance from the /metrics counter diff when a server gives no per-request counts (vLLM without
``--per-request-spec-decode-metrics``): report rows and compare still show rate, MAL and per-position
rates, and say where they came from. (A real embedded-server run of the same shape is in
tests/integration/test_counters_and_aa.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.records import ResultsFile, SpecCounts
from specgauge.report.html import ReportConfig, build_report, render_html
from specgauge.report.runs import CompareRequest, compare_paths, load_run
from specgauge.stats.compare import AcceptanceStats
from tests.unit.test_compare import run

COUNTERS = SpecCounts(drafts=100, draft_tokens=300, accepted_tokens=120, accepted_per_pos=[60, 40, 20], source="vllm:/metrics")


def write_run(d: Path, records, sessions=None, summary=None) -> Path:  # type: ignore[no-untyped-def]
    d.mkdir()
    f = ResultsFile(d / "results.jsonl").open()
    for r in records:
        f.append(r)
    f.close()
    if sessions is not None:
        (d / "run.json").write_text(json.dumps({"config": {"max_concurrency": 4}, "sessions": sessions}))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    return d


def session(c: SpecCounts | None) -> dict:  # type: ignore[type-arg]
    return {"duration_s": 10.0, "counter_spec": c.model_dump() if c else None}


def test_counters_fill_in_when_records_have_no_per_request_counts(tmp_path: Path) -> None:
    # two sessions (a resumed run): their diffs add up
    half = SpecCounts(drafts=50, draft_tokens=150, accepted_tokens=60, accepted_per_pos=[30, 20, 10], source="vllm:/metrics")
    d = write_run(tmp_path / "spec", run(n=20, scale=0.5), [session(half), session(half)])
    acc = load_run(d).acceptance()
    assert acc.available and acc.origin == "counters" and acc.requests_with_counts == 0
    assert acc.acceptance_rate == pytest.approx(0.4) and acc.mean_acceptance_length == pytest.approx(2.2)
    assert acc.per_position == pytest.approx([0.6, 0.4, 0.2])
    assert "/metrics counter diff" in acc.basis()


def test_per_request_counts_win_over_counters(tmp_path: Path) -> None:
    per = SpecCounts(drafts=2, draft_tokens=6, accepted_tokens=6, accepted_per_pos=[2, 2, 2], source="vllm:per-request")
    d = write_run(tmp_path / "spec", run(n=10, spec=per), [session(COUNTERS)])
    acc = load_run(d).acceptance()
    assert acc.origin == "per-request" and acc.acceptance_rate == 1.0 and acc.requests_with_counts == 10


def test_summary_counters_are_used_without_run_json_and_a_missing_counter_says_why(tmp_path: Path) -> None:
    block = {"available": True, "source": "vllm:/metrics", "drafts": 100, "draft_tokens": 300, "accepted_tokens": 120,
             "accepted_per_pos": [60, 40, 20]}
    d = write_run(tmp_path / "s", run(n=10), summary={"specgauge": {"acceptance": {"counters": block}}})
    assert load_run(d).acceptance().acceptance_rate == pytest.approx(0.4)
    # an interrupted session: no after-run snapshot, so counters do not cover the run
    d2 = write_run(tmp_path / "i", run(n=10), [{"duration_s": 1.0}])
    acc = load_run(d2).acceptance()
    assert not acc.available and "interrupted" in (acc.reason or "")
    # speculation off: the counters exist but drafted nothing
    assert not AcceptanceStats.of(run(n=3), SpecCounts(drafts=0, draft_tokens=0, accepted_tokens=0)).available


def test_report_shows_counter_acceptance_and_its_source(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", run(n=20), [session(None)])
    spec = write_run(tmp_path / "spec", run(n=20, scale=0.5), [session(COUNTERS)])
    data, runs = build_report(ReportConfig(inputs=[base, spec], out=tmp_path / "r.html"))
    rows = {r.label: r for r in data.runs}
    assert rows["spec"].acceptance_rate == pytest.approx(0.4) and rows["spec"].acceptance_origin == "counters"
    assert rows["spec"].per_position == pytest.approx([0.6, 0.4, 0.2]) and rows["spec"].speculative
    assert rows["base"].acceptance_rate is None and rows["base"].speculative is False
    html = render_html(data, runs)
    assert "No acceptance data" not in html and "40.0%" in html and "/metrics counter diff" in html


def test_compare_takes_the_candidates_counters_overall_not_per_segment(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", run(n=40), [session(None)])
    spec = write_run(tmp_path / "spec", run(n=40, scale=0.5), [session(COUNTERS)])
    res = compare_paths(CompareRequest(baseline=base, candidate=spec))
    assert res.overall is not None
    acc = res.overall.acceptance
    assert acc.origin == "counters" and acc.acceptance_rate == pytest.approx(0.4) and acc.per_position == pytest.approx([0.6, 0.4, 0.2])
    assert res.segments and all(not g.acceptance.available and "run-level" in (g.acceptance.reason or "")
                                for g in res.segments.values())
