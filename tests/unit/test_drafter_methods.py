"""Every drafter the AMD post compares, replayed by ``simulate`` and held to the plain online loop
(``testing/reference_loop.py`` with ``testing/reference_drafts.py``: the target re-run over the whole
history every step, the head drafting from scratch as vLLM 0.32's proposer does) on tiny random models
made by transformers: native MTP of DeepSeek-V3 (MLA + MoE), GLM-4-MoE, Qwen3-Next and MiMo (one layer;
two layers on vLLM's V1 and V2 runners), Gemma 4's assistant, DSpark (both block layouts) and P-EAGLE.
Each head is trained for a few dozen steps on the target's greedy continuations of the test's prompts,
so drafts get accepted; the loop generates, its outputs are logged, and ``simulate --per-request`` and
the replay's per-step counts must equal the loop's, request by request (greedy). The final step is held
to the open-end rule: equal unless every draft matched up to the logged end (then a lower bound).
``simulate`` runs twice: one request per target pass (the default on the CPU) and with the requests'
passes batched (``--replay-batch-tokens 8192``, a GPU's default); their rows must be equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from specgauge.cli import app  # noqa: E402
from specgauge.config import SpeculativeConfig  # noqa: E402
from specgauge.drafters.heads.loader import load_head  # noqa: E402
from specgauge.offline.replay import MethodReplay, MethodSpec  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.testing import reference_drafts as rd  # noqa: E402
from specgauge.testing.reference_loop import generate  # noqa: E402
from specgauge.testing.tiny_families import make_tiny_family  # noqa: E402
from tests import _trained_heads as th  # noqa: E402
from tests._target_batches import forward_rows  # noqa: E402

K, MAX_TOKENS = th.K, 16


def _open_end(steps: list[tuple[int, int]], n_out: int) -> bool:
    emitted = 1 + sum(a + 1 for _, a in steps[:-1])
    return emitted + steps[-1][1] >= n_out


def _simulate(args: list[str], rows: Path) -> dict[str, Any]:
    """``simulate ARGS --per-request ROWS`` in this process -> its rows by request id."""
    res = CliRunner().invoke(app, [*args, "--per-request", str(rows)])
    assert res.exit_code == 0, res.stderr
    return {r["request_id"]: r for r in map(json.loads, rows.read_text().splitlines())}


def _check(tmp: Path, target: TransformersTarget, head: Any, draft: Any, method: str, tdir: Path,
           spec_json: dict[str, Any] | None = None) -> int:
    """Generate with the loop, log, simulate, compare; -> accepted tokens in all."""
    prompts = th.prompts()
    live = [generate(target, head, p, MAX_TOKENS, K, draft=draft) for p in prompts]
    log = tmp / "log.jsonl"
    with log.open("w", encoding="utf-8") as f:
        for i, (p, r) in enumerate(zip(prompts, live, strict=True)):
            f.write(json.dumps({"request": {"id": f"r{i}", "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0.0},
                                "response": {"prompt_token_ids": p, "output_token_ids": r.output_ids,
                                             "finish_reason": "length"}}) + "\n")
    rows = tmp / "rows.jsonl"
    args = ["simulate", str(log), "--target-model", str(tdir), "--device", "cpu", "-k", str(K), "--json"]
    args += ["--speculative-config", json.dumps(spec_json)] if spec_json else ["--method", method]
    with forward_rows() as single:  # one request per target forward (the default on the CPU)
        got = _simulate(args, rows)
    assert single == [1] * len(prompts), single
    with forward_rows() as batched:  # the target passes of several requests in one forward: the same figures
        assert _simulate([*args, "--replay-batch-tokens", "8192"], tmp / "rows_batched.jsonl") == got
    assert max(batched) > 1, batched
    spec = (MethodSpec.parse(method) if not spec_json
            else MethodSpec.from_config(SpeculativeConfig.model_validate(spec_json)))
    spec = spec.model_copy(update={"options": {**spec.options, "target": str(tdir)}})
    replay = MethodReplay(spec, [K])
    for i, (p, r) in enumerate(zip(prompts, live, strict=True)):
        tr = replay.traces(f"r{i}", "log", p, r.output_ids)[K]
        steps = list(zip(tr.drafted.tolist(), tr.accepted.tolist(), strict=True))
        assert len(steps) == len(r.steps) and steps[:-1] == r.steps[:-1], (method, i, steps, r.steps)
        if _open_end(r.steps, len(r.output_ids)):
            assert steps[-1][1] <= r.steps[-1][1]
        else:
            assert steps[-1] == r.steps[-1], (method, i)
        row = got[f"r{i}"]
        assert (row["steps"], row["draft_tokens"], row["accepted_tokens"]) == (
            len(steps), sum(d for d, _ in steps), sum(a for _, a in steps))
    return sum(a for r in live for _, a in r.steps)


@pytest.mark.parametrize("family,n,runner", [
    pytest.param("deepseek_v3", 1, "v2", marks=pytest.mark.slow), ("glm4_moe", 1, "v2"), ("qwen3_next", 1, "v2"), ("mimo", 1, "v2"),
    pytest.param("glm4_moe", 2, "v1", marks=pytest.mark.slow), ("glm4_moe", 2, "v2"),
])
def test_native_mtp_equals_the_loop(family: str, n: int, runner: str, tmp_path: Path) -> None:
    tdir = th.native_mtp(family, tmp_path / family, th.prompts(), MAX_TOKENS, n=n)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(tdir, target)
    draft = rd.multi_module_drafts if runner == "v2" and n > 1 else None
    spec = {"method": "mtp", "model": str(tdir), "num_speculative_tokens": K, "mtp_runner": runner}
    accepted = _check(tmp_path, target, head, draft, f"mtp:{tdir}", tdir, spec_json=spec)
    assert accepted > 0, f"{family}: the trained MTP layer never drafted an accepted token"


def test_gemma4_assistant_equals_the_loop(tmp_path: Path) -> None:
    tdir, adir = th.gemma4_assistant(tmp_path, th.prompts(), MAX_TOKENS)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    assert _check(tmp_path, target, load_head(adir, target), rd.assistant_drafts, f"mtp:{adir}", tdir) > 0


def test_gemma4_assistant_centroid_masked_drafts_equal_the_loop(tmp_path: Path) -> None:
    """use_ordered_embeddings (top-k centroids, then the argmax over their tokens): untrained, so the
    drafts are compared (every first draft of a step), not their acceptance."""
    tdir, adir = th.gemma4_assistant(tmp_path, th.prompts(), MAX_TOKENS, ordered=True, train=False)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(adir, target)
    assert head.assistant.masked_embedding is not None
    _check(tmp_path, target, head, rd.assistant_drafts, f"mtp:{adir}", tdir)


@pytest.mark.parametrize("sample_from_anchor", [True, False])
def test_dspark_equals_the_loop(sample_from_anchor: bool, tmp_path: Path) -> None:
    tdir, hdir = th.dspark(tmp_path, th.prompts(), MAX_TOKENS, sample_from_anchor)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    assert _check(tmp_path, target, load_head(hdir, target), rd.dspark_drafts, f"dspark:{hdir}", tdir) > 0


def test_peagle_equals_the_loop(tmp_path: Path) -> None:
    tdir, hdir = th.peagle(tmp_path, th.prompts(), MAX_TOKENS)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(hdir, target)
    assert _check(tmp_path, target, head, rd.parallel_drafts, f"peagle:{hdir}", tdir) > 0
    # the same head without the flag is EAGLE-3's chain, as vLLM runs it then
    _check(tmp_path, target, head, None, f"eagle3:{hdir}", tdir)


def test_adaptive_verification_bounds_and_server_lengths() -> None:
    import numpy as np

    from specgauge.drafters.dspark import fewest_steps, trace_at_verified

    run = np.array([0, 2, 0, 0, 3, 0, 0, 0, 1, 0])  # output of 10 tokens
    # from 1: take 2 -> 4; take 3 -> 8; take 1 -> 10: 3 steps (one per token would be 9)
    assert fewest_steps(run, 3) == 3
    assert fewest_steps(run, 1) == 6  # 1->3, 3->4, 4->6, 6->7, 7->8, 8->10
    tr = trace_at_verified(run, [1, 0, 3, 2, 0])  # the server verified these lengths
    assert tr.drafted.tolist() == [1, 0, 3, 2] and tr.accepted.tolist() == [1, 0, 3, 1]  # 1->3->4->8->10


def test_simulate_says_where_the_target_does_not_reproduce_the_log(tmp_path: Path) -> None:
    """Issue 43 item 6: a greedy logged output the teacher-forced target does not emit is named per
    request (the first output position that differs) and counted in the summary, and its row is not
    exact; a sampled one is not checked."""
    from specgauge.testing.reference_loop import greedy_outputs

    tdir = make_tiny_family("mimo", tmp_path / "t", with_mtp=True)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    ps = th.prompts()
    good = greedy_outputs(target, ps, 12)
    bad = [o[:4] + [(t + 1) % 320 for t in o[4:]] for o in good]  # from output token 4 on, not the target's
    rows = [(ps[0], good[0], 0.0), (ps[1], bad[1], 0.0), (ps[2], bad[2], 0.8)]
    log = tmp_path / "log.jsonl"
    with log.open("w", encoding="utf-8") as f:
        for i, (p, o, t) in enumerate(rows):
            f.write(json.dumps({"request": {"id": f"r{i}", "prompt": p, "max_tokens": 12, "temperature": t},
                                "response": {"prompt_token_ids": p, "output_token_ids": o}}) + "\n")
    per = tmp_path / "rows.jsonl"
    res = CliRunner().invoke(app, ["simulate", str(log), "--method", f"mtp:{tdir}", "-k", "2", "--device", "cpu",
                                   "--per-request", str(per), "--json"])
    assert res.exit_code == 0, res.stderr
    got = {r["request_id"]: r for r in map(json.loads, per.read_text().splitlines())}
    assert got["r0"]["target_mismatch"] is None and got["r0"]["exact"]
    assert got["r1"]["target_mismatch"] == 4 and not got["r1"]["exact"]
    assert got["r2"]["target_mismatch"] is None  # sampled: its output need not be the argmax
    out = json.loads(res.stdout)
    text = json.dumps(out)
    assert '"target_mismatch_requests": 1' in text and "not what the target as loaded emits" in text
