"""The step-cost fit: bench-shaped records made from a simulated run with a KNOWN law -> the law back.

The records are what the bench client would have written against a server that follows the law
exactly (chunk arrival times = step ends + half the round trip), so these tests check the row
construction (who ran in which step, from timestamps alone), the NNLS fit and the shape choice.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specgauge.predict import CellSpec, ProfileError, StepCostProfile, fit_profile
from specgauge.predict.law import param_vector
from specgauge.predict.runs import write_cell
from specgauge.predict.predict import step_function
from specgauge.offline.traces import PlannedRequest
from specgauge.predict.schedule import (
    simulate_schedule,
    step_ends,
    timeline,
)
from specgauge.records import Chunk, RequestRecord, ResultsFile, SpecCounts

LAW = {"a": 0.004, "r": 0.0006, "b": 0.00025, "c": 2e-7, "p": 1.5e-5, "q": 0.001,
       "host[ngram]": 0.0004, "draft_step[draft_model]": 0.0015, "draft_req[draft_model]": 0.0003,
       "draft_prefill[draft_model]": 3e-6, "ell": 0.002}


def planned(n: int, method: str | None, k: int, seed: int, sampled_every: int = 0, idle: bool = False) -> list[PlannedRequest]:
    """Random requests; a speculative one drafts 1..k tokens at every step (so per-step counts are complete);
    ``sampled_every``: every that-many-th request is sampled (T > 0), and an n-gram one then drafts 0..k;
    ``idle``: n-gram drafts 0..k for every request (steps without drafts tell ``v`` from ``host_step``)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        L, P = int(rng.integers(8, 50)), int(rng.integers(30, 300))
        greedy = not (sampled_every and i % sampled_every == 0)
        low = 0 if idle or not greedy else 1
        dr, ac, pos = [], [], 1
        while pos < L:
            d = 0 if method is None else (k if method == "draft_model" else int(rng.integers(low, k + 1)))
            a = int(rng.integers(0, d + 1))
            dr.append(d)
            ac.append(a)
            pos += a + 1
        out.append(PlannedRequest(f"q{i}", P, L, np.asarray(dr), np.asarray(ac), greedy))
    return out


def write_run(root: Path, name: str, reqs: list[PlannedRequest], spec: dict | None, conc: int, law: dict,
              shape: str, jitter: float = 0.0, seed: int = 0) -> Path:
    """Simulate the closed loop with ``law`` and write what bench would have recorded."""
    from specgauge.config import resolve_spec

    method, k, _ = resolve_spec(spec)
    ell = law["ell"]
    sched = simulate_schedule(reqs, conc, step_function(law, shape, method, k), ell, method, k)
    names = list(law)
    dur = sched.steps.features(shape, names) @ param_vector(law, names)
    ends = step_ends(sched, dur, ell)
    send, _, _ = timeline(sched, dur, ell)
    rng = np.random.default_rng(seed)
    d = root / name
    rf = ResultsFile(d / "results.jsonl").open()
    for i, r in enumerate(reqs):
        toks, left = [1], r.output_tokens - 1
        for a in r.accepted.tolist():
            n = min(a + 1, left)
            toks.append(n)
            left -= n
        steps = np.arange(sched.first_step[i], sched.last_step[i] + 1)
        assert len(steps) == len(toks)
        t = ends[steps] + ell / 2 - send[i] + rng.normal(0, jitter, len(steps))
        spec_counts = None
        extra = {}
        if method:
            per = r.drafted.tolist()
            spec_counts = SpecCounts(drafts=int((r.drafted > 0).sum()), draft_tokens=int(r.drafted.sum()),
                                     accepted_tokens=int(r.accepted.sum()), source="synthetic")
            extra = {"metrics": {"speculative_decoding": {"per_step_drafted": per, "per_step_accepted": r.accepted.tolist()}}}
        rf.append(RequestRecord(id=r.id, index=i, scheduled_s=0.0, sent_s=float(send[i]), started_at=1.7e9 + float(send[i]), ok=True,
                                ttft_s=float(t[0]), e2e_s=float(t[-1]), elapsed_s=float(t[-1]),
                                chunks=[Chunk(float(x), int(n)) for x, n in zip(t, toks)], prompt_tokens=r.prompt_tokens,
                                output_tokens=r.output_tokens, spec=spec_counts, extra=extra))
    rf.close()
    (d / "run.json").write_text(json.dumps({"config": {"max_concurrency": conc}, "server": {"model": "synthetic"}}))
    write_cell(d, CellSpec(label=name, speculative_config=spec, concurrency=conc))
    return d


