"""Draft-model replay with a real (tiny, random) model: the one teacher-forced pass gives the same
trace as the engine's drafter stepping autoregressively; the probabilistic lower bound is sane."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specgauge.drafters.base import replay_by_stepping  # noqa: E402
from specgauge.drafters.draft_model import DraftModelDrafter  # noqa: E402
from specgauge.testing.engine import make_tiny_model  # noqa: E402
from specgauge.simulate.probabilistic import alpha_lower_bound, expected_tokens_per_step  # noqa: E402
from specgauge.simulate.run import SimulateConfig, simulate, trace_from_matches  # noqa: E402
from specgauge.workload.tokenizer import ApproxTokenizer  # noqa: E402

V = 64


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("draft"), vocab_size=V, hidden=32, layers=1, seed=3)


def test_one_pass_equals_autoregressive_drafting(draft_dir: Path) -> None:
    d = DraftModelDrafter(draft_dir, max_batch=1, max_model_len=256)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, V, 12).tolist()
    # an output that mostly follows the draft's own greedy chain, with a few forced deviations
    out: list[int] = []
    hist = list(prompt)
    for i in range(40):
        nxt = int(d.teacher_forced_argmax(hist[:-1], hist[-1:])[0]) if i % 7 else int(rng.integers(0, V))
        out.append(nxt)
        hist.append(nxt)
    pred = d.teacher_forced_argmax(prompt, out)
    for k in (1, 3, 5):
        fast = trace_from_matches(pred == np.asarray(out), k)
        ref = replay_by_stepping(DraftModelDrafter(draft_dir, max_batch=1, max_model_len=256), "r", prompt, out, k)
        assert fast.drafted.tolist() == ref.drafted.tolist(), k
        assert fast.accepted.tolist() == ref.accepted.tolist(), k
    assert fast.accepted.sum() > 0  # the output was built to be partly predictable


def test_alpha_lower_bound_known() -> None:
    logq = np.log(np.array([[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30]]))
    top = [{0: np.log(0.25), 1: np.log(0.75)}, {2: 0.0}]
    a = alpha_lower_bound(logq, top)
    assert a == pytest.approx([0.25 + 0.25, 0.0], abs=1e-9)
    assert expected_tokens_per_step(0.0, 4) == 1.0 and expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)


def test_simulate_probabilistic_and_vocab_errors(draft_dir: Path, tmp_path: Path) -> None:
    rows = [
        {"request": {"id": "g", "prompt": [1, 2, 3], "temperature": 0}, "response": {"output_token_ids": [4, 5, 6], "prompt_token_ids": [1, 2, 3]}},
        {"request": {"id": "p", "prompt": [1, 2, 3], "temperature": 0.8},
         "response": {"output_token_ids": [4, 5], "prompt_token_ids": [1, 2, 3], "top_logprobs": [{"4": -0.1}, {"5": -0.2, "7": -3.0}]}},
        {"request": {"id": "n", "prompt": [1, 2, 3], "temperature": 0.8}, "response": {"output_token_ids": [4], "prompt_token_ids": [1, 2, 3]}},
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = SimulateConfig(workload=[log], methods=[f"draft_model:{draft_dir}"], ks=[2], draft_sampling="probabilistic")
    r = simulate(cfg, ApproxTokenizer())
    (ps,) = r.probabilistic[""]
    assert ps.requests == 1 and ps.positions == 2 and 0.0 <= (ps.alpha_lower_bound or 0) <= 1.0
    assert any("no target logprobs" in k for k in r.skipped)
    greedy = next(s for s in r.overall.summaries if s.k == 2)
    assert greedy.requests == 1  # only the temperature-0 request is replayed exactly
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"request": {"id": "x", "prompt": [1]}, "response": {"output_token_ids": [V + 5], "prompt_token_ids": [1]}}) + "\n")
    from specgauge.simulate.run import SimulateError

    with pytest.raises(SimulateError, match=r"bad.jsonl:1: request x: --method draft_model:.*outside the draft model's vocabulary"):
        simulate(SimulateConfig(workload=[bad], methods=[f"draft_model:{draft_dir}"], ks=[2]), ApproxTokenizer())
