"""Real embedded-server runs (``specgauge serve`` in child processes, real HTTP):

- an A/A comparison of two baseline runs of the same server ends in "equivalent within the margin"
  (NO-GO, exit 1), never in a request for more requests;
- a speculative server that gives only aggregate /metrics counters (no
  ``--per-request-spec-decode-metrics``, vLLM's default) still has its acceptance rate, MAL and
  per-position rates shown by ``report`` and ``compare``, which say they came from the counter diff;
- results.jsonl / run.json / summary.json carry no absolute path of the machine (the server names its
  model by the directory's name; bench stores workload paths relative to the output directory).

The two A/A runs go at the same time against the one server, so the load of a shared CI machine
drifts on both alike (run one after the other on a busy 2-core machine they differed by 17 %: the
machine, not the server, changed between them). Short: 48 requests of 24 tokens per run.
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from specgauge.bench import BenchConfig, run_bench
from specgauge.models import available, target_dir
from specgauge.records import ResultsFile
from specgauge.report.decide_console import render_comparison
from specgauge.report.html import ReportConfig, build_report, render_html
from specgauge.report.runs import CompareRequest, compare_paths, load_run
from specgauge.servers import embedded_server
from specgauge.stats.verdict import EQUIVALENT, UNSETTLED, Verdict

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="shipped tiny models missing")]

N = 48
PROMPTS = ["the cat sat on the mat. the cat sat on the mat. the cat", "one two three four one two three four one two",
           "def f(x):\n    return x\n\ndef f(x):\n   ", "red green blue red green blue red"]
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}


def _bench(url: str, w: Path, out: Path, num_prompts: int, resume: bool = False) -> None:
    run_bench(BenchConfig(base_url=url, workload=[w], output_dir=out, max_concurrency=2, warmup=0 if resume else 2,
                          num_prompts=num_prompts, resume=resume, progress=False))


def _together(url: str, w: Path, outs: list[Path], num_prompts: int, resume: bool = False) -> None:
    """Bench runs at the same time against one server (threads; each run has its own event loop)."""
    errors: list[BaseException] = []

    def go(out: Path) -> None:
        try:
            _bench(url, w, out, num_prompts, resume)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    threads = [threading.Thread(target=go, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two baseline runs (A/A, together) and a counters-only speculative run; the A/A extension, when
    the verdict asks for one, is appended to base1/base2 by the A/A test itself."""
    root = tmp_path_factory.mktemp("aa")
    w = root / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"q{i}", "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 24, "temperature": 0})
                         + "\n" for i in range(N)))
    srv = embedded_server(target_dir(), root / "base.log", None, per_request_metrics=None).start()
    try:
        _together(srv.base_url, w, [root / "base1", root / "base2"], N)
        with embedded_server(target_dir(), root / "spec.log", NGRAM, per_request_metrics=None) as spec_srv:
            _bench(spec_srv.base_url, w, root / "spec", N)
        yield {"base1": root / "base1", "base2": root / "base2", "spec": root / "spec", "workload": w,
               "base_url": srv.base_url}
    finally:
        srv.stop()


def test_aa_of_two_baseline_runs_is_equivalent_within_the_margin(runs: dict[str, Any]) -> None:
    """Equivalent at once, or — when the machine's noise left the CI straddling the margin — after the
    extra requests the verdict asked for (capped at 2N): with a margin, more requests do settle an A/A."""
    req = CompareRequest(baseline=runs["base1"], candidate=runs["base2"])
    res = compare_paths(req)
    v = res.verdict.overall
    assert v.finding in (EQUIVALENT, UNSETTLED), (res.overall.speedup, v.reasons)  # type: ignore[union-attr]
    if v.finding == UNSETTLED:
        assert v.verdict is Verdict.INCONCLUSIVE and v.more_requests and v.more_requests > 0
        total = N + min(v.more_requests, 2 * N)
        _together(runs["base_url"], runs["workload"], [runs["base1"], runs["base2"]], total, resume=True)
        res = compare_paths(req)
        v = res.verdict.overall
    s = res.overall.speedup  # type: ignore[union-attr]
    assert s.low is not None and s.high is not None
    assert v.verdict is Verdict.NO_GO and res.verdict.exit_code == 1, (s, v.reasons, v.notes)
    assert v.finding == EQUIVALENT and "equivalent within the margin" in v.reasons[0], (s, v.reasons)
    assert v.more_requests is None and v.more_requests_reason is None
    assert 1 / 1.05 <= s.low and s.high <= 1.05


