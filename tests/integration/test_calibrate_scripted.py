"""calibrate + predict against a scripted server with a KNOWN step-cost law, over real HTTP.

The scripted server (``specgauge.testing.scripted_server``) batches the real requests continuously,
answers with the workload's logged token ids, drafts with the real drafters and sleeps each step for
the law's time on absolute deadlines. Calibration must recover the law, and predictions for configs
it was not calibrated on must match the speedup bench + compare then measure on that server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from specgauge.calibrate import CalibrateConfig, measure_cell, run_calibration
from specgauge.predict import CellSpec, predict_cells
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.grid import config_label, grid_method
from tests.integration._workloads import cut_logged_sample

pytestmark = pytest.mark.slow

# seconds; steps of 12-40 ms so that scheduler jitter stays well under 1 %
LAW = {"a": 0.010, "r": 0.0012, "b": 0.0012, "c": 4e-7, "p": 4e-6, "q": 0.0015,
       "host[ngram]": 0.0015, "host[suffix]": 0.0025, "host_step[ngram]": 0.002,
       # 9 of the 16 requests are sampled (T > 0): each costs g more per step, gd more per draft token
       "g": 0.002, "gd": 0.0008}
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 logged sample requests, outputs cut to 24 tokens (max_tokens says so too)."""
    return cut_logged_sample(tmp_path_factory.mktemp("wl") / "logged.jsonl", 16, MAX_TOKENS)


def serve(stack: ExitStack, workload: Path, specs: dict[str, dict | None]) -> ServerTarget:
    """The scripted servers in a process of their own (one per config, each on its own port): their
    steps never wait for the bench client's GIL. Stopped when ``stack`` closes."""
    args = [sys.executable, "-m", "specgauge.testing.scripted_server", "--workload", str(workload), "--law", json.dumps(LAW)]
    for label, spec in specs.items():
        args += ["--config", f"{label}={json.dumps(spec) if spec else 'off'}"]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def stop() -> None:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()

    stack.callback(stop)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the scripted servers did not start"
    return ServerTarget.from_urls(json.loads(line))


def spec(method: str, k: int) -> tuple[str, dict]:
    s = grid_method(method, k)
    return config_label(s), s


def test_calibrate_recovers_the_law_and_predicts_unseen_configs(workload: Path, tmp_path: Path) -> None:
    calib = dict([("off", None), spec("ngram", 4), spec("suffix", 4)])
    with ExitStack() as stack:
        target = serve(stack, workload, calib)
        res = run_calibration(CalibrateConfig(workload=[workload], out_dir=tmp_path / "cal", methods=["ngram", "suffix"],
                                              concurrencies=[1, 4], num_prompts=16, bootstrap=100, target=target, warmup=0))
    prof = res.profile
    assert prof.shape == "flattened" and prof.residuals["shape_confidence"] >= 0.9
    got = prof.params
    for name in ("a", "b", "host[ngram]", "host[suffix]", "host_step[ngram]", "g", "gd"):
        assert got[name] == pytest.approx(LAW[name], rel=0.07), (name, got)
    # per request in the batch: r and the context term c trade off (Σ context grows with B); their sum
    # at the runs' mean context is what the data pins down. Prefill terms (p, q) share the TTFT rows
    # with the HTTP round trip (ell) and are not asserted.
    ctx = 24 / 2 + sum(len(json.loads(x)["response"]["prompt_token_ids"]) for x in workload.read_text().splitlines()) / 16
    assert got["r"] + got["c"] * ctx == pytest.approx(LAW["r"] + LAW["c"] * ctx, rel=0.05), got
    assert prof.residuals["relative_rmse"] < 0.05  # per-request decode windows, timestamps jitter on a busy machine
    for run, chk in prof.replay_checks.items():  # the server drafts exactly what replay says
        assert chk["gap"] == pytest.approx(0.0, abs=0.02), (run, chk)
    for c in res.checks:  # in-sample
        assert c.error is not None and abs(c.error) < 0.03, c

    unseen = dict([("off", None), spec("ngram", 2), spec("ngram", 8)])
    cells = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in unseen.items() for c in (2, 8)]
    with ExitStack() as stack:
        target = serve(stack, workload, unseen)
        grid = run_grid(cells, target, [workload], tmp_path / "val", num_prompts=16, warmup=0)
    preds = predict_cells(prof, [workload], [c for c in cells if c.speculative_config], num_prompts=16)
    errors = {}
    for p in preds:
        measured, _, _ = measure_cell(grid.cell_dir("off", p.concurrency), grid.cell_dir(p.label, p.concurrency))
        assert measured is not None
        errors[(p.label, p.concurrency)] = (p.speedup, measured)
    bad = {k: v for k, v in errors.items() if abs(v[0] / v[1] - 1) > 0.02}
    assert not bad, errors


def test_paired_calibration_recovers_the_law_and_tracks_the_suffix_cache_per_repeat(workload: Path, tmp_path: Path) -> None:
    """``paired_repeats``: each candidate cell measured as baseline/candidate pairs back to back on
    servers that stay up. The law still comes back, and the in-sample checks — pooled over repeats in
    which suffix decoding's cache remembers ever more earlier runs — match what compare measures."""
    from specgauge.sweep.paired import paired_dirs

    calib = dict([("off", None), spec("ngram", 4), spec("suffix", 4)])
    with ExitStack() as stack:
        target = serve(stack, workload, calib)
        res = run_calibration(CalibrateConfig(workload=[workload], out_dir=tmp_path / "cal", methods=["ngram", "suffix"],
                                              concurrencies=[1, 4], num_prompts=16, bootstrap=50, target=target, warmup=0,
                                              paired_repeats=2))
    # every pair on disk, both sides, each described by its cell.json
    for label in ("ngram-k4", "suffix-k4"):
        for c in (1, 4):
            for r in (0, 1):
                for d in paired_dirs(tmp_path / "cal" / "paired", label, c, r):
                    assert (d / "results.jsonl").is_file() and (d / "cell.json").is_file(), d
    assert len(res.run_dirs) == 2 * 2 * 2 * 2
    got = res.profile.params
    for name in ("a", "b", "host[ngram]", "host[suffix]", "host_step[ngram]", "g", "gd"):
        assert got[name] == pytest.approx(LAW[name], rel=0.07), (name, got)
    # the suffix server's later repeats found its cache holding the earlier runs: the fit found them
    earlier = {run: chk.get("earlier_runs_on_this_server", 0) for run, chk in res.profile.replay_checks.items()
               if run.startswith("suffix-k4/")}
    assert earlier == {"suffix-k4/c1-r0": 0, "suffix-k4/c1-r1": 1, "suffix-k4/c4-r0": 2, "suffix-k4/c4-r1": 3}, earlier
    assert len(res.checks) == 4
    for c in res.checks:
        assert c.error is not None and abs(c.error) < 0.03, c
