"""Each field detector fires on its fault and stays quiet on two identical servers, over real HTTP.

The servers are the scripted server's fault mode (``testing.faults``): a speculative server that
breaks on purpose the way production servers were reported to, which no real server can be made to
do on demand. Two runs against identical servers (A/A) raise nothing; one server with every fault on
raises each finding with its evidence: broken tool calls and JSON (k = 3), stalls ended by ``}``,
acceptance collapsed past 2K prompt tokens against the replay of its own outputs, TTFT lost in the
prefill step. The canary judges the same faulty candidate and rolls it back on the field guardrails;
an A/A canary passes them.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from typing import Any

from specgauge.bench import BenchConfig, run_bench
from specgauge.canary import CanaryConfig, CanaryThread, JudgeConfig
from specgauge.canary.eventlog import read_events
from specgauge.report.html import ReportConfig, write_report
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.stats.verdict import Verdict
from specgauge.testing.faults import Faults, fault_workload
from specgauge.testing.scripted_server import ScriptedServer
from tests.unit.test_report_ko_sections import english_words, figure_text, page_text

# seconds per step: a ~6–9 ms decode step at batch 8 (no sleep shorter than the host's timer slack matters)
LAW = {"a": 0.002, "r": 0.0002, "b": 0.0002, "p": 1e-6, "q": 0.0005, "host[ngram]": 0.0002}
SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
FAULTS = Faults(corrupt_json_from_k=3, stall_at_brace_s=0.35, collapse_past_context=2048, draft_prefill_s_per_token=3e-5)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return fault_workload(tmp_path_factory.mktemp("faults"), tool_calls=8, plain=4, json_answers=12)


def bench(url: str, requests: Path, out: Path, dialect: str = "auto") -> Path:
    run_bench(BenchConfig(base_url=url, workload=[requests], output_dir=out, max_concurrency=8, progress=False, memory_interval=5,
                          dialect=dialect))
    return out


def field_reasons(reasons: list[str]) -> list[str]:
    keys = ("structured outputs", "stall", "candidate server is the problem")
    return [r for r in reasons if any(k in r for k in keys)]


@pytest.mark.slow
def test_each_detector_fires_on_its_fault_and_not_on_a_a(workload: tuple[Path, Path], tmp_path: Path) -> None:
    requests, logged = workload
    with ExitStack() as stack:
        a, a2, bad = (stack.enter_context(ScriptedServer([logged], LAW, speculative_config=SPEC, faults=f))
                      for f in (Faults(), Faults(), FAULTS))
        runs = {name: bench(s.base_url, requests, tmp_path / name) for name, s in (("a", a), ("a2", a2), ("bad", bad))}

    aa = compare_paths(CompareRequest(baseline=runs["a"], candidate=runs["a2"]))
    assert aa.overall is not None and aa.overall.outputs is not None and aa.overall.stalls is not None
    assert aa.overall.outputs.candidate_k == aa.overall.outputs.baseline_k == 0 and aa.overall.outputs.candidate_n == 20
    assert not field_reasons(aa.verdict.overall.reasons) and aa.diagnosis is not None and aa.diagnosis.collapse is None
    assert aa.ttft is not None and aa.ttft.prefill_delta_ms is not None and aa.ttft.finding is None
    a_check = json.loads((runs["a"] / "summary.json").read_text())["specgauge"]["replay_check"]
    assert a_check["available"] and a_check["matching"] == a_check["requests"] == 24  # the replay equals the server
    assert a_check["profile"]["collapse"] is None

    res = compare_paths(CompareRequest(baseline=runs["a"], candidate=runs["bad"]))
    ov, why = res.overall, res.verdict.overall.reasons
    assert ov is not None and ov.outputs is not None and ov.stalls is not None and res.ttft is not None
    assert res.verdict.overall.verdict is Verdict.NO_GO
    # 1. tool calls and JSON broken at k = 3 (the JSON answers all; tool calls wherever a draft was accepted inside one)
    assert ov.outputs.baseline_k == 0 and ov.outputs.candidate_k >= 12 and ov.outputs.p_value < 0.01
    assert any("breaks more structured outputs" in r for r in why)
    bad_calls = res.segments["tool_calling"].outputs
    assert bad_calls is not None and bad_calls.candidate_k >= 1 and "tool call 1" in bad_calls.examples[0]
    # 2. stalls, and the token that ended them is the closing brace
    assert ov.stalls.rate.candidate_k >= 16 and ov.stalls.rate.baseline_k == 0
    ends = [s.ended_by for s in ov.stalls.stalls]  # (a step prefilling several long prompts may stall the others too)
    assert ends and ends.count("}") >= 0.8 * len(ends) and ov.stalls.stalls[0].gap_ms >= 350, ends
    # 3. acceptance collapsed past 2K prompt tokens, named as the server's problem with the evidence
    assert res.diagnosis is not None and res.diagnosis.collapse is not None and "2K–4K" in res.diagnosis.collapse
    assert why[0].startswith("the candidate server is the problem: acceptance collapses at prompts of 2K–4K tokens")
    prof = json.loads((runs["bad"] / "summary.json").read_text())["specgauge"]["replay_check"]["profile"]
    short = [b for b in prof["bands"] if b["hi"] is not None and b["hi"] <= 2048]
    assert short and all(b["server_accepted"] == b["replay_accepted"] for b in short)  # fine below the length
    # 4. TTFT: the candidate's delta sits in the prefill step (the drafter's prefill), the split adds up
    t = res.ttft
    assert t.finding == "prefill" and t.prefill_delta_ms is not None and t.prefill_delta_ms > 0
    assert t.measured_delta_ms == pytest.approx(t.queue_delta_ms + t.prefill_delta_ms + t.rest_delta_ms)  # type: ignore[operator]
    _report_shows_it(runs, res, tmp_path)


def _report_shows_it(runs: dict[str, Path], res: Any, tmp_path: Path) -> None:
    """The HTML report: acceptance vs prompt length (live and replayed), the collapse, the stall table, in both languages."""
    cmp = tmp_path / "compare.json"
    cmp.write_text(res.model_dump_json(), encoding="utf-8")
    # the library's own parse errors and the runs' ids are data (kept as they are in every language)
    data = {"a", "bad", *(e for g in (res.overall, *res.segments.values()) if g.outputs for e in g.outputs.examples)}
    for lang in ("en", "ko"):
        out = tmp_path / f"report-{lang}.html"
        write_report(ReportConfig(inputs=[runs["a"], runs["bad"], cmp], out=out, lang=lang))
        html = out.read_text(encoding="utf-8")
        section = html[html.index('<section id="field">'):html.index("</section>", html.index('<section id="field">'))]
        assert 'id="fig-field-acc-1"' in section and "2K–4K" in section and '<span class="data">"}"</span>' in section
        if lang == "ko":
            words = english_words(page_text(section) + "\n" + "\n".join(figure_text(section)), data)
            assert words == [], words


def _canary(base: str, cand: str, requests: Path, out: Path, tmp: Path, rounds: int = 3) -> list[dict]:
    judge = JudgeConfig(min_samples=8, min_tail_samples=8, confidence=0.95)
    conf = CanaryConfig(baseline=base, candidate=cand, port=0, out_dir=out, interval_s=60.0, steps=[50.0, 100.0],
                        failure_limit=1, judge=judge, speculative_config=SPEC, timeout_s=30.0)
    with CanaryThread(conf) as cy:
        for i in range(rounds):  # one window per round, judged when the round ends
            bench(cy.base_url, requests, tmp / f"{out.name}-through-{i}", dialect="vllm")  # a vLLM client: asks for token ids
            cy.call(cy.service.evaluate())
            if cy.service.status()["state"] == "rolled_back":
                break
    return [e for e in read_events(out / "decisions.jsonl") if e["event"] == "evaluation"]


def test_the_canary_rolls_back_a_faulty_candidate_and_passes_a_a(workload: tuple[Path, Path], tmp_path: Path) -> None:
    requests, logged = workload
    with ScriptedServer([logged], LAW, speculative_config=SPEC, faults=Faults()) as a, \
            ScriptedServer([logged], LAW, speculative_config=SPEC, faults=FAULTS) as bad:
        evals = _canary(a.base_url, bad.base_url, requests, tmp_path / "bad", tmp_path)
        failed = {c["name"]: c for c in evals[-1]["judgement"]["checks"] if c["status"] == "fail"}
        assert evals[-1]["decision"]["action"] == "rollback", [e["decision"] for e in evals]
        checks = {c["name"]: c for c in evals[-1]["judgement"]["checks"]}
        assert {"guardrail:structured_outputs", "guardrail:stalls", "guardrail:acceptance_replay"} <= set(failed), checks.get("guardrail:acceptance_replay")
        assert "2K–4K" in failed["guardrail:acceptance_replay"]["reason"]
        assert "'}'" in failed["guardrail:stalls"]["reason"]
    with ScriptedServer([logged], LAW, speculative_config=SPEC, faults=Faults()) as a, \
            ScriptedServer([logged], LAW, speculative_config=SPEC, faults=Faults()) as a2:
        evals = _canary(a.base_url, a2.base_url, requests, tmp_path / "aa", tmp_path, rounds=1)
        field = [c for e in evals for c in e["judgement"]["checks"]
                 if c["name"] in ("guardrail:structured_outputs", "guardrail:stalls", "guardrail:acceptance_replay")]
        assert field and all(c["status"] == "pass" for c in field), field
