"""Offline replay: definitions, the one-pass draft-model path against stepping, cost model, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.drafters.base import ReplayTrace, register_drafter, replay_by_stepping
from specgauge.simulate.cost_model import CostProfile, predict_speedup, step_time, theoretical_speedup
from specgauge.simulate.replay import AcceptanceSummary, RequestAcceptance
from specgauge.simulate.run import SimulateConfig, parse_ks, simulate, trace_from_matches
from specgauge.workload.tokenizer import ApproxTokenizer

V = 7


def f(tok: int) -> int:
    """A 'draft model' whose greedy next token depends on the last token only."""
    return (tok * 3 + 1) % V


@register_drafter("test_chain")
class ChainDrafter:
    """Greedy chain drafter: d0 = f(last), d1 = f(d0), … (deterministic, like a greedy draft model)."""

    kind = "test_chain"
    deterministic = True

    def __init__(self, num_speculative_tokens: int = 4) -> None:
        self.k = num_speculative_tokens

    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        out, last = [], history[-1]
        for _ in range(k):
            last = f(last)
            out.append(last)
        return out

    def end(self, request_id: str, output_ids: Sequence[int]) -> None:
        pass


seqs = st.lists(st.integers(0, V - 1), min_size=0, max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, V - 1), min_size=1, max_size=5), seqs, st.integers(1, 9))
def test_one_pass_draft_model_equals_stepping(prompt: list[int], out: list[int], k: int) -> None:
    history = prompt + out
    pred = np.array([f(history[len(prompt) + j - 1]) for j in range(len(out))], dtype=np.int64)
    fast = trace_from_matches(pred == np.array(out, dtype=np.int64), k)
    ref = replay_by_stepping(ChainDrafter(k), "r", prompt, out, k)
    assert fast.drafted.tolist() == ref.drafted.tolist()
    assert fast.accepted.tolist() == ref.accepted.tolist()
    # the prefill emits token 0; the decode steps cover the rest, each emitting accepted + 1 at most
    assert (len(out) > 0) + int((ref.accepted + 1).sum()) >= len(out)
    assert ref.accepted.size == 0 or (len(out) > 0) + int((ref.accepted + 1)[:-1].sum()) < len(out)


def test_request_figures_follow_vllm_definitions() -> None:
    # 4 steps: drafted 3,3,0,3; accepted 3,1,0,0  (the 0-drafted step is a step but not a draft)
    t = ReplayTrace(np.array([3, 3, 0, 3]), np.array([3, 1, 0, 0]))
    r = RequestAcceptance.from_trace(t, "r", "s", "m", 3, output_tokens=8)
    assert (r.steps, r.drafts, r.draft_tokens, r.accepted_tokens) == (4, 3, 9, 4)
    assert r.per_position == [2, 1, 1]
    assert r.acceptance_histogram == [1, 1, 0, 1]
    assert r.acceptance_rate == pytest.approx(4 / 9) and r.mean_acceptance_length == pytest.approx(1 + 4 / 3)
    empty = RequestAcceptance.from_trace(ReplayTrace(np.array([0, 0]), np.array([0, 0])), "e", "s", "m", 3, 2)
    s = AcceptanceSummary.of("m", 3, [r, empty])
    assert s.drafts == 3 and s.acceptance_rate == pytest.approx(4 / 9)
    assert s.per_position_rate == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    # 10 output tokens, 2 of them from the prefills: 8 decode tokens in 6 decode steps
    assert s.tokens_per_step == pytest.approx(8 / 6) and s.draft_share == pytest.approx(3 / 6)
    assert s.request_acceptance_rate.n == 1  # the request with no draft has no rate (NaN), not 0
    none = AcceptanceSummary.of("m", 3, [empty])
    assert none.acceptance_rate is None and none.mean_acceptance_length is None and none.notes


def test_cost_model() -> None:
    free = CostProfile(draft_cost=0.0, step_overhead=0.0, saturation_tokens=64)
    # no drafts: one step per token, no speedup
    assert predict_speedup("ngram", 4, 100, 100, 0, 1, free).predicted_speedup == pytest.approx(1.0)
    # 100 tokens in 25 steps of 4 drafted: memory-bound at B=1 → 4x
    assert predict_speedup("ngram", 4, 100, 25, 100, 1, free).predicted_speedup == pytest.approx(4.0)
    # at B=64 the batch is saturated: verifying 5 tokens per sequence costs 5 steps → below 1x
    assert predict_speedup("ngram", 4, 100, 25, 100, 64, free).predicted_speedup == pytest.approx(4 / 5)
    assert step_time(16, 5, 64) == pytest.approx(80 / 64)
    costly = CostProfile(draft_cost=0.5, step_overhead=0.0)
    assert predict_speedup("draft_model:x", 4, 100, 25, 100, 1, costly).predicted_speedup == pytest.approx(100 / (25 + 50))
    assert CostProfile().c("draft_model:x") == 0.1 and CostProfile().c("ngram") == 0.0
    assert theoretical_speedup(0.0, 4, 0.0) == 1.0 and theoretical_speedup(1.0, 4, 0.0) == 5.0


def test_parse_ks() -> None:
    assert parse_ks("1-4") == [1, 2, 3, 4] and parse_ks("8,2,2") == [2, 8]
    for bad in ("0", "3-1", "x", "1-100"):
        with pytest.raises(ValueError):
            parse_ks(bad)


def _log(tmp: Path) -> Path:
    rows = [
        {"request": {"id": "a", "segment": "copy", "prompt": [1, 2, 3, 4, 5, 6]}, "response": {"output_token_ids": [1, 2, 3, 4, 5, 6], "prompt_token_ids": [1, 2, 3, 4, 5, 6]}},
        {"request": {"id": "b", "segment": "chain", "prompt": [0]}, "response": {"output_token_ids": [1, 4, 6, 5, 2, 0, 1], "prompt_token_ids": [0]}},
        {"request": {"id": "c", "segment": "chain", "prompt": [3]}},
    ]
    p = tmp / "log.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_simulate_library_on_known_log(tmp_path: Path) -> None:
    cfg = SimulateConfig(workload=[_log(tmp_path)], methods=["test_chain"], ks=[2, 4])
    r = simulate(cfg, ApproxTokenizer())
    assert r.requests_replayed == 2 and r.skipped == {"no logged response": 1} and r.exact
    chain = {s.k: s for s in r.segments["chain"].summaries}
    # output 1,4,6,5,2,0,1 follows f exactly from prompt [0]: the prefill emits 1; step 1 keeps all
    # 4 drafts (4,6,5,2) + the bonus 0; step 2 drafts 4 again but only 1 output token remains
    # (a live engine counts all 4 as drafted)
    assert chain[4].steps == 2 and chain[4].draft_tokens == 8 and chain[4].accepted_tokens == 5
    assert chain[4].acceptance_rate == 5 / 8 and chain[4].mean_acceptance_length == 3.5
    copy = {s.k: s for s in r.segments["copy"].summaries}
    assert copy[2].accepted_tokens == sum(
        replay_by_stepping(ChainDrafter(2), "a", [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6], 2).accepted
    )
    assert r.overall.best_k["test_chain"] in (2, 4)


def test_cli_simulate_json_and_errors(tmp_path: Path) -> None:
    log = _log(tmp_path)
    code = "import tests.unit.test_simulate; from specgauge.cli import main; main()"
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, "simulate", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parents[2], timeout=120)
    ok = run(str(log), "--method", "test_chain", "--k", "1-3", "--json", "--csv", str(tmp_path / "o.csv"))
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["ks"] == [1, 2, 3] and data["requests_replayed"] == 2
    assert (tmp_path / "o.csv").read_text().count("\n") == 3 * 3 + 1  # (all) + 2 segments, x 3 k, + header
    bad = run(str(log), "--method", "nosuch")
    assert bad.returncode == 2 and "unknown draft method 'nosuch'" in bad.stderr and "Traceback" not in bad.stderr
    badk = run(str(log), "--k", "0")
    assert badk.returncode == 2 and "--k" in badk.stderr


def test_fit_saturation_recovers_the_model() -> None:
    from specgauge.simulate.calibrate import fit_saturation

    def pts(sat: float) -> list[tuple[int, int, float]]:
        return [(b, n, max(1.0, b * n / sat) / max(1.0, b / sat)) for b in (1, 4, 16) for n in (2, 5, 9)]

    for sat in (8.0, 64.0):
        assert fit_saturation(pts(sat)) == pytest.approx(sat, rel=0.05)
    # beyond the largest tested batch x tokens (16 x 9) the data cannot tell: the fit says "at least that"
    assert fit_saturation(pts(512.0)) >= 144
    # a flat cost (verification free at every size tested) fits a saturation beyond the tested sizes
    assert fit_saturation([(b, n, 1.0) for b in (1, 4) for n in (2, 9)]) >= 36
