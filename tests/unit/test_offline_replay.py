"""The one offline replay (``specgauge.offline``): a workload read, tokenised and replayed once per
``simulate --cost-profile``; a whole-output drafter (the contract hidden-state heads implement) flowing
through simulate and the predictor with no special case; ``Drafter.stateful``; one ``~rN`` plan."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from specgauge.drafters.base import (
    is_stateful,
    offers_whole_output,
    register_drafter,
    replay_by_stepping,
    runs_from_matches,
    trace_from_runs,
)
from specgauge.offline import replay as offline
from specgauge.offline.replay import MethodSpec, ReplayError
from specgauge.predict import StepCostProfile
from specgauge.predict.profile import MeasuredRange
from specgauge.predict.replay import WorkloadReplay
from specgauge.simulate.run import SimulateConfig, simulate
from specgauge.workload import loaders
from specgauge.workload.plan import plan_cycle
from specgauge.workload.schema import Request
from specgauge.workload.tokenizer import ApproxTokenizer
from tests.unit.test_simulate import V, ChainDrafter, f


@register_drafter("test_whole_chain")
class WholeChainDrafter(ChainDrafter):
    """test_simulate's greedy chain drafter (d0 = f(last), d1 = f(d0), ...) that also offers the
    whole-output replay: ``accept_runs`` from its per-position argmax, as a draft model or a
    hidden-state head does."""

    kind = "test_whole_chain"
    stateful = False
    passes = 0

    def accept_runs(self, prompt_ids: Sequence[int], output_ids: Sequence[int], kmax: int) -> np.ndarray:
        WholeChainDrafter.passes += 1
        hist = list(prompt_ids) + list(output_ids)
        pred = np.asarray([f(hist[len(prompt_ids) + j - 1]) for j in range(len(output_ids))], dtype=np.int64)
        return np.minimum(runs_from_matches(pred == np.asarray(output_ids, dtype=np.int64)), kmax)


def _log(tmp: Path, n: int = 6) -> Path:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        prompt = [int(x) for x in rng.integers(0, V, 4)]
        out, last = [], prompt[-1]
        for j in range(int(rng.integers(5, 20))):
            last = f(last) if j % 4 else int(rng.integers(0, V))
            out.append(last)
        rows.append({"request": {"id": f"r{i}", "segment": "ab"[i % 2], "prompt": prompt, "temperature": 0},
                     "response": {"prompt_token_ids": prompt, "output_token_ids": out}})
    rows.append({"request": {"id": "none", "segment": "a", "prompt": [1]}})
    p = tmp / "log.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _profile(tmp: Path) -> Path:
    names = ["a", "r", "b", "c", "p", "q", "host[ngram]", "host[suffix]", "ell"]
    vals = [0.004, 0.001, 0.0005, 0.0, 1e-5, 0.001, 0.0002, 0.0003, 0.002]
    prof = StepCostProfile(params=dict(zip(names, vals, strict=True)), param_names=names,
                           bootstrap=[[v * s for v in vals] for s in (0.9, 1.0, 1.1)],
                           measured=MeasuredRange(max_tokens_per_forward=100, max_batch=8))
    return prof.save(tmp / "cost_profile.json")


def test_whole_output_drafter_equals_stepping_through_every_path(tmp_path: Path) -> None:
    """The contract H22's hidden-state heads implement: simulate and the predictor take every k from
    one ``accept_runs`` pass per request, equal to the engine loop (``replay_by_stepping``)."""
    assert offers_whole_output("test_whole_chain") and not is_stateful("test_whole_chain")
    log = _log(tmp_path)
    WholeChainDrafter.passes = 0
    res = simulate(SimulateConfig(workload=[log], methods=["test_whole_chain"], ks=[1, 3, 5]), ApproxTokenizer())
    assert WholeChainDrafter.passes == 6  # one pass per replayed request for all three k
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    for k in (1, 3, 5):
        acc = sum(int(replay_by_stepping(WholeChainDrafter(k), r["request"]["id"], r["response"]["prompt_token_ids"],
                                         r["response"]["output_token_ids"], k).accepted.sum()) for r in rows if "response" in r)
        assert next(s for s in res.overall.summaries if s.k == k).accepted_tokens == acc
    rp = WorkloadReplay([log], num_prompts=8)  # cycled: r0~r1, r1~r1 replay as their originals
    plans = rp.by_id({"method": "test_whole_chain", "num_speculative_tokens": 3})
    for r in rows[:2]:
        ref = replay_by_stepping(WholeChainDrafter(3), "x", r["response"]["prompt_token_ids"], r["response"]["output_token_ids"], 3)
        for pid in (r["request"]["id"], r["request"]["id"] + "~r1"):
            assert plans[pid].accepted.tolist() == ref.accepted.tolist() and plans[pid].drafted.tolist() == ref.drafted.tolist()


def test_cost_profile_reads_and_replays_the_workload_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate --cost-profile`` with segments: one read of the file, one tokenisation and one replay
    per request and method; the calibrated predictions come from that same pass."""
    log, prof = _log(tmp_path), _profile(tmp_path)
    reads, tokenised, replays = [], [], []
    real_iter, real_req, real_traces = loaders._iter_file, offline.replayed_request, offline.MethodReplay.traces

    def count_iter(files, *a, **kw):  # type: ignore[no-untyped-def]
        reads.extend(f.path for f in files)  # the opened files of one read (one, or a joined importer's)
        return real_iter(files, *a, **kw)

    def count_req(item, *a, **kw):  # type: ignore[no-untyped-def]
        tokenised.append(item.request.id)
        return real_req(item, *a, **kw)

    def count_traces(self, rid, *a, **kw):  # type: ignore[no-untyped-def]
        replays.append((self.spec.label, rid))
        return real_traces(self, rid, *a, **kw)

    monkeypatch.setattr(loaders, "_iter_file", count_iter)
    monkeypatch.setattr("specgauge.simulate.run.replayed_request", count_req)
    monkeypatch.setattr(offline.MethodReplay, "traces", count_traces)
    cfg = SimulateConfig(workload=[log], methods=["ngram", "suffix"], ks=[2, 4], batch_sizes=[1, 4], cost_profile=prof)
    res = simulate(cfg, ApproxTokenizer())
    assert reads == [log]
    assert sorted(tokenised) == sorted([f"r{i}" for i in range(6)] + ["none"])
    assert sorted(replays) == sorted((m, f"r{i}") for m in ("ngram", "suffix") for i in range(6))
    assert set(res.segments) == {"a", "b"}
    for seg in (res.overall, *res.segments.values()):
        assert len(seg.predictions) == 8 and all(p.source == "calibrated step-cost law" for p in seg.predictions)
        assert all(p.low is not None and p.high is not None for p in seg.predictions)
    # the skipped request is named in segment a's prediction notes, as the planner words it
    assert all("1 request(s) without a logged output" in (p.note or "") for p in res.segments["a"].predictions)
    assert not any("without a logged output" in (p.note or "") for p in res.segments["b"].predictions)