NGRAM4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}


def calibration(root: Path, shape: str, jitter: float = 0.0) -> list[Path]:
    dirs = []
    for j, (name, spec, method, k) in enumerate((("off", None, None, 0), ("ngram-k4", NGRAM4, "ngram", 4))):
        for conc in (1, 4):
            dirs.append(write_run(root, f"{name}-c{conc}", planned(40, method, k, seed=10 * j + conc), spec, conc, LAW,
                                  shape, jitter, seed=conc))
    return dirs


@pytest.mark.parametrize("shape", ["flattened", "padded"])
def test_fit_recovers_a_known_law_and_its_shape(tmp_path: Path, shape: str) -> None:
    prof = fit_profile(calibration(tmp_path, shape), bootstrap=20)
    assert prof.shape == shape
    for name in ("a", "r", "b", "p", "q", "host[ngram]", "ell"):
        assert prof.params[name] == pytest.approx(LAW[name], rel=0.03), name
    assert prof.residuals["relative_rmse"] < 1e-3
    assert prof.measured.concurrencies == [1, 4]
    assert prof.measured.max_batch == 4
    assert prof.measured.methods == {"ngram": [4]}
    assert len(prof.bootstrap) == 20 and prof.param_names[-1] == "ell"


def test_fit_survives_timestamp_jitter_and_outliers(tmp_path: Path) -> None:
    dirs = calibration(tmp_path, "flattened", jitter=0.0003)
    # one request hit by a 200 ms stall on the client: its window is far off, the robust pass drops it
    recs = ResultsFile(dirs[1] / "results.jsonl").existing()
    recs[5].chunks[-1] = Chunk(recs[5].chunks[-1].t + 0.2, recs[5].chunks[-1].n)
    (dirs[1] / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in recs))
    prof = fit_profile(dirs, bootstrap=50)
    assert prof.shape == "flattened"
    assert prof.residuals["rows_dropped_as_outliers"] >= 1
    for name in ("a", "b", "host[ngram]"):
        assert prof.params[name] == pytest.approx(LAW[name], rel=0.08), name
    lo, hi = np.percentile(prof.samples(["b"])[0], [2.5, 97.5])
    assert lo <= LAW["b"] * 1.08 and hi >= LAW["b"] * 0.92


def test_draft_model_terms_are_recovered(tmp_path: Path) -> None:
    dirs = calibration(tmp_path, "flattened")
    spec = {"model": str(tmp_path / "draft"), "num_speculative_tokens": 2}
    for conc in (1, 4):
        dirs.append(write_run(tmp_path, f"draft-c{conc}", planned(40, "draft_model", 2, seed=50 + conc), spec, conc,
                              LAW, "flattened"))
    prof = fit_profile(dirs, bootstrap=0)
    for name in ("draft_step[draft_model]", "draft_req[draft_model]"):
        assert prof.params[name] == pytest.approx(LAW[name], rel=0.05), name
    runs = prof.provenance["runs"]
    assert {r["speculative_config"]["model"] for r in runs if r["speculative_config"] and "model" in r["speculative_config"]} == {"draft"}


def test_a_draft_models_k_independent_cost_is_told_apart_only_at_two_k(tmp_path: Path) -> None:
    """``v`` (a verification step's own cost, every method) and ``draft_fixed`` (a drafting step's cost
    whatever k is) come back from runs at k = 2 and 4; from k = 2 alone draft_fixed is not a parameter
    (it cannot be told from draft_step) and the profile says how to calibrate it."""
    law = {**LAW, "v": 0.0012, "draft_fixed[draft_model]": 0.002}
    dirs = []
    for j, (name, spec, method, k) in enumerate((("off", None, None, 0), ("ngram-k4", NGRAM4, "ngram", 4))):
        for conc in (1, 4):
            dirs.append(write_run(tmp_path, f"{name}-c{conc}", planned(40, method, k, seed=10 * j + conc, idle=True), spec,
                                  conc, law, "flattened"))
    two = list(dirs)
    for k in (2, 4):
        spec = {"model": str(tmp_path / "draft"), "num_speculative_tokens": k}
        for conc in (1, 4):
            d = write_run(tmp_path, f"draft-k{k}-c{conc}", planned(40, "draft_model", k, seed=50 + 7 * k + conc), spec, conc,
                          law, "flattened")
            two.append(d)
            if k == 2:
                dirs.append(d)
    prof = fit_profile(two, bootstrap=0)
    assert prof.measured.methods["draft_model"] == [2, 4]
    for name in ("v", "draft_fixed[draft_model]", "draft_step[draft_model]", "draft_req[draft_model]", "host[ngram]"):
        assert prof.params[name] == pytest.approx(law[name], rel=0.05), name
    one = fit_profile(dirs, bootstrap=0)
    assert "draft_fixed[draft_model]" not in one.params and "v" in one.params
    assert any("draft_model measured at k = 2 only" in n and "--k draft_model=2,draft_model=4" in n for n in one.notes), one.notes


