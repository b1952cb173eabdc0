"""The GPU regime of the step-cost law: the measured curve as a step time, the knee and the overlapping
host proposer found by the fit (and not found on a straight line), calibration planned to cover the
predicted range, and predictions outside it flagged by how much."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specgauge.calibrate import plan_calibration
from specgauge.predict.fit_knee import extend
from specgauge.predict.gpu_curve import GpuCurve, GpuServerCosts, gpu_step_function
from specgauge.predict.law import CORE, StepTable, drafter_params, step_durations
from specgauge.predict.lsq import solve
from specgauge.predict.rows import Rows
from specgauge.predict.predict import step_function
from specgauge.predict.types import ProfileError

CURVE = Path(__file__).resolve().parents[1] / "data" / "gpu" / "h200-llama3-8b-costs.json"


def test_curve_reads_the_measured_points_and_interpolates_between_them() -> None:
    data = json.loads(CURVE.read_text())
    c = GpuCurve(data)
    lin, head = data["lin"]["llama3-8b"], data["head"]["128256x4096"]
    for n in (1, 64, 256, 1024):
        assert c.forward(n, "llama3-8b", "128256x4096") == pytest.approx(32 * lin[str(n)] + head[str(n)])
    mid = c.forward(80, "llama3-8b", "128256x4096")
    assert c.forward(64, "llama3-8b", "128256x4096") <= mid <= c.forward(96, "llama3-8b", "128256x4096")
    # flat, then a knee: 1 -> 64 tokens costs < 10 % more, 256 -> 1024 about 3.3x
    f = lambda n: c.forward(n, "llama3-8b", "128256x4096")  # noqa: E731
    assert f(64) / f(1) < 1.1 and 3.0 < f(1024) / f(256) < 3.6
    # attention grows with the cached tokens, not with the batch alone
    assert c.attention(64, 64 * 2048, "llama3-8b") > 2 * c.attention(64, 64 * 512, "llama3-8b")
    assert c.attention(0, 0, "llama3-8b") == 0.0


def test_bad_curve_file_names_the_place(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_text('{"lin": {}}')
    with pytest.raises(ProfileError, match="c.json: not a GPU cost curve"):
        GpuCurve.load(bad)


def test_host_proposer_hides_at_small_batch_and_sets_the_step_at_large_batch() -> None:
    c = GpuCurve.load(CURVE)
    costs = GpuServerCosts(host_par={"suffix": 3e-4})
    sx, off = gpu_step_function(c, costs, "suffix", 4), gpu_step_function(c, costs, None, 0)
    free = GpuServerCosts(host_par={"suffix": 0.0})
    sx0 = gpu_step_function(c, free, "suffix", 4)
    args = lambda b: (b, 0, 0, b * 500, 0, 0, b)  # noqa: E731  (nobody drafted: only the proposer differs)
    assert sx(*args(2)) == pytest.approx(sx0(*args(2)))  # 0.6 ms of lookups hide in a 4.5 ms step
    big = sx(*args(128))
    assert big == pytest.approx(costs.host_a + costs.host_r * 128 + 3e-4 * 128)  # the host sets the step
    assert big > 1.5 * off(*args(128))


def _tables(rng: np.random.Generator, method: str | None, k: int, rows: int, max_batch: int) -> list[StepTable]:
    out = []
    for _ in range(rows):
        s = int(rng.integers(10, 30))
        b = rng.integers(1, max_batch + 1, size=s)
        d = b * rng.integers(0, k + 1, size=s) if k else np.zeros(s, dtype=int)
        ctx = b * rng.integers(200, 800, size=s)
        ptok = np.where(rng.random(s) < 0.3, rng.integers(100, 600, size=s), 0)
        out.append(StepTable(b, d, np.minimum(d, k), ctx, ptok, (ptok > 0).astype(int), method, k))
    return out


def _rows(truth: dict[str, float], configs: list[tuple[str | None, int, int]], seed: int = 0, noise: float = 0.002) -> list[Rows]:
    rng = np.random.default_rng(seed)
    out = []
    for method, k, max_batch in configs:
        r = Rows(f"{method}-{k}-{max_batch}")
        f = step_function(truth, "flattened", method, k)
        for t in _tables(rng, method, k, 40, max_batch):
            y = sum(f(*row) for row in zip(t.batch, t.drafted_sum, t.drafted_max, t.context, t.prefill_tokens,
                                           t.prefill_reqs, t.batch, strict=True))
            r.kind.append("decode")
            r.y.append(y * (1 + noise * rng.standard_normal()))
            r.steps.append(len(t))
            r.tables.append(t)
        out.append(r)
    return out


CONFIGS = [(None, 0, 4), (None, 0, 64), ("suffix", 4, 8), ("suffix", 4, 64), ("ngram", 4, 64)]


def _linear_fit(rows: list[Rows]) -> tuple[list[str], np.ndarray, np.ndarray]:
    names = [*CORE, *drafter_params("suffix"), *drafter_params("ngram"), "ell"]
    X = np.asarray([t.features("flattened", names).sum(axis=0) for r in rows for t in r.tables])
    y = np.asarray([v for r in rows for v in r.y])
    return names, solve(X, y, np.ones(len(y))), np.ones(len(y), dtype=bool)


def test_fit_finds_the_knee_and_the_overlapping_host_proposer() -> None:
    truth = {"a": 0.0045, "b": 5e-6, "b2": 2e-5, "knee": 150.0, "c": 3e-8, "p": 5e-6, "host_par[suffix]": 2.5e-4}
    rows = _rows(truth, CONFIGS)
    names, coef, keep = _linear_fit(rows)
    ext = extend(rows, "flattened", names, coef, solve, keep)
    assert ext is not None and ext.knee is not None and 100 <= ext.knee <= 220, ext and ext.notes
    assert ext.hidden == ["suffix"]
    got = ext.params()
    assert got["host_par[suffix]"] == pytest.approx(2.5e-4, rel=0.1), got
    assert got["b2"] == pytest.approx(2e-5, rel=0.3), got
    # the fitted law reproduces the truth's step times, past the knee and where the host sets the step
    t = _tables(np.random.default_rng(9), "suffix", 4, 5, 128)[0]
    f = step_function(truth, "flattened", "suffix", 4)
    true = np.asarray([f(*row) for row in zip(t.batch, t.drafted_sum, t.drafted_max, t.context, t.prefill_tokens,
                                              t.prefill_reqs, t.batch, strict=True)])
    fitted = step_durations(t, "flattened", ext.names, np.asarray([got.get(n, 0.0) for n in ext.names]), ext.knee)
    assert np.abs(fitted / true - 1).max() < 0.08


def test_straight_line_stays_a_straight_line() -> None:
    """A CPU server: linear from the first token, its proposer in series with the forward."""
    truth = {"a": 0.004, "r": 0.0008, "b": 0.0006, "c": 4e-7, "p": 4e-6, "host[suffix]": 0.0015, "host[ngram]": 0.0005}
    rows = _rows(truth, CONFIGS, seed=3, noise=0.01)
    names, coef, keep = _linear_fit(rows)
    assert extend(rows, "flattened", names, coef, solve, keep) is None


def test_step_durations_match_the_scalar_law() -> None:
    params = {"a": 0.004, "b": 5e-6, "b2": 2e-5, "knee": 100.0, "host_par[suffix]": 1e-4, "host_par0[suffix]": 1e-4}
    names = ["a", "b", "b2", "host_par[suffix]", "host_par0[suffix]"]
    t = _tables(np.random.default_rng(1), "suffix", 4, 1, 100)[0]
    f = step_function(params, "flattened", "suffix", 4)
    scalar = [f(*row) for row in zip(t.batch, t.drafted_sum, t.drafted_max, t.context, t.prefill_tokens,
                                     t.prefill_reqs, t.batch, strict=True)]
    theta = np.asarray([params[n] for n in names])
    assert step_durations(t, "flattened", names, theta, 100.0) == pytest.approx(scalar)
    both = step_durations(t, "flattened", names, np.stack([theta, theta], axis=1), 100.0)
    assert both.shape == (len(t), 2) and both[:, 1] == pytest.approx(scalar)


def test_calibration_is_planned_to_cover_the_predicted_range() -> None:
    plan = plan_calibration(["ngram", "suffix"], {"ngram": 4, "suffix": 4}, list(range(1, 257)), predict_k=8, num_prompts=16)
    got = {(c.label, c.concurrency): n for c, n in plan}
    assert {c for lb, c in got if lb == "off"} == {1, 16, 256}  # the baseline low / middle / high
    assert got[("ngram-k8", 256)] == 512 and ("ngram-k8", 16) not in got  # the largest k at the largest batch
    assert got[("ngram-k4", 16)] == 32 and got[("off", 1)] == 16  # 2·C requests: the loop reaches batch C
    # suffix remembers earlier runs: every run of one config sends the same requests
    assert got[("suffix-k4", 16)] == got[("suffix-k4", 256)] == 512
    with pytest.raises(ProfileError, match="--predict-concurrency"):
        plan_calibration(["ngram"], {}, [0, 4])


# ---------------------------------------------------------------------------- predicting past the knee

GPU_PARAMS = {"a": 0.0047, "r": 8e-6, "b": 5e-6, "c": 3e-8, "p": 2e-5, "q": 0.0, "b2": 2e-5, "knee": 150.0,
              "host[ngram]": 0.0, "ell": 0.0005, "v": 0.00015}


@pytest.fixture(scope="module")
def gpu_workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from specgauge.workload.samples import sample_logged_path

    rows = []
    for line in sample_logged_path().read_text(encoding="utf-8").splitlines()[:48]:
        d = json.loads(line)
        d["request"]["max_tokens"] = 24
        d["response"]["output_token_ids"] = d["response"]["output_token_ids"][:24]
        rows.append(json.dumps(d))
    out = tmp_path_factory.mktemp("gpu") / "w.jsonl"
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def _ngram_cells(ks: tuple[int, ...], concs: tuple[int, ...]) -> list:
    from specgauge.predict import CellSpec
    from specgauge.sweep.grid import config_label, grid_method

    return [CellSpec(label=config_label(grid_method("ngram", k)), speculative_config=grid_method("ngram", k), concurrency=c)
            for k in ks for c in concs]


def test_prediction_past_the_measured_range_says_how_far_and_widens_its_band(gpu_workload: Path) -> None:
    from specgauge.predict import predict_cells
    from specgauge.predict.profile import MeasuredRange, StepCostProfile

    cells = _ngram_cells((8,), (2, 32))
    inside = StepCostProfile(params=GPU_PARAMS, measured=MeasuredRange(max_tokens_per_forward=500, max_forward_tokens=50000,
                                                                       max_batch=64))
    small, big = predict_cells(inside, [gpu_workload], cells)
    assert not small.extrapolated and not big.extrapolated and small.beyond_range == big.beyond_range == 0.0
    # calibrated at batch <= 4 with small forwards: batch 2 is safe, batch 32 is not, and it says by how much
    plateau = StepCostProfile(params=GPU_PARAMS, measured=MeasuredRange(max_tokens_per_forward=12, max_forward_tokens=900,
                                                                        max_batch=4))
    small2, big2 = predict_cells(plateau, [gpu_workload], cells)
    assert not small2.extrapolated
    assert big2.extrapolated and big2.beyond_range is not None and big2.beyond_range > 0.3
    assert any("batch up to 32 against 4" in n for n in big2.notes), big2.notes
    assert big2.speedup == pytest.approx(big.speedup)
    assert big2.speedup_low is not None and big2.speedup_low < big2.speedup - 0.01  # the roofline's worst case


def test_recommendation_past_the_knee_lowers_k_with_the_batch_and_ends_off(gpu_workload: Path) -> None:
    """On a knee-shaped law the best k falls as the batch grows; past the crossover nothing pays: the
    schedule's k = 0 there comes with the #49548 warning, and vLLM's rules accept the schedule."""
    from specgauge.predict import predict_cells
    from specgauge.predict.profile import MeasuredRange, StepCostProfile
    from specgauge.recommend import recommend
    from specgauge.recommend.curves import speedup_curves
    from specgauge.recommend.schedule import validate_schedule
    from specgauge.recommend.sources import options_from_predictions
    from specgauge.report.speedup_plot import speedup_vs_batch_html

    prof = StepCostProfile(params=GPU_PARAMS, measured=MeasuredRange(max_tokens_per_forward=2000, max_forward_tokens=50000,
                                                                     max_batch=64))
    cells = _ngram_cells((1, 2, 8), (1, 4, 64))
    preds = [p.model_copy(update={"speedup_low": p.speedup * 0.997, "speedup_high": p.speedup * 1.003})  # type: ignore[operator]
             for p in predict_cells(prof, [gpu_workload], cells)]
    opts, notes = options_from_predictions(preds)
    spec = {c.label: c.speculative_config for c in cells}
    for o in opts:
        o.speculative_config = spec[o.label]
    rec = recommend(opts, [1, 4, 64], source="prediction", source_name="p", notes=notes)
    assert rec.verdict == "speculate" and rec.schedule is not None, rec.headline
    ks = [k for _, _, k in rec.schedule]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1] == 0, rec.schedule
    validate_schedule(rec.schedule, rec.speculative_config["num_speculative_tokens"])  # type: ignore[index]
    assert any("#49548" in n and "k = 0 is not 'off'" in n for n in rec.notes)
    curves = speedup_curves(preds, {("ngram-k2", 4): (1.05, 1.0, 1.1)}, 1.05, rec.schedule)
    assert curves.stops_paying_at == rec.schedule[-1][0]
    assert [c.label for c in curves.curves] == ["ngram-k1", "ngram-k2", "ngram-k8"]
    assert [q.batch for q in curves.curves[0].predicted] == [1, 4, 64]
    html = speedup_vs_batch_html(curves)
    assert html.startswith("<div") and "ngram-k8 (predicted)" in html and "http" not in html.split("plotly", 1)[0]
