"""Server flags for the hidden-state methods: EAGLE-3 names its head, MTP is the target's own layers (checked
against vLLM 0.32's config/speculative.py and SGLang's server_args: NEXTN is EAGLE, topk 1 needs
num_draft_tokens = steps + 1); a recommendation of them reaches the report and the console."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from specgauge.recommend.flags import render_flags


def test_eagle3_flags_name_the_head() -> None:
    f = render_flags({"method": "eagle3", "model": "heads/tiny-eagle3", "num_speculative_tokens": 3}, "tiny-target")
    assert json.loads(shlex.split(f.vllm)[-1]) == {"method": "eagle3", "model": "heads/tiny-eagle3", "num_speculative_tokens": 3}
    assert f.sglang is not None and "--speculative-algorithm EAGLE3 --speculative-draft-model-path heads/tiny-eagle3" in f.sglang
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in f.sglang
    assert f.llamacpp is None


def test_mtp_flags_read_the_targets_own_layers() -> None:
    f = render_flags({"method": "mtp", "model": "heads/tiny-mtp", "num_speculative_tokens": 2}, "deepseek-ai/DeepSeek-V3")
    assert f.vllm_speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert json.loads(shlex.split(f.vllm)[-1]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert f.sglang is not None and "--speculative-algorithm EAGLE --speculative-num-steps 2" in f.sglang
    assert "draft-model-path" not in f.sglang and any("MTP" in n for n in f.sglang_notes)


def test_a_sweep_that_finds_eagle3_paying_recommends_its_flags_and_the_report_shows_them(tmp_path: Path) -> None:
    """From a hand-made sweep.json whose EAGLE-3 cells pay: the recommendation names the head in vLLM's
    config and SGLang's EAGLE3 flags, and the HTML report and the console render them as stored."""
    from rich.console import Console

    from specgauge.recommend import recommend_from_sweep
    from specgauge.report.html import ReportConfig, write_report
    from specgauge.report.sweep_console import render_recommendation
    from specgauge.stats.compare import CI
    from specgauge.sweep.models import CellResult, SweepAnalysis, SweepManifest, SweepSettings

    spec = {"method": "eagle3", "model": "heads/my-eagle3", "num_speculative_tokens": 3}

    def cell(c: int, s: dict | None, est: float | None = None) -> CellResult:
        cr = CellResult(label="off" if s is None else "eagle3-k3", method=None if s is None else "eagle3",
                        k=0 if s is None else 3, concurrency=c, status="done", speculative_config=s, requests=40,
                        completed=40, greedy_pairs=40, greedy_matches=40)
        if est is not None:
            cr.speedup = CI(estimate=est, low=est - 0.1, high=est + 0.1, n=40)
        return cr

    a = SweepAnalysis(baseline="off", min_speedup=1.0, concurrencies=[1, 8], labels=["off", "eagle3-k3"], segments=[],
                      cells=[cell(1, None), cell(8, None), cell(1, spec, 1.8), cell(8, spec, 1.4)])
    d = tmp_path / "sweep"
    d.mkdir()
    SweepManifest(settings=SweepSettings(workload=["w.jsonl"]), analysis=a).save(d)
    r = recommend_from_sweep(d)
    assert r.verdict == "speculate" and r.method == "eagle3" and r.speculative_config == spec
    assert json.loads(shlex.split(r.flags.vllm)[-1]) == spec
    sg = "--speculative-algorithm EAGLE3 --speculative-draft-model-path heads/my-eagle3 --speculative-num-steps 3"
    assert r.flags.sglang is not None and sg in r.flags.sglang and r.flags.llamacpp is None
    write_report(ReportConfig(inputs=[d], out=tmp_path / "r.html"))
    html = (tmp_path / "r.html").read_text()
    assert sg in html and "&#34;method&#34;:&#34;eagle3&#34;" in html.replace("&quot;", "&#34;")
    con = Console(record=True, width=400)
    render_recommendation(r, con)
    text = con.export_text()
    assert sg in text and '"method":"eagle3"' in text
