"""Evidence and verdict from stored samples (synthetic draws with a known answer), and the
resumable sample file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specgauge.audit.analysis import (
    StatsSettings,
    distribution_tests,
    greedy_check,
    judge,
)
from specgauge.audit.client import AuditError, Completion
from specgauge.audit.prompts import AuditPrompt, builtin_prompts, fingerprint
from specgauge.audit.store import SampleStore

PROMPTS = [AuditPrompt(id="a", prompt="x"), AuditPrompt(id="b", prompt="y")]
SETTINGS = {"prompts": "p", "temperature": 0.8, "top_p": 1.0, "positions": 3, "greedy_tokens": 8}
GREEDY = [[1, 2, 3, 4], [5, 6, 7, 8]]


def _dist(shift: float) -> np.ndarray:
    p = 1 / np.arange(1, 31)
    p /= p.sum()
    q = p.copy()
    q[0] -= shift
    q[1] += shift
    return q


def _store(tmp: Path, n: int, shift: float = 0.0, shift_pos: int = 1, greedy_bad: int = 0, control_bad: int = 0,
           rounds: int = 2) -> SampleStore:
    rng = np.random.default_rng(11)
    st = SampleStore(tmp / "samples.jsonl", SETTINGS)
    for i in range(len(PROMPTS)):
        for side in ("reference", "candidate"):
            for _ in range(n):
                toks = []
                for j in range(3):
                    p = _dist(shift if side == "candidate" and i == 1 and j == shift_pos else 0.0)
                    toks.append(int(rng.choice(30, p=p)))
                st.add_sample(side, i, Completion(tokens=toks, finish_reason="length"))
        st.add({"type": "greedy_alone", "side": "reference", "prompt": i, "tokens": GREEDY[i]})
    bad = {"candidate": greedy_bad, "reference": control_bad}
    for side in ("candidate", "reference"):
        k = 0
        for r in range(rounds):
            for i in range(len(PROMPTS)):
                toks = list(GREEDY[i])
                if k < bad[side]:
                    toks[2] = 99
                k += 1
                st.add({"type": "greedy_mixed", "side": side, "round": r, "prompt": i, "tokens": toks})
    return st


def _judge(st: SampleStore, s: StatsSettings, rounds: int = 2):
    tests = distribution_tests(PROMPTS, st, 3, s)
    g = greedy_check(PROMPTS, st, rounds, control=True)
    return tests, g, judge(tests, g, s)


S = StatsSettings(alpha=0.01, detect_tv=0.3)


def test_same_distributions_and_greedy_pass(tmp_path: Path) -> None:
    tests, g, (verdict, reasons) = _judge(_store(tmp_path, 300), S)
    assert verdict == "PASS", reasons
    assert len(tests) == 6 and not any(t.rejected for t in tests)
    assert all(t.detectable_tv <= 0.3 for t in tests)
    assert (g.total, g.mismatches, g.control_total, g.control_mismatches) == (4, 0, 4, 0)
    assert "greedy: 4 of 4 identical" in reasons[-1]


def test_a_shifted_position_fails_and_is_named(tmp_path: Path) -> None:
    tests, _, (verdict, reasons) = _judge(_store(tmp_path, 300, shift=0.2, shift_pos=1), S)
    assert verdict == "FAIL"
    rejected = [(t.prompt, t.position) for t in tests if t.rejected]
    assert rejected == [(1, 1)]
    t = next(t for t in tests if t.rejected)
    assert 0.12 < t.tv < 0.3 and t.p_holm < 0.01 and t.cramers_v > 0
    assert "prompt 1 position 1" in reasons[0] and "Holm-adjusted" in reasons[0]


def test_too_few_samples_is_inconclusive_and_says_how_many(tmp_path: Path) -> None:
    tests, _, (verdict, reasons) = _judge(_store(tmp_path, 40), S)
    assert verdict == "INCONCLUSIVE"
    need = max(t.samples_needed for t in tests)
    assert f"--samples {need}" in reasons[0] and need > 40


def test_greedy_mismatch_fails_with_a_clean_control(tmp_path: Path) -> None:
    _, g, (verdict, reasons) = _judge(_store(tmp_path, 300, greedy_bad=3), S)
    assert verdict == "FAIL" and g.mismatches == 3
    assert "3 of 4 differ" in reasons[0] and "the reference kept 4 of 4" in reasons[0]
    assert g.examples[0].first_divergence == 2 and g.examples[0].got[2] == 99


def test_greedy_mismatch_on_both_sides_is_not_blamed_on_speculation(tmp_path: Path) -> None:
    _, _, (verdict, reasons) = _judge(_store(tmp_path, 300, greedy_bad=2, control_bad=1), S)
    assert verdict == "INCONCLUSIVE"
    assert "not batch-invariant" in reasons[0]


def test_tolerance_allows_mismatches(tmp_path: Path) -> None:
    _, _, (verdict, _) = _judge(_store(tmp_path, 300, greedy_bad=1), StatsSettings(alpha=0.01, detect_tv=0.3,
                                                                                   greedy_tolerance=1))
    assert verdict == "PASS"


# ------------------------------------------------------------------------------ store / resume


def test_store_refuses_to_overwrite_and_checks_settings_on_resume(tmp_path: Path) -> None:
    st = SampleStore(tmp_path / "s.jsonl", SETTINGS)
    st.add_sample("candidate", 0, Completion(tokens=[1, 2], finish_reason="stop"))
    with pytest.raises(AuditError, match="already recorded here; pass --resume"):
        SampleStore(tmp_path / "s.jsonl", SETTINGS)
    with pytest.raises(AuditError, match=r"other settings \(positions, temperature\)"):
        SampleStore(tmp_path / "s.jsonl", {**SETTINGS, "temperature": 1.0, "positions": 4}, resume=True)
    again = SampleStore(tmp_path / "s.jsonl", SETTINGS, resume=True)
    assert again.count("candidate", 0) == 1 and again.samples[("candidate", 0)][0].tokens == [1, 2]


def test_store_skips_a_cut_line_and_appends_after_it(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    st = SampleStore(path, SETTINGS)
    st.add_sample("reference", 1, Completion(tokens=[3], finish_reason="length"))
    with open(path, "a") as f:
        f.write('{"type": "sample", "side": "ref')  # a crash mid-write
    st2 = SampleStore(path, SETTINGS, resume=True)
    assert st2.skipped_lines == 1 and st2.count("reference", 1) == 1
    st2.add_sample("reference", 1, Completion(tokens=[4], finish_reason="length"))
    st3 = SampleStore(path, SETTINGS, resume=True)
    assert [c.tokens for c in st3.samples[("reference", 1)]] == [[3], [4]]
    assert all(json.loads(x) for x in path.read_text().splitlines()[:2])


def test_a_redone_round_replaces_the_partial_one(tmp_path: Path) -> None:
    st = SampleStore(tmp_path / "s.jsonl", SETTINGS)
    st.add({"type": "greedy_mixed", "side": "candidate", "round": 0, "prompt": 1, "tokens": [1]})
    st.add({"type": "greedy_mixed", "side": "candidate", "round": 0, "prompt": 1, "tokens": [2]})
    assert SampleStore(tmp_path / "s.jsonl", SETTINGS, resume=True).greedy_mixed[("candidate", 0, 1)] == [2]


def test_prompt_fingerprint_and_builtins() -> None:
    b = builtin_prompts()
    assert len(b) == 4 and all(p.endpoint == "/v1/completions" for p in b)
    assert fingerprint(b) == fingerprint(builtin_prompts()) != fingerprint(b[:3])
    chat = AuditPrompt(id="c", messages=[{"role": "user", "content": "hi"}])
    assert chat.endpoint == "/v1/chat/completions" and chat.body() == {"messages": [{"role": "user", "content": "hi"}]}
