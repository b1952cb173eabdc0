"""The replay-vs-live check and the diagnosis, on hand-made bench records (no server).

Server counts are made by replaying the same outputs (what a correct server reports), then changed
the ways broken servers differ: fewer accepted tokens, other draft counts, more accepted than the
final-step bound allows. Real servers: ``tests/integration/test_replay_check_*.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from specgauge.drafters.ngram import NgramDrafter
from specgauge.records import RequestRecord, SpecCounts
from specgauge.stats.diagnosis import diagnose
from specgauge.stats.equivalence import check_equivalence
from specgauge.stats.replay_check import (
    check_bench_run,
    check_run,
    check_totals,
    final_bound,
    speculative_config_of_server,
)

K = 4
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
PHRASE = [11, 12, 13, 14, 15, 16, 17, 18]


def _steps(prompt: list[int], out: list[int]) -> list[tuple[int, int]]:
    t = NgramDrafter(num_speculative_tokens=K, prompt_lookup_min=2, prompt_lookup_max=4).replay("x", prompt, out, K)
    return [(int(d), int(a)) for d, a in zip(t.drafted, t.accepted) if d > 0]


def _rec(i: int, prompt: list[int], out: list[int], steps: list[tuple[int, int]] | None = None,
         detailed: bool = True, ids: bool = True, sent: float | None = None, text: str = "") -> RequestRecord:
    steps = _steps(prompt, out) if steps is None else steps
    spec = SpecCounts(drafts=len(steps), draft_tokens=sum(d for d, _ in steps), accepted_tokens=sum(a for _, a in steps),
                      source="vllm:per-request")
    extra: dict[str, Any] = {}
    if ids:
        extra.update(prompt_token_ids=prompt, output_token_ids=out)
    if detailed:
        extra["metrics"] = {"speculative_decoding": {"per_step_drafted": [d for d, _ in steps],
                                                     "per_step_accepted": [a for _, a in steps]}}
    s = 10.0 * i if sent is None else sent
    return RequestRecord(id=f"r{i}", index=i, scheduled_s=s, sent_s=s, started_at=s, ok=True, elapsed_s=1.0,
                         spec=spec, extra=extra, text=text or " ".join(map(str, out)))


def _workload() -> list[tuple[list[int], list[int]]]:
    return [
        (PHRASE * 2 + [90], PHRASE[:6] + [91, 92]),  # copies the phrase, then leaves it
        ([1, 2, 3, 1, 2, 3, 1, 2], [3, 1, 2, 3, 1, 2, 3]),
        ([40, 41, 42, 43], [50, 51, 52]),  # nothing to copy: no drafts
    ]


def test_a_correct_server_matches_its_replay() -> None:
    recs = [_rec(i, p, o) for i, (p, o) in enumerate(_workload())]
    r = check_run(recs, NGRAM, "test")
    assert r.available and not r.gap and r.gaps == 0
    assert r.matching == r.requests == 3
    assert r.replay == r.server and r.server.draft_tokens > 0
    assert r.replay_acceptance_rate == r.server_acceptance_rate


def test_fewer_accepted_than_the_outputs_allow_is_a_gap() -> None:
    p, o = _workload()[0]
    good = _steps(p, o)
    bad = [(d, 0) for d, _ in good]  # same drafts, nothing accepted: the verifier rejects what it then emits
    r = check_run([_rec(0, p, o, bad), _rec(1, *_workload()[1])], NGRAM, "test")
    assert r.gap and r.gaps == 1 and r.gap_ids == ["r0"]
    assert r.server_acceptance_rate < r.replay_acceptance_rate
    assert "falls short" in (r.gap_summary or "") and r.rows[0].detail.startswith("step 0")


def test_final_step_may_accept_past_the_output_but_no_more_than_its_draft() -> None:
    prompt, out = PHRASE * 2, PHRASE[:3]  # the final step's draft runs past the cut
    steps = _steps(prompt, out)
    t = NgramDrafter(num_speculative_tokens=K, prompt_lookup_min=2, prompt_lookup_max=4).replay("x", prompt, out, K)
    bound = final_bound(t, len(out))
    assert bound > 0
    within = steps[:-1] + [(steps[-1][0], steps[-1][1] + bound)]
    beyond = steps[:-1] + [(steps[-1][0], steps[-1][1] + bound + 1)]
    assert check_run([_rec(0, prompt, out, within)], NGRAM, "t").matching == 1
    assert check_run([_rec(0, prompt, out, beyond)], NGRAM, "t").gap
    # the same rules on totals only (vLLM --per-request-spec-decode-metrics summary)
    assert check_run([_rec(0, prompt, out, within, detailed=False)], NGRAM, "t").matching == 1
    assert check_run([_rec(0, prompt, out, beyond, detailed=False)], NGRAM, "t").gap


def test_other_draft_counts_are_a_gap() -> None:
    p, o = _workload()[1]
    steps = _steps(p, o)
    other = [(d - 1 if d > 1 else d, min(a, d - 1 if d > 1 else d)) for d, a in steps]
    assert check_run([_rec(0, p, o, other)], NGRAM, "t").gap


@pytest.mark.parametrize("spec, ids, why", [
    (None, True, "speculative config is unknown"),
    ({"method": "eagle", "model": "x", "num_speculative_tokens": 3}, True, "hidden states"),
    ({"model": "/no/such/draft", "num_speculative_tokens": 3}, True, "not a directory"),
    (NGRAM, False, "no token ids"),
    ({**NGRAM, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0}, True, "set rate"),
])
def test_says_why_it_cannot_check(spec: dict | None, ids: bool, why: str) -> None:
    r = check_run([_rec(0, *_workload()[0], ids=ids)], spec, "t")
    assert not r.available and why in (r.reason or "")


def test_without_per_request_counts_the_counters_are_compared() -> None:
    recs = [_rec(i, p, o) for i, (p, o) in enumerate(_workload())]
    for r in recs:
        r.spec = None
        r.extra.pop("metrics")
    res = check_run(recs, NGRAM, "t")
    assert res.no_server_counts == 3 and not res.gap
    total = [s for p, o in _workload() for s in _steps(p, o)]
    ok = SpecCounts(drafts=len(total), draft_tokens=sum(d for d, _ in total), accepted_tokens=sum(a for _, a in total))
    check_totals(res, ok)
    assert not res.gap and res.server.draft_tokens == ok.draft_tokens
    res2 = check_run(recs, NGRAM, "t")
    check_totals(res2, ok.model_copy(update={"accepted_tokens": ok.accepted_tokens - 2}))
    assert res2.gap and "counters" in (res2.gap_summary or "")


def test_suffix_requests_that_overlapped_are_uncertain_never_a_gap() -> None:
    spec = {"method": "suffix", "num_speculative_tokens": K}
    data = _workload()[:2]
    seq = [_rec(i, p, o, steps=[(1, 0)], detailed=True) for i, (p, o) in enumerate(data)]  # wrong on purpose
    assert check_run(seq, spec, "t").gap  # in sequence the replay is exact, so this is a gap
    over = [_rec(i, p, o, steps=[(1, 0)], sent=0.5 * i) for i, (p, o) in enumerate(data)]  # overlapping in time
    r = check_run(over, spec, "t")
    assert not r.gap and r.uncertain == 2 and any("overlapped" in n for n in r.notes)


def test_the_config_comes_from_the_flag_or_the_server_card() -> None:
    server = {"/v1/models": {"data": [{"id": "tiny", "max_model_len": 2048, "speculative_config": NGRAM}]}}
    assert speculative_config_of_server(server) == NGRAM
    recs = [_rec(0, *_workload()[0])]
    assert check_bench_run(recs, None, server).config_source == "the server's /v1/models card"
    assert check_bench_run(recs, None, {"/v1/models": {"data": [{"id": "x"}]}}).available is False


def _summary(check: Any) -> dict[str, Any]:
    return {"specgauge": {"replay_check": check.model_dump(mode="json")}}


def test_diagnosis_names_the_failed_part() -> None:
    data = _workload()
    base = [_rec(i, p, o) for i, (p, o) in enumerate(data)]
    changed = [_rec(i, p, o[:-1] + [99]) for i, (p, o) in enumerate(data)]
    same = [_rec(i, p, o) for i, (p, o) in enumerate(data)]
    temps = {r.id: 0.0 for r in base}

    def eq(c: list[RequestRecord]) -> Any:
        return check_equivalence(list(zip(base, c)), temps, None, "t", None, 200, 0)

    ok_check = check_run(same, NGRAM, "t")
    gap_check = check_run([_rec(0, *data[0], [(d, 0) for d, _ in _steps(*data[0])])], NGRAM, "t")
    d = diagnose(eq(changed), _summary(ok_check), 4)
    assert d.failed == ["target"] and "outputs changed under speculation" in d.cause
    assert "did not also lose acceptance" in d.cause and "concurrency 4" in d.cause
    d = diagnose(eq(changed), _summary(gap_check), 4)
    assert d.failed == ["target", "drafter"] and "lost acceptance on its own outputs" in d.cause
    d = diagnose(eq(same), _summary(gap_check))
    assert d.failed == ["drafter"]
    d = diagnose(eq(same), _summary(ok_check))
    assert d.failed == [] and d.cause.startswith("no failure found")
    d = diagnose(eq(changed), {"specgauge": {}})
    assert d.failed == ["target"] and "unknown" in d.cause


def test_compare_gives_no_go_ahead_while_the_drafter_fails_and_names_the_cause(tmp_path) -> None:
    """A candidate twice as fast with unchanged outputs is GO, unless its replay check found a gap."""
    import json

    from specgauge.report.runs import CompareRequest, compare_paths
    from tests.unit.test_compare import _write_run, run

    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"q{i}", "temperature": 0}) + "\n" for i in range(30)))
    cfg = {"config": {"workload": [str(wl)], "max_concurrency": 4}}
    base = _write_run(tmp_path / "a", run(n=30), cfg)
    verdicts = {}
    for name, check in (("ok", check_run([_rec(0, *_workload()[0])], NGRAM, "t")),
                        ("gap", check_run([_rec(0, *_workload()[0], [(d, 0) for d, _ in _steps(*_workload()[0])])], NGRAM, "t"))):
        cand = _write_run(tmp_path / name, run(n=30, scale=0.5), cfg)
        (cand / "summary.json").write_text(json.dumps(_summary(check)))
        res = compare_paths(CompareRequest(baseline=base, candidate=cand))
        verdicts[name] = res
    assert verdicts["ok"].verdict.overall.verdict.value == "GO"
    assert any(n.startswith("diagnosis: no failure found") for n in verdicts["ok"].notes)
    bad = verdicts["gap"].verdict.overall
    assert bad.verdict.value == "INCONCLUSIVE" and verdicts["gap"].verdict.exit_code == 3
    assert "replay check" in bad.reasons[0] and bad.reasons[-1].startswith("cause: the drafter failed at concurrency 4")


def test_a_replay_that_cannot_run_says_so_instead_of_failing_the_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    r = check_run([_rec(0, [1, 2, 3], [4, 5])], {"method": "suffix", "num_speculative_tokens": 0}, "t")
    assert not r.available and "not understood" in (r.reason or "")
    from specgauge.offline.live import LiveReplayer

    def boom(*a: Any, **k: Any) -> None:
        raise ValueError("token id 5000 is outside the draft model's vocabulary")

    monkeypatch.setattr(LiveReplayer, "trace", boom)
    r = check_run([_rec(0, *_workload()[0])], NGRAM, "t")
    assert not r.available and "r0: the ngram replay failed: token id 5000" in (r.reason or "")


def test_bench_cli_takes_the_config_and_says_why_the_check_did_not_run(tmp_path) -> None:
    """Through the CLI against the scripted server (no token ids there): the stated config is kept
    in run.json/summary.json, the check says why it did not run; bad JSON is one line, exit 2."""
    import json
    import subprocess
    import sys

    from specgauge.testing.fakeserver import FakeServer

    w = tmp_path / "w.txt"
    w.write_text("tokens:12 per:3\ntokens:8 per:2\n")
    base = [sys.executable, "-m", "specgauge", "bench", "-w", str(w)]
    with FakeServer() as srv:
        r = subprocess.run([*base, "--base-url", srv.base_url, "-o", str(tmp_path / "o"), "--speculative-config", json.dumps(NGRAM)],
                           capture_output=True, text=True, timeout=120, check=False)
        bad = subprocess.run([*base, "--base-url", srv.base_url, "-o", str(tmp_path / "b"), "--speculative-config", '{"method":'],
                             capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    rc = s["specgauge"]["replay_check"]
    assert not rc["available"] and "no token ids" in rc["reason"] and rc["config_source"] == "bench --speculative-config"
    assert json.loads((tmp_path / "o" / "run.json").read_text())["config"]["speculative_config"]["prompt_lookup_min"] == 2
    assert bad.returncode == 2 and "--speculative-config: not valid JSON" in bad.stderr and "Traceback" not in bad.stderr
