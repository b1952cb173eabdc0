"""calibrate + predict against a scripted server with a KNOWN step-cost law.

The law's figures are checked on a VIRTUAL clock (``testing.virtual_bench``: the runs calibrate plans,
synthesised exactly from the law through bench's closed loop — drafts from the replay of the real
drafters, a suffix cache remembering the server's earlier runs — then ``calibrate --from-runs``), where
the truth is known to rounding: calibration must give the law back and predict configs it never ran as
compare measures them, to 1e-6. The same verdict on any machine, however loaded.

Over real HTTP (``testing.scripted_server``: continuous batching, the workload's logged token ids, the
real drafters drafting live, each step sleeping the law's time) a paired calibration runs end to end and
is held only to what timing cannot change: every pair on disk, the suffix cache's server state found per
repeat, a check per cell. Its accuracy on real sleeps is ``benchmarks/calibrate_scripted.py``'s to print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from specgauge.calibrate import CalibrateConfig, measure_cell, plan_live, run_calibration
from specgauge.predict import CellSpec, predict_cells
from specgauge.records import ResultsFile
from specgauge.sweep import ServerTarget, run_grid
from specgauge.sweep.grid import config_label, grid_method
from specgauge.testing.virtual_bench import ELL, law_servers
from tests.integration._workloads import cut_logged_sample

# seconds; steps of 12-40 ms (over HTTP, scheduler jitter stays well under 1 %)
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
    cfg = CalibrateConfig(workload=[workload], out_dir=tmp_path / "cal", methods=["ngram", "suffix"], concurrencies=[1, 4],
                          num_prompts=16, bootstrap=100, warmup=0)
    planned = plan_live(cfg, False)
    assert {(c.label, c.concurrency) for c, _ in planned} == {(lb, c) for lb in calib for c in (1, 4)}
    dirs = law_servers(workload, LAW).grid(tmp_path / "cal" / "runs", planned)
    res = run_calibration(cfg.model_copy(update={"from_runs": list(dirs.values())}))
    prof = res.profile
    assert prof.shape == "flattened" and prof.residuals["shape_confidence"] >= 0.9
    assert prof.residuals["relative_rmse"] < 1e-6  # noise-free: the law fits its own steps exactly
    got = prof.params
    # every term of the law comes back (r and the context term c, which trade off on noisy timestamps,
    # included), the prefill terms and the round trip too; terms the law lacks stay 0
    for name, value in LAW.items():
        assert got[name] == pytest.approx(value, rel=1e-6), (name, got)
    assert got["ell"] == pytest.approx(ELL, rel=1e-6)
    assert all(abs(v) < 1e-9 for k, v in got.items() if k not in LAW and k != "ell"), got
    for run, chk in prof.replay_checks.items():  # the server drafts exactly what replay says
        assert chk["gap"] == 0.0, (run, chk)
    # suffix's server served c1 before c4: the fit found its cache holding that run
    assert prof.replay_checks["suffix-k4/c4"].get("earlier_runs_on_this_server") == 1, prof.replay_checks
    assert len(res.checks) == 4
    for c in res.checks:  # in-sample
        assert c.error is not None and abs(c.error) < 1e-6, c

    unseen = dict([("off", None), spec("ngram", 2), spec("ngram", 8)])
    cells = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in unseen.items() for c in (2, 8)]
    val = law_servers(workload, LAW).grid(tmp_path / "val", [(c, 16) for c in cells])
    preds = predict_cells(prof, [workload], [c for c in cells if c.speculative_config], num_prompts=16)
    errors = {}
    for p in preds:
        measured, _, _ = measure_cell(val[("off", p.concurrency)], val[(p.label, p.concurrency)])
        assert measured is not None and p.speedup is not None
        errors[(p.label, p.concurrency)] = p.speedup / measured - 1
    assert len(errors) == 4 and all(abs(e) < 1e-6 for e in errors.values()), errors


@pytest.mark.slow
def test_paired_calibration_runs_every_pair_and_tracks_the_suffix_cache_per_repeat(workload: Path, tmp_path: Path) -> None:
    """``paired_repeats``: each candidate cell measured as baseline/candidate pairs back to back on real
    servers that stay up, over HTTP: every pair on disk, and the fit finds suffix decoding's cache holding
    ever more earlier runs, repeat by repeat."""
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
    # the suffix server's later repeats found its cache holding the earlier runs: the fit found them. Whole
    # runs apart (each repeat adds 16 requests' outputs to the cache), so no timing flips the count
    earlier = {run: chk.get("earlier_runs_on_this_server", 0) for run, chk in res.profile.replay_checks.items()
               if run.startswith("suffix-k4/")}
    assert earlier == {"suffix-k4/c1-r0": 0, "suffix-k4/c1-r1": 1, "suffix-k4/c4-r0": 2, "suffix-k4/c4-r1": 3}, earlier
    # one check per cell, each with both sides (how close they are is the benchmark's to print)
    assert sorted((c.label, c.concurrency) for c in res.checks) == [(lb, c) for lb in ("ngram-k4", "suffix-k4") for c in (1, 4)]
    assert all(c.predicted is not None and c.measured is not None for c in res.checks), res.checks


@pytest.mark.slow
def test_the_virtual_clock_writes_what_bench_records_of_the_real_server(workload: Path, tmp_path: Path) -> None:
    """The virtual runs the law's figures are checked on are the real server's runs less the timing: at
    concurrency 1 (each request alone, so no batching can differ), twice on the same servers, bench over
    real HTTP and the virtual clock give the same requests, the same tokens per chunk and the same per-step
    drafts and acceptances (suffix's cache holding the first run included) — only the times differ, and
    those are not compared."""
    specs = dict([("off", None), spec("ngram", 4), spec("suffix", 4)])
    cells = [CellSpec(label=lb, speculative_config=s, concurrency=1) for lb, s in specs.items()]
    runs = ("first", "again")  # twice on the same servers: suffix's cache then holds the first run (sampled outputs too)
    with ExitStack() as stack:
        target = serve(stack, workload, specs)
        http = {r: run_grid(cells, target, [workload], tmp_path / "http" / r, num_prompts=8, warmup=0) for r in runs}
    servers = law_servers(workload, LAW)
    virt = {r: servers.grid(tmp_path / "virtual" / r, [(c, 8) for c in cells]) for r in runs}

    def shape(d: Path) -> dict[str, tuple]:
        out = {}
        for r in ResultsFile(d / "results.jsonl").existing():
            sd = (r.extra.get("metrics") or {}).get("speculative_decoding") or {}
            out[r.id] = (r.ok, r.prompt_tokens, r.output_tokens, [c.n for c in r.chunks], sd.get("per_step_drafted"),
                         sd.get("per_step_accepted"), r.spec.model_dump(exclude={"source"}) if r.spec else None)
        return out

    for r in runs:
        for c in cells:
            live, synth = shape(http[r].cell_dir(c.label, 1)), shape(virt[r][(c.label, 1)])
            assert len(live) == 8 and live == synth, (r, c.label)
