"""The embedded engine's suffix drafter equals the replay of its own outputs, request by request, also
where requests overlap in time: the calibration runs of ``specgauge demo`` in small (the shipped
target, the shipped sample workload's first requests with their temperatures and seeds, a warm-up then
the requests at concurrency 1, then a warm-up and the same requests at concurrency 4, on one engine as
the sweep serves one config). The replay (``offline.schedule``) is fed only what bench records:
each request's token ids, its per-step counters and the engine schedule in them.

Before the fix a replay of the logged workload saw 38.0 % where the engine counted 28.3 % (warm-ups and
the sampled requests' live outputs entered the engine's cache; overlapping requests interleave)."""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from specgauge.config import SpeculativeConfig  # noqa: E402
from specgauge.engine.core import Engine  # noqa: E402
from specgauge.engine.sampling import SamplingParams  # noqa: E402
from specgauge.models import available, target_dir  # noqa: E402
from specgauge.records import RequestRecord, SpecCounts  # noqa: E402
from specgauge.stats.replay_check import check_run  # noqa: E402
from specgauge.offline.schedule import schedule_traces, scheduled_requests  # noqa: E402
from specgauge.workload.samples import sample_logged_path  # noqa: E402

pytestmark = pytest.mark.skipif(not available(), reason="the shipped tiny models are missing")
K, N, MAX_TOKENS = 4, 10, 48


def _workload() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in sample_logged_path().read_text(encoding="utf-8").splitlines()[:N]]
    return [{"id": r["request"]["id"], "prompt": r["response"]["prompt_token_ids"],
             "params": SamplingParams(max_tokens=min(MAX_TOKENS, r["request"].get("max_tokens") or MAX_TOKENS),
                                      temperature=r["request"].get("temperature") or 0.0, seed=r["request"].get("seed"))}
            for r in rows]


def _serve(engine: Engine, reqs: list[dict[str, Any]], concurrency: int, tag: str) -> list[dict[str, Any]]:
    """Send ``reqs`` keeping ``concurrency`` in flight (as bench's closed loop); what bench records of each."""
    todo, live, done = list(reqs), {}, []
    outs: dict[str, list[int]] = {}
    while todo or live:
        while todo and len(live) < concurrency:
            r = todo.pop(0)
            rid = f"{tag}-{r['id']}"
            engine.add_request(rid, r["prompt"], r["params"])
            live[rid], outs[rid] = r, []
        for o in engine.step():
            outs[o.request_id] += o.new_token_ids
            if o.finished:
                r = live.pop(o.request_id)
                sd = o.spec.to_vllm(detailed=True)
                done.append({"id": r["id"], "ok": True, "prompt_token_ids": r["prompt"], "output_token_ids": outs[o.request_id],
                             "metrics": {"speculative_decoding": sd}})
    return done


def _record(i: int, w: dict[str, Any], sent: float) -> RequestRecord:
    sd = w["metrics"]["speculative_decoding"]
    spec = SpecCounts(drafts=sd["num_spec_steps"], draft_tokens=sd["num_draft_tokens"],
                      accepted_tokens=sd["num_accepted_draft_tokens"])
    return RequestRecord(id=w["id"], index=i, scheduled_s=sent, sent_s=sent, started_at=sent, ok=True, elapsed_s=10.0,  # overlap
                         prompt_tokens=len(w["prompt_token_ids"]), output_tokens=len(w["output_token_ids"]), spec=spec,
                         extra={k: w[k] for k in ("prompt_token_ids", "output_token_ids", "metrics")})


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    spec = SpeculativeConfig.model_validate({"method": "suffix", "num_speculative_tokens": K})
    engine = Engine(target_dir(), spec, max_batch=4, max_model_len=1024)
    reqs = _workload()
    out = {}
    for c in (1, 4):  # one server, as the sweep runs one config: each run a warm-up (request 0) first
        warm = [{**w, "id": f"warmup-{0}"} for w in _serve(engine, reqs[:1], 1, f"w{c}")]
        out[c] = (warm, _serve(engine, reqs, c, f"c{c}"))
    return out