def test_the_cost_of_sampled_requests_is_told_apart(tmp_path: Path) -> None:
    """A server whose rejection sampler costs more for sampled (T > 0) requests (``g`` per sampled request,
    ``gv`` per sampled request verifying, ``gd`` per draft token of one): recovered from a mix of greedy
    and sampled requests, and a prediction for an all-greedy workload does not carry the sampled cost."""
    law = {**LAW, "v": 0.0008, "g": 0.0005, "gv": 0.0009, "gd": 0.0004, "host_step[ngram]": 0.0007}
    dirs, sampled = [], set()
    for j, (name, spec, method, k) in enumerate((("off", None, None, 0), ("ngram-k4", NGRAM4, "ngram", 4))):
        for conc in (1, 4):
            reqs = planned(48, method, k, seed=10 * j + conc, sampled_every=2)
            sampled |= {r.id for r in reqs if not r.greedy}
            dirs.append(write_run(tmp_path, f"{name}-c{conc}", reqs, spec, conc, law, "flattened"))
    prof = fit_profile(dirs, bootstrap=0, sampled_ids=sampled)
    for name in ("a", "b", "v", "g", "gv", "gd", "host[ngram]", "host_step[ngram]"):
        assert prof.params[name] == pytest.approx(law[name], rel=0.05), name
    blind = fit_profile(dirs, bootstrap=0, sampled_ids=set())  # the mix unknown: the g terms cannot be fitted
    assert blind.params["g"] == blind.params["gv"] == blind.params["gd"] == 0.0
    assert blind.residuals["relative_rmse"] > 10 * max(prof.residuals["relative_rmse"], 1e-6)
    # the fitted law times a greedy-only step table as the true law does
    reqs = planned(16, "ngram", 4, seed=99)
    sched = simulate_schedule(reqs, 4, step_function(law, "flattened", "ngram", 4), law["ell"], "ngram", 4)
    names = prof.param_names
    got = sched.steps.features("flattened", names) @ param_vector(prof.params, names)
    want = sched.steps.features("flattened", list(law)) @ param_vector(law, list(law))
    assert got.sum() == pytest.approx(want.sum(), rel=0.01)
    assert not sched.steps.sampled.any()


def test_profile_round_trip_and_bad_files(tmp_path: Path) -> None:
    prof = fit_profile(calibration(tmp_path, "flattened"), bootstrap=5)
    path = prof.save(tmp_path / "cost_profile.json")
    back = StepCostProfile.load(path)
    assert back == prof
    assert StepCostProfile.is_profile_file(path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="bad.json: cannot read JSON"):
        StepCostProfile.load(bad)
    bad.write_text(json.dumps({"default": {"saturation_tokens": 64}}))
    with pytest.raises(ProfileError, match="not a fitted step-cost profile"):
        StepCostProfile.load(bad)
    data = json.loads(path.read_text())
    data["params"]["b"] = -1.0
    bad.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="b must be finite and >= 0"):
        StepCostProfile.load(bad)
    with pytest.raises(ProfileError, match="no results.jsonl"):
        fit_profile([tmp_path / "nowhere"])


def test_merged_chunks_are_spread_over_the_steps_they_carried(tmp_path: Path) -> None:
    """vLLM merges a stream's outputs when the client reads slower than the engine steps: a chunk then
    carries several steps. The fit still recovers the law when chunks of some requests are merged."""
    dirs = calibration(tmp_path, "flattened")
    for d in dirs[:2]:  # baseline runs: merge every third pair of decode chunks of every other request
        recs = ResultsFile(d / "results.jsonl").existing()
        for r in recs[::2]:
            ch = list(r.chunks)
            out = [ch[0]]
            i = 1
            while i < len(ch):
                if i % 3 == 1 and i + 1 < len(ch):
                    out.append(Chunk(ch[i + 1].t, ch[i].n + ch[i + 1].n))
                    i += 2
                else:
                    out.append(ch[i])
                    i += 1
            r.chunks = out
        (d / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in recs))
    prof = fit_profile(dirs, bootstrap=0)
    assert any("several engine steps" in n for n in prof.notes)
    for name in ("a", "r", "b", "host[ngram]"):
        assert prof.params[name] == pytest.approx(LAW[name], rel=0.05), name


