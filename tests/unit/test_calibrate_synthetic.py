"""Issue 41's pieces that need no server: vLLM's synthetic-acceptance config rules, per-step lists that
skip the steps without a draft, the synthetic points and the identifying point a calibration plans,
every position's proposal (a fixed k walked over it is the fixed-k replay; a one-range schedule predicts
what that k predicts), a prediction whose hidden host proposer is unidentified (band widened, never
recommended), the same-family note, and the engine's device/dtype and synthetic knob on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specgauge.calibrate_points import SYNTHETIC_MAX_K, plan_synthetic, propose_points, synthetic_spec
from specgauge.config import SpeculativeConfig, schedule_k
from specgauge.predict import CellSpec, StepCostProfile, predict_cells
from specgauge.predict.observe import place_drafting_steps
from specgauge.predict.profile import HostBound
from specgauge.predict.replay import WorkloadReplay
from specgauge.recommend import Option, recommend
from specgauge.recommend.choose import choose
from specgauge.sweep.grid import config_label
from specgauge.config import conditional_rates
from specgauge.workload.samples import sample_logged_path

NG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
LAW = {"a": 0.010, "r": 0.0012, "b": 0.0012, "c": 4e-7, "p": 4e-6, "q": 0.0015, "host[ngram]": 0.0015}


# ---------------------------------------------------------------------------- config


def test_synthetic_rules_are_vllms() -> None:
    c = SpeculativeConfig.model_validate({**NG, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5})
    assert c.synthetic and c.synthetic_rates() == [1.0, 0.5, 0.0, 0.0]  # vLLM's minimum-variance resolution
    assert conditional_rates([1.0, 0.5, 0.0, 0.0]) == [1.0, 0.5, 0.0, 0.0]
    assert conditional_rates([0.8, 0.4, 0.1]) == pytest.approx([0.8, 0.5, 0.25])
    rates = SpeculativeConfig.model_validate({**NG, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.5, 0.5, 0.1]})
    assert rates.synthetic_rates() == [0.9, 0.5, 0.5, 0.1]
    for bad in ({"rejection_sample_method": "synthetic"},  # neither
                {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0, "synthetic_acceptance_rates": [1, 1, 0, 0]},
                {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 6.0},  # past k + 1
                {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.5, 0.6, 0.1, 0.0]},  # increasing
                {"synthetic_acceptance_length": 2.0},  # without the method
                {"rejection_sample_method": "typical"}):
        with pytest.raises(ValueError):
            SpeculativeConfig.model_validate({**NG, **bad})
    assert config_label(synthetic_spec(NG, 32, 2.0)) == "ngram-k32-synL2"
    assert synthetic_spec(NG, 1, 5.0)["synthetic_acceptance_length"] == 2.0  # capped at k + 1
    assert [schedule_k([[1, 2, 4], [3, 8, 2]], b) for b in (1, 3, 9)] == [4, 2, 2]


# ---------------------------------------------------------------------------- observe


def test_drafting_steps_are_placed_by_their_tokens() -> None:
    # the 3-token step is draft 0 (2 accepted); draft 1 accepted nothing: step 2 or 3, not told apart
    got, unique = place_drafting_steps([4, 4], [2, 0], np.asarray([1, 3, 1, 1]))
    assert got.tolist() == [0, 4, 4, 0] and not unique
    got, unique = place_drafting_steps([4, 3], [2, 1], np.asarray([1, 3, 1, 2]))
    assert got.tolist() == [0, 4, 0, 3] and unique
    got, unique = place_drafting_steps([4], [3], np.asarray([1, 2]))  # the last step is cut at the output's end
    assert got.tolist() == [0, 4] and unique
    assert place_drafting_steps([4], [2], np.asarray([2, 1])) is None  # no step emits 3 tokens


# ---------------------------------------------------------------------------- planning


def test_synthetic_points_reach_the_forward_and_one_point_per_unidentified_term() -> None:
    cells = [CellSpec(label="off", concurrency=4), CellSpec(label="ngram-k4", speculative_config=NG, concurrency=4)]
    plan = plan_synthetic(cells, [1, 4, 16], forward_tokens=400, length=2.0, num_prompts=8)
    got = {(c.concurrency, c.speculative_config["num_speculative_tokens"], n) for c, n in plan}
    assert got == {(1, 128, 8), (4, 99, 8), (16, 24, 32)}  # ⌈400 / C⌉ − 1, capped at 128 for a model-free proposer
    assert all(c.speculative_config["rejection_sample_method"] == "synthetic" for c, _ in plan)
    assert all(c.speculative_config["prompt_lookup_min"] == 1 for c, _ in plan)  # drafts at most steps
    assert plan_synthetic(cells, [200], forward_tokens=400, length=2.0, num_prompts=8) == []  # k = 1 <= 4: covered
    # a draft model alone: its own points (k capped at 32) and an n-gram filler for the target's forward
    dm = CellSpec(label="draft_model-k2", speculative_config={"method": "draft_model", "model": "d", "num_speculative_tokens": 2},
                  concurrency=4)
    got = {(c.speculative_config["method"], c.speculative_config["num_speculative_tokens"]) for c, _ in
           plan_synthetic([dm], [1], forward_tokens=400, length=2.0, num_prompts=8)}
    assert got == {("draft_model", SYNTHETIC_MAX_K), ("ngram", 128)}
    from specgauge.predict.types import CellPrediction

    ask = [CellSpec(label="suffix-k4", speculative_config={"method": "suffix", "num_speculative_tokens": 4}, concurrency=c) for c in (16, 64)]
    preds = [CellPrediction(label="suffix-k4", method="suffix", k=4, concurrency=c, speedup=1.3, speedup_low=0.5,
                            speedup_high=1.4, unidentified=u) for c, u in ((16, ["host_par[suffix]"]), (64, ["host_par[suffix]", "knee"]))]
    (pt,) = propose_points(preds, ask, None)  # one run at 64 identifies both
    assert (pt.label, pt.concurrency, pt.term, pt.synthetic) == ("suffix-k4", 64, "host_par[suffix], knee", False)
    (syn,) = propose_points(preds, ask, 2.0)
    assert syn.synthetic and syn.speculative_config["rejection_sample_method"] == "synthetic"


# ---------------------------------------------------------------------------- positions, schedules


def test_positions_walked_at_k_are_the_replay_and_a_one_range_schedule_predicts_that_k() -> None:
    rep = WorkloadReplay([sample_logged_path()], None, 8)
    for pt, pl in zip(rep.positions(NG), rep.planned(NG), strict=True):
        d, a, pos = [], [], 1
        while pos < len(pt.drafted):
            x, y = pt.at(pos, 4)
            d.append(x)
            a.append(y)
            pos += y + 1
        assert d == pl.drafted.tolist() and a == pl.accepted.tolist()
    prof = StepCostProfile(params=LAW)
    sched = {**NG, "num_speculative_tokens_per_batch_size": [[1, 256, 2]]}
    cells = [CellSpec(label="k2", speculative_config={**NG, "num_speculative_tokens": 2}, concurrency=4),
             CellSpec(label="s", speculative_config=sched, concurrency=4),
             CellSpec(label="mix", speculative_config={**NG, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 2]]}, concurrency=4)]
    k2, s, mix = predict_cells(prof, [sample_logged_path()], cells, num_prompts=8, replay=rep)
    assert s.speedup == pytest.approx(k2.speedup, rel=1e-9)
    assert mix.speedup != pytest.approx(k2.speedup, rel=1e-6)  # the drain steps (batch <= 2) draft at k = 4


# ---------------------------------------------------------------------------- unidentified


def test_a_hidden_host_bound_widens_the_band_and_recommend_does_not_choose_it() -> None:
    seen = StepCostProfile(params=LAW)
    hidden = seen.model_copy(deep=True)
    hidden.measured.hidden_host_bound = {"ngram": HostBound(per_request=0.02, max_batch=2)}
    cell = CellSpec(label="ngram-k4", speculative_config=NG, concurrency=8)
    (a,) = predict_cells(seen, [sample_logged_path()], [cell], num_prompts=16)
    (b,) = predict_cells(hidden, [sample_logged_path()], [cell], num_prompts=16)
    assert a.unidentified == [] and b.unidentified == ["host_par[ngram]"]
    assert b.speedup == pytest.approx(a.speedup) and b.speedup_low is not None and b.speedup_low < 0.9 * b.speedup
    assert any("calibrate ngram at concurrency 8" in n for n in b.notes)
    (c,) = predict_cells(hidden, [sample_logged_path()], [cell.model_copy(update={"concurrency": 2})], num_prompts=16)
    assert c.unidentified == []  # at the calibrated batch the data saw it hidden
    o = Option(label="ngram-k4", method="ngram", k=4, concurrency=8, estimate=1.5, low=1.3, high=1.6, source="predicted",
               speculative_config=NG, unidentified=["host_par[ngram]"])
    band = choose([o], 8, [5, 256], 1.05)
    assert band.choice == "off" and "host_par[ngram]" in band.reason


def test_same_method_other_k_is_explained() -> None:
    def opt(label: str, k: int, est: float, lo: float, hi: float, method: str = "ngram") -> Option:
        spec = {**NG, "num_speculative_tokens": k} if method == "ngram" else {"method": "suffix", "num_speculative_tokens": k}
        return Option(label=label, method=method, k=k, concurrency=4, estimate=est, low=lo, high=hi, speculative_config=spec)

    # all methods: suffix leads, ngram-k8 overlaps it (ngram-k2 does not) -> ngram-k8; within ngram, k2 overlaps k8 -> k2
    opts = [opt("suffix-k8", 8, 1.60, 1.50, 1.70, "suffix"), opt("ngram-k8", 8, 1.45, 1.30, 1.55), opt("ngram-k2", 2, 1.35, 1.25, 1.45)]
    r = recommend(opts, [4], source="sweep", source_name="s")
    assert r.bands[0].choice == "ngram-k8" and r.method_bands[0].choice == "ngram-k2"
    note = next(n for n in r.notes if "ngram-k8" in n)
    assert "one server runs one method" not in note and "cannot be told apart" in note, note


# ---------------------------------------------------------------------------- engine


@pytest.mark.slow  # torch's import and three tiny engines: ~6-13 s on a busy 2-core host
def test_engine_device_and_dtype_plumb_through_and_cuda_missing_is_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from specgauge.engine.core import Engine, generate
    from specgauge.engine.sampling import SamplingParams
    from specgauge.testing.engine import make_tiny_model

    target = make_tiny_model(tmp_path / "t", layers=1, seed=3)
    eng = Engine(target, max_batch=2, max_model_len=64, dtype="bfloat16", device="cpu")
    assert eng.device == torch.device("cpu") and eng.model.embed.weight.dtype == torch.bfloat16
    assert eng.cache.k[0].dtype == torch.bfloat16 and eng.cache.k[0].device.type == "cpu"
    # synthetic acceptance: a prompt-lookup config accepts its first draft always, never a second (length 2)
    spec = SpeculativeConfig.model_validate({**NG, "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
                                             "synthetic_acceptance_length": 2.0})
    syn = Engine(target, spec, max_batch=2, max_model_len=96)
    prompt = ([5, 9, 13, 21] * 6)[:20]
    outs: list = []
    syn.add_request("r", prompt, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
    while syn.has_unfinished():
        outs += syn.step()
    st = outs[-1].spec
    assert st is not None and st.num_drafts > 0 and st.per_step_accepted == [min(1, d) for d in st.per_step_drafted]
    assert len(generate(eng, [prompt], SamplingParams(max_tokens=4, temperature=0.0))[0]) == 4
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device is visible to torch"):
            Engine(target, device="cuda")


@pytest.mark.slow
def test_serve_without_cuda_says_so_in_one_line(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from specgauge.testing.engine import make_tiny_model

    if not torch.cuda.is_available():
        target = make_tiny_model(tmp_path / "t", layers=1, seed=3)
        r = subprocess.run([sys.executable, "-m", "specgauge", "serve", "--model", str(target), "--device", "cuda"],
                           capture_output=True, text=True, timeout=120)
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and "cuda" in lines[0] and "Traceback" not in r.stderr, lines


def test_compare_k_puts_the_recommended_schedule_beside_each_fixed_k() -> None:
    from specgauge.recommend.variants import compare_k

    ng = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    params = {"a": 0.020, "r": 0.0, "b": 0.00012, "c": 0.0, "p": 1e-6, "q": 0.001, "host[ngram]": 0.00005}
    names = list(params)
    prof = StepCostProfile(params=params, param_names=names, bootstrap=[[params[n] for n in names]] * 3)  # a band of width 0
    cmp = compare_k(prof, [sample_logged_path()], [{**ng, "num_speculative_tokens": k} for k in (1, 4, 8)], [1, 16, 64], num_prompts=64)
    assert cmp.schedule == [[1, 4, 8], [5, 32, 1], [33, 256, 0]], cmp.headline
    got = {(r.variant, r.label, r.concurrency): r.speedup for r in cmp.rows}
    # where a band's k holds for the whole run the schedule is that fixed k; its ramp and drain differ a little
    assert got[("schedule", "ngram-k8-sched", 1)] == pytest.approx(got[("fixed", "ngram-k8", 1)], rel=1e-9)
    assert got[("schedule", "ngram-k8-sched", 16)] == pytest.approx(got[("fixed", "ngram-k1", 16)], rel=0.02)
    assert got[("schedule", "ngram-k8-sched", 64)] < 1.0  # at 64 its ramp and drain steps still draft (k = 1 or 8): not "off"


@pytest.mark.slow  # the draft model's teacher-forced pass: ~5-15 s on a busy 2-core host
def test_the_adaptive_oracle_verifies_exactly_what_is_accepted() -> None:
    """The seam for DSpark's adaptive verification (``enable_adaptive_verification: "oracle"``): every step
    drafts as many tokens as it will accept, so it is never slower than the same k verifying all k drafts."""
    from specgauge.models import draft_dir

    dm = {"method": "draft_model", "model": str(draft_dir()), "num_speculative_tokens": 4}
    rep = WorkloadReplay([sample_logged_path()], None, 6)
    fixed, oracle = rep.positions(dm), rep.positions({**dm, "enable_adaptive_verification": "oracle"})
    for f, o in zip(fixed, oracle, strict=True):
        assert (o.drafted == o.accepted).all() and (o.accepted == f.accepted).all() and (f.drafted == 4).all()
    with pytest.raises(Exception, match="no replay of adaptive verification"):
        rep.positions({**dm, "enable_adaptive_verification": True})
    prof = StepCostProfile(params={**LAW, "draft_step[draft_model]": 0.002})
    cells = [CellSpec(label=lb, speculative_config=sp, concurrency=4)
             for lb, sp in (("k4", dm), ("oracle", {**dm, "enable_adaptive_verification": "oracle"}))]
    k4, best = predict_cells(prof, [sample_logged_path()], cells, num_prompts=6, replay=rep)
    assert best.speedup >= k4.speedup and best.tokens_per_forward < k4.tokens_per_forward