def test_stateful_replaces_the_kind_lists() -> None:
    assert not is_stateful("ngram") and not is_stateful("draft_model") and is_stateful("suffix")
    assert is_stateful("no_such_kind")  # a drafter that does not say is replayed in arrival order
    assert offers_whole_output("draft_model") and not offers_whole_output("ngram")


def test_method_spec_kind_dir(tmp_path: Path) -> None:
    """``KIND:DIR`` for any kind that loads weights (vLLM's method + model); the directory must exist."""
    m = MethodSpec.parse(f"eagle3:{tmp_path}")
    assert (m.kind, m.label, m.options) == ("eagle3", f"eagle3:{tmp_path.name}", {"model": str(tmp_path)})
    with pytest.raises(ReplayError, match="no such directory"):
        MethodSpec.parse(f"eagle3:{tmp_path / 'nope'}")
    with pytest.raises(ReplayError, match="needs its directory"):
        MethodSpec.parse("draft_model")
    assert MethodSpec.parse("ngram").drafter_options(3) == {"num_speculative_tokens": 3, "prompt_lookup_min": 5,
                                                              "prompt_lookup_max": 5}


def test_one_request_plan_for_bench_and_the_predictor(tmp_path: Path) -> None:
    from specgauge.bench import plan_requests

    reqs = [Request(id=f"q{i}", api="completion", prompt=[1, 2]) for i in range(3)]
    ids = [r.id for r in plan_requests(reqs, 7)]
    assert ids == ["q0", "q1", "q2", "q0~r1", "q1~r1", "q2~r1", "q0~r2"]
    assert plan_cycle([], 5, lambda x, i: x, str) == []
    log = _log(tmp_path)
    rp = WorkloadReplay([log], num_prompts=14)
    assert [r.id for r in rp.requests] == [f"r{i}" for i in range(6)] + [f"r{i}~r1" for i in range(6)] + ["r0~r2", "r1~r2"]
    assert trace_from_runs(np.asarray([0, 2, 0, 0]), 4).accepted.tolist() == [2]
