"""The replay-vs-live check and compare's diagnosis on the embedded engine at concurrency 4: no gap,
no changed output (the control for ``test_replay_check_vllm.py``).

Two real ``specgauge serve`` processes (the shipped tiny target; one without speculation, one with
n-gram k = 4, lookup 2-4, stating its config on ``/v1/models``), 24 chat requests of the built-in
sample, two thirds greedy and one third at temperature 0.8 with a seed, sent 4 at a time. ``bench``
records token ids and replays them (``stats.replay_check``); ``compare`` names no failed part.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.models import available, target_dir
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.servers import embedded_server
from specgauge.workload.samples import sample_path

pytestmark = [pytest.mark.slow]

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
N, MAX_TOKENS = 24, 32


def mixed_workload(path: Path, n: int = N, max_tokens: int = MAX_TOKENS) -> Path:
    """``n`` chat requests of the built-in sample: every third at temperature 0.8 (top_p 0.95, seeded),
    the rest greedy; short outputs. No tool-calling requests (vLLM serves ``tools`` only with a tool
    parser configured)."""
    rows = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if not r.get("tools")][:n]
    with path.open("w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            r["max_tokens"] = max_tokens
            if i % 3 == 2:
                r.update(temperature=0.8, top_p=0.95, seed=100 + i)
            else:
                r["temperature"] = 0.0
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def test_embedded_engine_has_no_gap_and_no_changed_output_at_concurrency_4(tmp_path: Path) -> None:
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    w = mixed_workload(tmp_path / "w.jsonl")
    runs = {}
    for name, spec in (("baseline", None), ("ngram", NGRAM)):
        with embedded_server(target_dir(), tmp_path / f"{name}.log", spec, max_batch=4) as srv:
            run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / name, max_concurrency=4,
                                  progress=False))
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    rc = runs["ngram"]["specgauge"]["replay_check"]
    assert rc["available"] and rc["config_source"] == "the server's /v1/models card"
    assert (rc["method"], rc["k"]) == ("ngram", 4)
    assert rc["requests"] == N and rc["server"]["draft_tokens"] > 0, "no drafts: the check would prove nothing"
    assert not rc["gap"] and rc["matching"] == N, rc["rows"]
    assert runs["ngram"]["max_concurrent_requests"] > 1
    assert not runs["baseline"]["specgauge"]["replay_check"]["available"]  # no speculation: nothing to check
    res = compare_paths(CompareRequest(baseline=tmp_path / "baseline", candidate=tmp_path / "ngram"))
    gr = res.overall.equivalence.greedy
    assert gr.compared_by == "token ids" and gr.pairs == 16 and gr.matches == 16
    assert res.diagnosis is not None and res.diagnosis.failed == []
    assert res.diagnosis.cause.startswith("no failure found")
    print(res.diagnosis.cause)


def test_embedded_suffix_check_is_exact_at_concurrency_4_with_a_warm_up(tmp_path: Path) -> None:
    """Suffix decoding's shared cache on the real embedded server over HTTP: bench keeps the warm-up's
    token ids and the server reports each request's place in its schedule, so the check replays the cache
    in the engine's own order and every row matches, overlapping requests too (before: overlapping rows
    were all 'uncertain', and the warm-up was missing from the replay's cache)."""
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    w = mixed_workload(tmp_path / "w.jsonl")
    spec = {"method": "suffix", "num_speculative_tokens": 4}
    with embedded_server(target_dir(), tmp_path / "suffix.log", spec, max_batch=4) as srv:
        run_bench(BenchConfig(base_url=srv.base_url, workload=[w], output_dir=tmp_path / "suffix", max_concurrency=4,
                              warmup=1, progress=False))
    summary = json.loads((tmp_path / "suffix" / "summary.json").read_text())
    rc = summary["specgauge"]["replay_check"]
    assert (rc["method"], rc["requests"]) == ("suffix", N) and rc["server"]["accepted_tokens"] > 0
    assert (rc["matching"], rc["gaps"], rc["uncertain"]) == (N, 0, 0), rc["rows"]
    assert any("own call order" in n for n in rc["notes"])
    assert summary["max_concurrent_requests"] > 1
    run = json.loads((tmp_path / "suffix" / "run.json").read_text())
    assert [w["id"] for w in run["warmups"]] == ["warmup-0"] and run["warmups"][0]["output_token_ids"]