def test_counter_only_server_still_shows_acceptance_in_report_and_compare(runs: dict[str, Any]) -> None:
    spec = runs["spec"]
    recs = ResultsFile(spec / "results.jsonl").existing()
    assert len(recs) == N and all(r.ok and r.spec is None for r in recs)  # no per-request counts at all
    summary = json.loads((spec / "summary.json").read_text())
    assert summary["spec_decode_draft_tokens"] > 0  # but the /metrics diff has them
    rate, mal = summary["spec_decode_acceptance_rate"] / 100, summary["spec_decode_acceptance_length"]
    per_pos = summary["spec_decode_per_position_acceptance_rates"]

    acc = load_run(spec).acceptance()
    assert acc.origin == "counters" and acc.acceptance_rate == pytest.approx(rate) and acc.per_position == pytest.approx(per_pos)
    assert acc.mean_acceptance_length == pytest.approx(mal) and len(per_pos) == 3

    data, loaded = build_report(ReportConfig(inputs=[runs["base1"], spec], out=spec.parent / "r.html"))
    row = next(r for r in data.runs if r.label == "spec")
    assert row.acceptance_rate == pytest.approx(rate) and row.acceptance_origin == "counters" and row.speculative
    html = render_html(data, loaded)
    assert "No acceptance data" not in html and f"{rate:.1%}" in html and "/metrics counter diff" in html

    res = compare_paths(CompareRequest(baseline=runs["base1"], candidate=spec))
    ca = res.overall.acceptance  # type: ignore[union-attr]
    assert ca.origin == "counters" and ca.acceptance_rate == pytest.approx(rate) and ca.per_position == pytest.approx(per_pos)
    buf = io.StringIO()
    render_comparison(res, Console(file=buf, width=200))
    assert f"rate {rate:.1%}" in buf.getvalue() and "/metrics counter diff" in buf.getvalue()


def _strings(v: Any) -> list[str]:
    if isinstance(v, dict):
        return [s for k, x in v.items() for s in (k, *_strings(x))]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return [v] if isinstance(v, str) else []


def test_results_carry_no_absolute_machine_path(runs: dict[str, Any]) -> None:
    roots = {str(runs["spec"].parent), str(target_dir()), str(Path.home()), sys.prefix, str(Path(__file__).parents[2])}
    abs_path = re.compile(r"^(/|[A-Za-z]:[\\/])")
    for d in (runs["base1"], runs["base2"], runs["spec"]):
        for name in ("results.jsonl", "run.json", "summary.json"):
            text = (d / name).read_text()
            for root in roots:
                assert root not in text, f"{d.name}/{name} holds {root}"
            docs = [json.loads(x) for x in text.splitlines()] if name.endswith(".jsonl") else [json.loads(text)]
            for s in (s for doc in docs for s in _strings(doc)):
                # URL paths ("/v1/models") are fine; a path whose first component exists here is a machine path
                if abs_path.match(s) and len(s) > 1:
                    first = "/" + s.lstrip("/").split("/")[0]
                    assert not Path(first).exists() or first == "/", f"{d.name}/{name}: {s!r}"
    run = json.loads((runs["spec"] / "run.json").read_text())
    assert run["server"]["model"] == target_dir().name == "tiny-target"  # the served name: the directory's name
    assert run["config"]["workload"] == ["../w.jsonl"] and run["config"]["output_dir"] == "spec"
