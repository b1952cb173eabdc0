"""Paired comparison on synthetic record sets with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specgauge.records import Chunk, RequestRecord, ResultsFile, SpecCounts
from specgauge.report.runs import CompareRequest, RunLoadError, compare_paths, load_run
from specgauge.stats.compare import CompareConfig, bootstrap, compare_group, compare_records


def rec(i: int, e2e: float, tok: int = 40, ttft: float = 0.05, ok: bool = True, segment: str = "default",
        text: str = "", spec: SpecCounts | None = None) -> RequestRecord:
    return RequestRecord(
        id=f"r{i}", segment=segment, index=i, scheduled_s=0.0, sent_s=0.0, started_at=1000.0 + i, elapsed_s=e2e, ok=ok,
        ttft_s=ttft if ok else None, e2e_s=e2e if ok else None, output_tokens=tok if ok else None,
        chunks=[Chunk(t=ttft, n=1), Chunk(t=e2e, n=tok - 1)] if ok else [], text=text or f"output {i}", spec=spec,
    )


def run(n: int = 200, scale: float = 1.0, seed: int = 0, noise: float = 0.1, **kw) -> list[RequestRecord]:  # type: ignore[no-untyped-def]
    """Per-request work drawn from one seeded generator; ``scale`` multiplies every time."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tok = int(rng.integers(20, 200))
        e2e = 0.02 * tok * (1 + noise * abs(rng.standard_normal()))
        out.append(rec(i, scale * e2e, tok, ttft=scale * 0.05, segment="a" if i % 2 else "b", **kw))
    return out


def test_candidate_exactly_twice_as_fast_gives_speedup_2_with_tight_ci() -> None:
    base = run()
    cand = run(scale=0.5)
    g, segs = compare_records(base, cand)
    assert g.paired and g.pairs == 200
    assert g.speedup.estimate == pytest.approx(2.0)
    assert g.speedup.low == pytest.approx(2.0) and g.speedup.high == pytest.approx(2.0)
    e2e95 = g.metric("e2e_p95")
    assert e2e95 is not None and e2e95.ratio == pytest.approx(0.5)
    assert e2e95.delta_ms.estimate == pytest.approx(e2e95.candidate_ms - e2e95.baseline_ms)  # type: ignore[operator]
    assert e2e95.delta_ms.high < 0  # type: ignore[operator]
    assert set(segs) == {"a", "b"} and all(s.pairs == 100 for s in segs.values())


def test_paired_bootstrap_is_tighter_than_unpaired_for_correlated_pairs() -> None:
    base = run(noise=1.0)
    cand = [rec(r.index, r.e2e_s * 0.9, r.output_tokens or 1) for r in base]  # type: ignore[operator]
    paired = compare_group("x", base, cand, CompareConfig())
    renamed = [r.model_copy(update={"id": "c" + r.id}) for r in cand]
    unpaired = compare_group("x", base, renamed, CompareConfig())
    assert not unpaired.paired and any("unpaired" in n for n in unpaired.notes)
    assert paired.speedup.estimate == pytest.approx(1 / 0.9)
    assert unpaired.speedup.estimate == pytest.approx(1 / 0.9)
    assert paired.speedup.width < unpaired.speedup.width  # type: ignore[operator]
    assert unpaired.speedup.low < 1 / 0.9 < unpaired.speedup.high  # type: ignore[operator]


def test_bootstrap_is_seeded_and_covers_a_known_mean() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(10.0, 2.0, size=400)
    cfg = CompareConfig(resamples=4000, seed=7)
    stat = lambda idx: x[idx].mean(1)  # noqa: E731
    a, b = bootstrap(stat, [x.size], cfg), bootstrap(stat, [x.size], cfg)
    assert a == b
    point, lo, hi = a
    se = 2.0 / np.sqrt(400)
    assert lo < point < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)  # the percentile CI of a mean ≈ ±1.96 SE


def test_unpaired_and_failed_requests_are_counted_not_paired() -> None:
    base = run(n=20)
    cand = run(n=20, scale=0.5)
    cand[3] = rec(3, 1.0, ok=False)
    cand.append(rec(99, 0.5))
    g = compare_group("overall", base, cand, CompareConfig())
    assert g.pairs == 19 and g.failed_in_a_pair == 1
    assert g.candidate_only == 1 and g.baseline_only == 0
    assert g.candidate_failed == 1 and g.failure_rate_candidate == pytest.approx(1 / 21)
    assert g.failure_rate_diff.estimate == pytest.approx(1 / 20)  # over the 20 shared ids


def test_acceptance_of_candidate_from_spec_counts() -> None:
    s = SpecCounts(drafts=10, draft_tokens=30, accepted_tokens=15, accepted_per_pos=[8, 5, 2], source="t")
    g, _ = compare_records(run(n=20), run(n=20, spec=s))
    a = g.acceptance
    assert a.available and a.requests_with_counts == 20
    assert a.acceptance_rate == pytest.approx(0.5)
    assert a.mean_acceptance_length == pytest.approx(2.5)
    assert a.per_position == pytest.approx([0.8, 0.5, 0.2])
    g2, _ = compare_records(run(n=20), run(n=20))
    assert not g2.acceptance.available and "speculative counts" in (g2.acceptance.reason or "")


def test_no_successful_request_gives_reasons_not_numbers() -> None:
    base = [rec(i, 1.0, ok=False) for i in range(5)]
    g = compare_group("x", base, run(n=5), CompareConfig())
    assert g.speedup.estimate is None and g.speedup.reason
    assert all(m.delta_ms.estimate is None and m.delta_ms.reason for m in g.latency)


# ---------------------------------------------------------------------------- from disk


def _write_run(d: Path, records: list[RequestRecord], run_json: dict | None = None) -> Path:  # type: ignore[type-arg]
    d.mkdir(parents=True)
    f = ResultsFile(d / "results.jsonl").open()
    for r in records:
        f.append(r)
    f.close()
    if run_json is not None:
        (d / "run.json").write_text(json.dumps(run_json))
    return d


def test_compare_paths_reads_temperature_from_the_workload(tmp_path: Path) -> None:
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}"}], "temperature": 0}) + "\n"
                          for i in range(30)))
    base = _write_run(tmp_path / "a", run(n=30), {"config": {"workload": [str(wl)], "max_concurrency": 4}})
    cand = _write_run(tmp_path / "b", run(n=30, scale=0.5), {"config": {"workload": [str(wl)], "max_concurrency": 4}})
    res = compare_paths(CompareRequest(baseline=base, candidate=cand))
    assert res.overall is not None and res.overall.equivalence is not None
    assert res.overall.equivalence.greedy.pairs == 30 and res.overall.equivalence.greedy.match_rate == 1.0
    assert res.verdict.overall.verdict.value == "GO"
    assert load_run(base).prompts["r3"] == "q3"


def test_load_run_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(RunLoadError, match=r"x\.json:1: not JSON"):
        load_run(bad)
    other = tmp_path / "y.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(RunLoadError, match=r"y\.json: not a specgauge result"):
        load_run(other)
    with pytest.raises(RunLoadError, match="no results.jsonl"):
        load_run(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(RunLoadError, match=r"results\.jsonl:1: not a specgauge request record"):
        load_run(tmp_path / "r")
