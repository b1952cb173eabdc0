"""Hidden-state heads on the embedded engine: greedy replay of the shipped EAGLE-3 and MTP heads equals
the engine's own per-request drafted / accepted counts, step by step, on every request of the shipped
sample workload (240 requests, their logged prompt ids, greedy, outputs capped at MAX_TOKENS), at
concurrency 1 and 4. The engine runs in-process (the real engine, no HTTP: the server's counters come
from these same StepOutputs, tested elsewhere)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from specgauge.config import SpeculativeConfig  # noqa: E402
from specgauge.drafters.base import make_drafter, trace_from_runs  # noqa: E402
from specgauge.engine.core import Engine  # noqa: E402
from specgauge.engine.sampling import SamplingParams  # noqa: E402
from specgauge.models import available, eagle3_dir, heads_available, mtp_dir, target_dir  # noqa: E402
from specgauge.workload.samples import sample_logged_path  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (available() and heads_available()),
                                                  reason="shipped tiny target / heads missing")]

K, MAX_TOKENS = 3, 10


def _prompts() -> list[list[int]]:
    rows = [json.loads(line) for line in sample_logged_path().read_text(encoding="utf-8").splitlines()]
    return [r["response"]["prompt_token_ids"] for r in rows]


def _serve(method: str, head: str, prompts: list[list[int]], batch: int) -> dict[str, tuple[list[int], list[tuple[int, int]]]]:
    """Every prompt through the engine, ``batch`` at a time: output ids and per-step (drafted, accepted)."""
    spec = SpeculativeConfig(method=method, model=head, num_speculative_tokens=K)
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


@pytest.mark.parametrize("method", ["eagle3", "mtp"])
def test_replay_equals_the_engine_on_every_sample_request(method: str) -> None:
    head = str(eagle3_dir() if method == "eagle3" else mtp_dir())
    prompts = _prompts()
    replayer = make_drafter(method, model=head, target=str(target_dir()))
    accepted = 0
    replays: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = {}  # greedy outputs repeat across batch sizes
    for batch in (1, 4):
        live = _serve(method, head, prompts, batch)
        bad = []
        for i, p in enumerate(prompts):
            out, steps = live[f"r{i}"]
            key = (i, tuple(out))
            if key not in replays:
                tr = trace_from_runs(replayer.accept_runs(p, out, K), K)
                replays[key] = list(zip(tr.drafted.tolist(), tr.accepted.tolist(), strict=True))
            ours = replays[key]
            # the engine counts acceptance before clipping at max_tokens, so its last step may accept
            # drafts past the output's end: there the replay is a lower bound; every other step is equal
            same = len(ours) == len(steps) and ours[:-1] == steps[:-1] and (
                not ours or (ours[-1][0] == steps[-1][0] and ours[-1][1] <= steps[-1][1]))
            if not same:
                bad.append((i, ours, steps))
            accepted += sum(a for _, a in steps)
        assert not bad, f"{method} at concurrency {batch}: {len(bad)} requests differ, first: {bad[0]}"
    assert accepted > 0, "no accepted drafts: the comparison would prove nothing"
