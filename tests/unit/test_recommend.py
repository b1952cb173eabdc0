"""specgauge.recommend: schedule construction and validation, the choice at one concurrency, one
recommendation from options, flags, and a recommendation from a hand-made sweep.json.

vLLM's own validator judges the schedules in tests/integration/test_sweep_vllm.py; here the same
rules (and stricter ones) are checked without vLLM."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.recommend import Option, RecommendSettings, recommend, recommend_from_sweep
from specgauge.recommend.choose import choose
from specgauge.recommend.flags import llamacpp_command, render_flags, sglang_command, vllm_command
from specgauge.recommend.schedule import bands_for, build_schedule, k_at, validate_schedule
from specgauge.stats.compare import CI
from specgauge.sweep.models import CellResult, SegmentSpeedup, SweepAnalysis, SweepManifest, SweepSettings

NG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
SX = {"method": "suffix", "num_speculative_tokens": 8}


def ng(k: int) -> dict:
    return {**NG, "num_speculative_tokens": k}


def opt(label: str, c: int, est: float, lo: float, hi: float, spec: dict, method: str = "ngram") -> Option:
    return Option(label=label, method=method, k=spec["num_speculative_tokens"], concurrency=c, estimate=est, low=lo, high=hi,
                  speculative_config=spec)


# ---------------------------------------------------------------------------- schedule


def test_bands_split_at_the_geometric_midpoint_and_cover_1_to_max_batch() -> None:
    assert bands_for([8, 1, 2, 4]) == [(1, 1, 1), (2, 2, 2), (4, 3, 5), (8, 6, 256)]
    assert bands_for([1, 16], max_batch=64) == [(1, 1, 4), (16, 5, 64)]
    assert bands_for([300], max_batch=256) == [(300, 1, 300)]


def test_build_schedule_merges_caps_and_starts_at_1() -> None:
    # starts at 3 -> extended to 1; equal neighbours merged; a gap closed by the range before it
    assert build_schedule([(3, 4, 4), (5, 8, 4), (12, 256, 0), (9, 10, 2)]) == [[1, 8, 4], [9, 11, 2], [12, 256, 0]]
    # k capped at num_speculative_tokens, and the capped neighbours merge
    assert build_schedule([(1, 2, 8), (3, 5, 6), (6, 9, 2)], num_speculative_tokens=5) == [[1, 5, 5], [6, 9, 2]]
    # overlap: the earlier range keeps its batch sizes
    assert build_schedule([(1, 6, 4), (4, 9, 2)]) == [[1, 6, 4], [7, 9, 2]]
    with pytest.raises(ValueError, match="k = 0 everywhere"):
        build_schedule([(1, 4, 0)])
    with pytest.raises(ValueError):
        build_schedule([(0, 4, 2)])


@pytest.mark.parametrize("bad, why", [
    ([], "non-empty"),
    ([[2, 4, 2]], "start at 1"),
    ([[1, 4, 2], [4, 8, 1]], "overlap"),
    ([[1, 4, 2], [6, 8, 1]], "gap"),
    ([[1, 4, 5]], "exceeds"),
    ([[1, 4, -1]], ">= 0"),
    ([[3, 2, 1]], "start must be <= end"),
    ([[5, 8, 1], [1, 4, 2]], "sorted"),
    ([[1, 4]], "three integers"),
])
def test_validate_schedule_rejects(bad: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        validate_schedule(bad, 4)


def test_k_at_follows_vllms_lookup() -> None:
    s = [[1, 2, 4], [3, 8, 2], [9, 16, 0]]
    assert [k_at(s, b) for b in (1, 2, 3, 8, 9, 16, 40)] == [4, 4, 2, 2, 0, 0, 0]


# ---------------------------------------------------------------------------- choose


def test_off_when_no_interval_clears_the_margin_and_the_reason_shows_the_best() -> None:
    b = choose([opt("ngram-k4", 4, 1.10, 0.98, 1.22, ng(4)), opt("ngram-k2", 4, 1.04, 1.01, 1.07, ng(2))], 4, [3, 5], 1.05)
    assert b.choice == "off" and b.option is None and b.best is not None and b.best.label == "ngram-k4"
    assert "clears 1.05×" in b.reason and "ngram-k4 1.10× [0.98, 1.22]" in b.reason


def test_overlapping_intervals_prefer_the_cheaper_config() -> None:
    lead = opt("suffix-k8", 1, 1.60, 1.40, 1.80, SX, "suffix")
    cheap = opt("ngram-k4", 1, 1.50, 1.30, 1.70, ng(4))
    b = choose([lead, cheap], 1, [1, 1], 1.05)
    assert b.choice == "ngram-k4" and b.overlapping == ["suffix-k8"] and "simpler/cheaper" in b.reason
    # no overlap: the leader wins
    far = opt("suffix-k8", 1, 2.5, 2.2, 2.8, SX, "suffix")
    assert choose([far, cheap], 1, [1, 1], 1.05).choice == "suffix-k8"
    # same method, overlapping: the shorter proposal
    assert choose([opt("ngram-k8", 1, 1.5, 1.3, 1.7, ng(8)), opt("ngram-k2", 1, 1.45, 1.25, 1.6, ng(2))], 1, [1, 1], 1.05).choice == "ngram-k2"


# ---------------------------------------------------------------------------- recommend


def _schedule_options() -> list[Option]:
    return [
        opt("ngram-k4", 1, 1.80, 1.60, 2.00, ng(4)), opt("ngram-k2", 1, 1.40, 1.30, 1.50, ng(2)),
        opt("ngram-k4", 4, 1.10, 1.02, 1.18, ng(4)), opt("ngram-k2", 4, 1.25, 1.19, 1.31, ng(2)),
        opt("ngram-k4", 16, 0.80, 0.75, 0.85, ng(4)), opt("ngram-k2", 16, 0.95, 0.90, 1.00, ng(2)),
    ]


def test_recommend_builds_a_schedule_when_the_best_k_changes_with_batch_size() -> None:
    r = recommend(_schedule_options(), [1, 4, 16], source="sweep", source_name="s", settings=RecommendSettings(model="m"))
    assert r.verdict == "speculate" and r.method == "ngram"
    assert [b.choice for b in r.bands] == ["ngram-k4", "ngram-k2", "off"]
    assert r.schedule == [[1, 2, 4], [3, 8, 2], [9, 256, 0]]
    assert r.speculative_config == {**ng(4), "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 8, 2], [9, 256, 0]]}
    validate_schedule(r.schedule, r.speculative_config["num_speculative_tokens"])
    assert any("#49548" in n and "k = 0 is not 'off'" in n for n in r.notes)
    words = shlex.split(r.flags.vllm)
    assert words[:3] == ["vllm", "serve", "m"] and json.loads(words[words.index("--speculative-config") + 1]) == r.speculative_config
    assert r.flags.llamacpp is not None and "--spec-ngram-simple-size-m 4" in r.flags.llamacpp  # the k for one request
    assert any("no batch-size schedule" in n for n in r.flags.llamacpp_notes)


def test_recommend_static_k_and_off() -> None:
    opts = [opt("ngram-k4", c, 1.5, 1.3, 1.7, ng(4)) for c in (1, 4)]
    r = recommend(opts, [1, 4], source="sweep", source_name="s")
    assert r.schedule is None and r.speculative_config == ng(4) and "k = 4" in r.headline
    off = recommend([opt("ngram-k4", c, 1.02, 0.95, 1.09, ng(4)) for c in (1, 4)], [1, 4], source="sweep", source_name="s")
    assert off.verdict == "off" and off.speculative_config is None
    assert "--speculative-config" not in off.flags.vllm and off.flags.vllm == "vllm serve MODEL"
    assert len(off.reasons) == 2 and all("clears 1.05×" in w for w in off.reasons)
    assert "does not pay" in off.headline


def test_one_method_per_server_and_other_methods_noted() -> None:
    opts = _schedule_options() + [opt("suffix-k8", 1, 3.0, 2.6, 3.4, SX, "suffix")]
    r = recommend(opts, [1, 4, 16], source="sweep", source_name="s")
    # suffix wins only band 1, ngram wins band 4: a tie in bands won goes to the higher mean speedup
    assert r.method == "suffix" and r.schedule == [[1, 2, 8], [3, 256, 0]]
    assert any("at concurrency 4" in n and "ngram-k2" in n for n in r.notes)


# ---------------------------------------------------------------------------- flags


def test_flags_per_engine() -> None:
    draft = {"model": "/models/tiny-draft", "num_speculative_tokens": 3}
    assert vllm_command(None, "m") == "vllm serve m"
    ll, notes = llamacpp_command(draft, "/models/tiny-target")
    assert ll == "llama-server -m tiny-target.gguf -md tiny-draft.gguf --spec-type draft-simple --spec-draft-n-max 3 --spec-draft-n-min 0"
    assert any("convert_hf_to_gguf" in n for n in notes)
    sg, _ = sglang_command(draft, "m")
    assert sg is not None and "--speculative-algorithm STANDALONE" in sg and "--speculative-num-draft-tokens 4" in sg
    f = render_flags(SX, "m")
    assert f.llamacpp is None and f.sglang is None and "suffix" in f.llamacpp_notes[0] and "suffix" in f.sglang_notes[0]
    assert json.loads(shlex.split(f.vllm)[-1]) == SX


# ---------------------------------------------------------------------------- from a hand-made sweep.json


def _cell(label: str, c: int, spec: dict | None, est: float | None = None, lo: float = 0, hi: float = 0,
          segs: dict[str, tuple[float, float, float]] | None = None, greedy: tuple[int, int] = (0, 0)) -> CellResult:
    method, k = (None, 0) if spec is None else (spec.get("method", "draft_model"), spec["num_speculative_tokens"])
    cr = CellResult(label=label, method=method, k=k, concurrency=c, status="done", speculative_config=spec, requests=40,
                    completed=40, greedy_pairs=greedy[0], greedy_matches=greedy[1])
    if est is not None:
        cr.speedup = CI(estimate=est, low=lo, high=hi, n=40)
        cr.segments = [SegmentSpeedup(segment=s, pairs=20, speedup=CI(estimate=e, low=a, high=b, n=20)) for s, (e, a, b) in (segs or {}).items()]
    return cr


def _write_sweep(d: Path) -> Path:
    cells = [
        _cell("off", 1, None), _cell("off", 8, None),
        _cell("ngram-k4", 1, ng(4), 1.5, 1.3, 1.7, {"code": (2.0, 1.7, 2.3), "chat": (1.02, 0.9, 1.15)}, greedy=(40, 40)),
        _cell("ngram-k4", 8, ng(4), 0.9, 0.85, 0.95, {"code": (1.2, 1.1, 1.3), "chat": (0.8, 0.7, 0.9)}, greedy=(40, 40)),
        _cell("suffix-k8", 1, SX, 2.5, 2.2, 2.8, greedy=(40, 30)),  # changed 10 greedy outputs: never recommended
        _cell("suffix-k4", 1, {**SX, "num_speculative_tokens": 4}, 2.4, 2.1, 2.7),
    ]
    cells[-1].failed = 2  # more failures than the baseline: never recommended
    a = SweepAnalysis(baseline="off", min_speedup=1.0, concurrencies=[1, 8], labels=["off", "ngram-k4", "suffix-k8", "suffix-k4"],
                      segments=["chat", "code"], cells=cells)
    m = SweepManifest(settings=SweepSettings(workload=["w.jsonl"]), analysis=a)
    d.mkdir()
    m.save(d)
    return d


def test_recommend_from_a_hand_made_sweep_json(tmp_path: Path) -> None:
    r = recommend_from_sweep(_write_sweep(tmp_path / "mysweep"))
    assert r.source == "sweep" and r.source_name == "mysweep"
    assert [b.choice for b in r.bands] == ["ngram-k4", "off"]
    assert r.schedule == [[1, 2, 4], [3, 256, 0]]
    assert any("suffix-k8" in n and "10 of 40 greedy outputs" in n for n in r.notes)
    assert any("suffix-k4" in n and "2 of 40 requests failed, 0 without speculation" in n for n in r.notes)
    segs = {s.segment: s for s in r.segments}
    assert [b.choice for b in segs["code"].bands] == ["ngram-k4", "ngram-k4"]
    assert [b.choice for b in segs["chat"].bands] == ["off", "off"] and "off" in segs["chat"].summary
    assert any("stops paying" in x for x in r.crossovers)


def test_recommend_cli_json_and_user_errors(tmp_path: Path) -> None:
    d = _write_sweep(tmp_path / "s")
    out = tmp_path / "rec.json"
    r = subprocess.run([sys.executable, "-m", "specgauge", "recommend", str(d), "--json", "-o", str(out), "--model", "m"],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["kind"] == "specgauge.recommendation" and data == json.loads(out.read_text())
    assert data["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 256, 0]]
    bad = subprocess.run([sys.executable, "-m", "specgauge", "recommend", str(tmp_path / "nope")], capture_output=True, text=True, check=False, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "sweep.json" in bad.stderr
    # the report takes the recommendation JSON and the sweep directory
    rep = subprocess.run([sys.executable, "-m", "specgauge", "report", str(d), str(out), "-o", str(tmp_path / "r.html")],
                         capture_output=True, text=True, check=False, timeout=120)
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'id="sweep-0"' in html and 'id="recommendation-0"' in html and "num_speculative_tokens_per_batch_size" in html


def test_report_reads_a_sweep_once_and_renders_the_stored_recommendation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report computes nothing it was given: sweep.json is read once, and the recommendation
    ``specgauge sweep`` stored beside it is rendered as stored; without one (or older than sweep.json)
    it is computed from that same reading."""
    from specgauge.recommend import sources
    from specgauge.report.sweep_html import split_inputs
    from specgauge.sweep import models

    d = _write_sweep(tmp_path / "mysweep")
    loads: list[Path] = []
    real_load = models.SweepManifest.load.__func__  # type: ignore[attr-defined]

    def counting_load(cls: type, path: Path) -> models.SweepManifest:
        loads.append(Path(path))
        return real_load(cls, path)

    monkeypatch.setattr(models.SweepManifest, "load", classmethod(counting_load))
    (sec,), recs, rest = split_inputs([d])
    assert len(loads) == 1 and not recs and not rest
    assert sec.recommendation is not None and [b.choice for b in sec.recommendation.bands] == ["ngram-k4", "off"]
    stored = sources.store_recommendation(models.SweepManifest.model_validate_json((d / "sweep.json").read_text()), d)
    assert stored == d / sources.STORED

    def no_compute(*a: object, **k: object) -> None:
        raise AssertionError("the report recomputed a stored recommendation")

    monkeypatch.setattr(sources, "recommend_from_manifest", no_compute)
    loads.clear()
    (sec2,), _, _ = split_inputs([d])
    assert len(loads) == 1 and sec2.recommendation == sec.recommendation