def test_step_grid_by_hand() -> None:
    from specgauge.predict.observe import step_grid

    # prefill at 0, then chunks at 1 (1 token), 3 (2 tokens: two steps of 1 s each), 4 (1 token)
    grid, toks, merged, first = step_grid(np.asarray([0.0, 1.0, 3.0, 4.0]), np.asarray([1, 1, 2, 1]), 4)
    assert grid.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and toks.tolist() == [1, 1, 1, 1, 1] and merged and not first
    grid, toks, merged, _ = step_grid(np.asarray([0.0, 1.0, 2.0]), np.asarray([1, 3, 1]), 2)
    assert grid.tolist() == [0.0, 1.0, 2.0] and toks.tolist() == [1, 3, 1] and not merged  # 3 tokens, one step


def test_a_sampled_requests_drafts_come_from_its_own_live_tokens(tmp_path: Path) -> None:
    """vLLM lists per-step drafts only for steps that drafted, and a sampled request's live output is not
    the logged one, so neither the server's list nor the logged replay gives its per-step drafts. The
    n-gram drafter replayed on the request's own live token ids does: it proposed from that context,
    and a rejected one-hot draft token never comes out. Such a record is used exactly, not by its mean."""
    from specgauge.drafters.base import make_drafter, replay_by_stepping
    from specgauge.predict.rows import build_rows
    from specgauge.predict.runs import RunData
    from specgauge.predict.replay import WorkloadReplay

    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]
    live_out = [7, 8, 9, 5, 6, 1, 2, 5, 6, 7, 8, 3, 5, 6, 7, 4]  # sampled: not what the log says
    logged_out = [7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    wl = tmp_path / "wl.jsonl"
    wl.write_text(json.dumps({"request": {"id": "s0", "prompt": "x", "temperature": 0.8, "max_tokens": 16},
                              "response": {"prompt_token_ids": prompt, "output_token_ids": logged_out}}) + "\n")
    replay = WorkloadReplay([wl])
    assert replay.sampled_ids() == {"s0"}
    tr = replay_by_stepping(make_drafter("ngram", prompt_lookup_min=2, prompt_lookup_max=4), "s0", prompt, live_out, 4)
    assert (tr.drafted == 0).any() and (tr.drafted > 0).any()
    toks, left = [1], len(live_out) - 1
    for a in tr.accepted.tolist():
        toks.append(min(a + 1, left))
        left -= toks[-1]
    steps = [i for i, d in enumerate(tr.drafted.tolist()) if d]
    rec = RequestRecord(id="s0", index=0, scheduled_s=0.0, sent_s=0.0, started_at=1.7e9, ok=True, ttft_s=0.01,
                        e2e_s=0.01 * len(toks), chunks=[Chunk(0.01 * (i + 1), n) for i, n in enumerate(toks)],
                        prompt_tokens=len(prompt), output_tokens=len(live_out),
                        spec=SpecCounts(drafts=len(steps), draft_tokens=int(tr.drafted.sum()),
                                        accepted_tokens=int(tr.accepted.sum()), source="vllm:per-request"),
                        extra={"prompt_token_ids": prompt, "output_token_ids": live_out,
                               "metrics": {"speculative_decoding": {"per_step_drafted": tr.drafted[steps].tolist()}}})
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    rd = RunData("ngram-k4/c1", CellSpec(label="ngram-k4", speculative_config=spec, concurrency=1), "ngram", 4, [rec], {})
    rows, obs = build_rows(rd, replay.by_id(spec), replay.sampled_ids(), replay.live(spec))
    assert rows.drafted_source == {"replay of its live tokens": 1}
    assert obs[0].drafted.tolist() == tr.drafted.tolist() and obs[0].sampled
    tab = rows.tables[rows.kind.index("decode")]
    assert tab.sampled.tolist() == [1] * len(tr.drafted)
    assert tab.sampled_drafted.tolist() == tr.drafted.tolist()
    assert tab.sampled_verify.tolist() == (tr.drafted > 0).tolist()
    rows, _ = build_rows(rd, replay.by_id(spec), replay.sampled_ids(), None)  # without it: the request's mean
    assert rows.drafted_source == {"request mean": 1}