def test_the_engine_drafts_what_the_replay_of_its_records_drafts_at_concurrency_1_and_4(runs: Any) -> None:
    allrecs = [_record(i, w, float(i)) for c in (1, 4) for i, w in enumerate(runs[c][1])]
    warmups = [w for c in (1, 4) for w in runs[c][0]]
    sched, why = scheduled_requests(allrecs, warmups)
    assert sched is not None, why
    traces = schedule_traces(sched, {}, K, 1024)
    assert traces is not None
    served = {w["metrics"]["speculative_decoding"]["specgauge_admitted"]: w for c in (1, 4) for w in runs[c][0] + runs[c][1]}
    assert sorted(served) == list(range(2 * (N + 1)))
    for s in sched:  # every request, greedy and sampled: the same drafts and accepted tokens at every step
        t, sd = traces[s.admitted], served[s.admitted]["metrics"]["speculative_decoding"]
        ours = [(int(d), int(a)) for d, a in zip(t.drafted, t.accepted) if d > 0]
        assert ours == list(zip(sd["per_step_drafted"], sd["per_step_accepted"])), s.id
    assert sum(int(t.accepted.sum()) for t in traces.values()) > 0  # it drafted and accepted
    spans = [(s.prefill_step, s.prefill_step + len(traces[s.admitted].drafted)) for s in sched]
    overlapping = sum(any(b0 < a1 and a0 < b1 for j, (b0, b1) in enumerate(spans) if j != i) for i, (a0, a1) in enumerate(spans))
    assert overlapping >= N  # the concurrency-4 run really interleaved requests in the cache


def test_bench_check_replays_a_run_exactly_from_its_records_and_warmups(runs: Any) -> None:
    warm, recs = runs[1]
    res = check_run([_record(i, w, float(i)) for i, w in enumerate(recs)], {"method": "suffix", "num_speculative_tokens": K},
                    "test", 1024, warm)
    assert (res.matching, res.gaps, res.uncertain) == (N, 0, 0), res.rows
    # the concurrency-4 run alone: the server admitted the first run's requests before it, unknown to this check
    warm4, recs4 = runs[4]
    res4 = check_run([_record(i, w, float(i)) for i, w in enumerate(recs4)], {"method": "suffix", "num_speculative_tokens": K},
                     "test", 1024, warm4)
    assert res4.gaps == 0 and res4.uncertain == N
    assert any("do not hold" in n for n in res4.notes)
    # without its warm-up the check does not claim the rows: the server admitted a request it does not know
    res0 = check_run([_record(i, w, float(i)) for i, w in enumerate(recs)], {"method": "suffix", "num_speculative_tokens": K},
                     "test", 1024)
    assert res0.matching < N


def test_calibrations_check_finds_the_engine_doing_what_its_config_says(runs: Any) -> None:
    """The check calibration runs on each suffix run (``predict.fit``): every request identical, none of the
    greedy ones differing (before: '9 greedy request(s) drafted or came out differently than replayed')."""
    from specgauge.predict.fit_traces import engine_order_traces as _engine_order_traces
    from specgauge.predict.runs import RunData
    from specgauge.predict.replay import WorkloadReplay
    from specgauge.predict.types import CellSpec

    spec = {"method": "suffix", "num_speculative_tokens": K}
    rds = [RunData(f"c{c}", CellSpec(label=f"suffix-k{K}", speculative_config=spec, concurrency=c), "suffix", K,
                   [_record(i, w, float(i)) for i, w in enumerate(runs[c][1])], {"warmups": runs[c][0], "server": {}})
           for c in (1, 4)]
    replay = WorkloadReplay([sample_logged_path()], None, N)
    for rd in rds:
        got = _engine_order_traces(replay, rd, rds)
        assert got is not None
        chk = got[1]
        assert (chk["identical_requests"], chk["greedy_differ"], chk.get("gap")) == (N, 0, 0.0), chk
    assert got[1]["earlier_runs_on_this_server"] == 1  # the concurrency-4 run came second on the same server
