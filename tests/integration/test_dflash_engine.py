"""The shipped DFlash head on the embedded engine: greedy replay equals the engine's own per-request,
per-step drafted / accepted counts on every request of the shipped sample workload (240 requests, their
logged prompt ids, greedy, outputs capped at MAX_TOKENS), at concurrency 1 and 4, and the outputs are
the target's own (lossless); then the real server (uvicorn on a loopback port, real HTTP) serves
``{"method": "dflash", ...}`` and its vLLM-named ``/metrics`` counters equal the replay's."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from specgauge.config import SpeculativeConfig  # noqa: E402
from specgauge.drafters.base import make_drafter, trace_from_runs  # noqa: E402
from specgauge.engine.core import Engine  # noqa: E402
from specgauge.engine.sampling import SamplingParams  # noqa: E402
from specgauge.models import available, dflash_available, dflash_dir, target_dir  # noqa: E402
from specgauge.workload.samples import sample_logged_path  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (available() and dflash_available()),
                                                  reason="shipped tiny target / DFlash head missing")]

K, MAX_TOKENS = 4, 10


def _rows() -> list[dict]:
    return [json.loads(line) for line in sample_logged_path().read_text(encoding="utf-8").splitlines()]


def _serve(prompts: list[list[int]], batch: int) -> dict[str, tuple[list[int], list[tuple[int, int]]]]:
    """Every prompt through the engine, ``batch`` at a time: output ids and per-step (drafted, accepted)."""
    spec = SpeculativeConfig(method="dflash", model=str(dflash_dir()), num_speculative_tokens=K)
    eng = Engine(target_dir(), spec, max_batch=batch, max_model_len=2048)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    res: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
    for i, p in enumerate(prompts):
        eng.add_request(f"r{i}", p, params)
        res[f"r{i}"] = ([], [])
    peak = 0
    while eng.has_unfinished():
        outs = eng.step()
        peak = max(peak, eng.num_running + sum(o.finished for o in outs))
        for o in outs:
            res[o.request_id][0].extend(o.new_token_ids)
            if o.num_prompt_tokens and o.num_output_tokens > len(o.new_token_ids):  # a decode step, not the prefill
                res[o.request_id][1].append((o.num_drafted, o.num_accepted))
    assert peak == batch
    return res


def test_replay_equals_the_engine_on_every_sample_request() -> None:
    rows = _rows()
    prompts = [r["response"]["prompt_token_ids"] for r in rows]
    replayer = make_drafter("dflash", model=str(dflash_dir()))  # the target from the head's config
    accepted = 0
    replays: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}  # greedy outputs repeat across batch sizes
    for batch in (1, 4):
        live = _serve(prompts, batch)
        bad, changed = [], []
        for i, p in enumerate(prompts):
            out, steps = live[f"r{i}"]
            if rows[i]["request"].get("temperature") == 0.0 and out != rows[i]["response"]["output_token_ids"][:MAX_TOKENS]:
                changed.append(i)  # the target alone logged these greedy outputs: speculation must not change them
            key = (i, tuple(out))
            if key not in replays:
                tr = replayer.replay(f"r{i}", p, out, K)
                replays[key] = list(zip(tr.drafted.tolist(), tr.accepted.tolist(), strict=True))
            ours = replays[key]
            # the engine counts acceptance before clipping at max_tokens, so its last step may accept
            # drafts past the output's end: there the replay is a lower bound; every other step is equal
            same = len(ours) == len(steps) and ours[:-1] == steps[:-1] and (
                not ours or (ours[-1][0] == steps[-1][0] and ours[-1][1] <= steps[-1][1]))
            if not same:
                bad.append((i, ours, steps))
            accepted += sum(a for _, a in steps)
        assert not bad, f"dflash at concurrency {batch}: {len(bad)} requests differ, first: {bad[0]}"
        assert not changed, f"dflash at concurrency {batch} changed greedy outputs of requests {changed[:5]}"
    assert accepted > 0, "no accepted drafts: the comparison would prove nothing"


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine")))
            out[(s.name, labels)] = s.value
    return out


def test_the_server_serves_dflash_and_its_counters_equal_the_replay() -> None:
    from specgauge.engine.serve import build_app
    from tests.integration._http import post_json, serve_in_thread

    rows = [r for r in _rows() if r["request"].get("temperature") == 0.0][:4]
    spec = json.dumps({"method": "dflash", "model": str(dflash_dir()), "num_speculative_tokens": K})
    app = build_app(target_dir(), spec, max_batch=4, max_model_len=2048, served_model_name="tiny",
                    per_request_spec_decode_metrics="detailed")
    replayer = make_drafter("dflash", model=str(dflash_dir()))
    with serve_in_thread(app) as url:
        before = _scrape(url)
        resps = [post_json(url + "/v1/completions", {
            "model": "tiny", "prompt": r["response"]["prompt_token_ids"], "max_tokens": 24, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}) for r in rows]
        after = _scrape(url)
        sampled = post_json(url + "/v1/completions", {"model": "tiny", "prompt": rows[0]["response"]["prompt_token_ids"],
                                                       "max_tokens": 8, "temperature": 0.8, "seed": 3})
    assert sampled["usage"]["completion_tokens"] == 8  # a sampled request verifies its blocks by rejection sampling

    def d(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    specs = [r["metrics"]["speculative_decoding"] for r in resps]
    for r, resp, s in zip(rows, resps, specs, strict=True):
        out = resp["choices"][0]["token_ids"]
        tr = replayer.replay("r", r["response"]["prompt_token_ids"], out, K)
        assert s["per_step_drafted"] == tr.drafted.tolist()
        live, ours = s["per_step_accepted"], tr.accepted.tolist()
        assert live[:-1] == ours[:-1] and live[-1] >= ours[-1]  # the last step may accept past max_tokens (vLLM counts so)
    assert d("vllm:spec_decode_num_drafts_total") == sum(s["num_spec_steps"] for s in specs) > 0
    assert d("vllm:spec_decode_num_draft_tokens_total") == sum(s["num_draft_tokens"] for s in specs)
    assert d("vllm:spec_decode_num_accepted_tokens_total") == sum(s["num_accepted_draft_tokens"] for s in specs) > 0
    for pos in range(K):
        want = sum(sum(1 for a in s["per_step_accepted"] if a > pos) for s in specs)
        assert d("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(pos)) == want
