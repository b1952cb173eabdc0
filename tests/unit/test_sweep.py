"""specgauge.sweep: grid expansion, server command templates, the grid runner (resume, time budget,
a server that does not start) and the analysis (Pareto front, crossover) on hand-made data.

The runner tests bench two real loopback HTTP servers (the scripted ``FakeServer``: one without
speculation, one whose chunks carry several tokens, as a speculative server's do), so every cell is
a real bench run; what is scripted is only the servers' timing, which a test cannot get otherwise.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from specgauge.config import ConfigError
from specgauge.testing.fakeserver import FakeServer
from specgauge.predict.types import CellPrediction, CellSpec
from specgauge.records import ResultsFile
from specgauge.stats.compare import CI
from specgauge.sweep import ServerTarget, SweepError, SweepManifest, run_grid
from specgauge.sweep.analysis import attach_predictions, crossover, pareto_front
from specgauge.sweep.grid import (
    build_configs,
    cells_for,
    config_from_label,
    config_label,
    expand_grid,
    parse_config,
)
from specgauge.sweep.models import CellResult
from specgauge.sweep.run import parse_duration, reanalyze
from specgauge.sweep.target import render_command

NGRAM4 = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


# ---------------------------------------------------------------------------- grid


def test_parse_config_forms() -> None:
    assert parse_config("off").speculative_config is None and parse_config("off").label == "off"
    c = parse_config(json.dumps(NGRAM4))
    assert c.label == "ngram-k4" and c.speculative_config == NGRAM4
    named = parse_config("wide=" + json.dumps({"method": "suffix", "num_speculative_tokens": 8}))
    assert named.label == "wide" and named.speculative_config == {"method": "suffix", "num_speculative_tokens": 8}
    assert config_label({"model": "/m/draft", "num_speculative_tokens": 2}) == "draft_model-k2"
    assert config_label({**NGRAM4, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 8, 2]]}) == "ngram-k4-sched"


@pytest.mark.parametrize("text, needle", [
    ("{not json", "not JSON"),
    ('{"method": "ngram"}', "num_speculative_tokens"),
    ("[1, 2]", "expected a JSON object"),
    ('bad label!={"method":"suffix"}', "label"),
])
def test_parse_config_errors_name_the_flag(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    assert "--config" in str(e.value) and needle in str(e.value)


def test_grid_expansion_method_major_with_draft_model_dir() -> None:
    cfgs = expand_grid(["ngram", "suffix", "draft_model:models/d"], [2, 8])
    assert [c.label for c in cfgs] == ["ngram-k2", "ngram-k8", "suffix-k2", "suffix-k8", "draft_model-k2", "draft_model-k8"]
    assert cfgs[0].speculative_config == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    assert cfgs[-1].speculative_config == {"model": "models/d", "num_speculative_tokens": 8}
    with pytest.raises(ConfigError, match="--k"):
        expand_grid(["ngram"], [])
    with pytest.raises(ConfigError, match="draft_model:DIR"):
        expand_grid(["draft_model"], [2])


def test_build_configs_adds_off_first_drops_duplicates_and_renames_clashes() -> None:
    other = {**NGRAM4, "prompt_lookup_max": 5}
    cfgs = build_configs([parse_config(json.dumps(NGRAM4)), parse_config(json.dumps(NGRAM4)), parse_config(json.dumps(other))])
    assert [c.label for c in cfgs] == ["off", "ngram-k4", "ngram-k4-2"]
    assert cfgs[2].speculative_config == other
    cells = cells_for(cfgs, [4, 1, 4])
    assert [(c.label, c.concurrency) for c in cells] == [("off", 1), ("off", 4), ("ngram-k4", 1), ("ngram-k4", 4),
                                                         ("ngram-k4-2", 1), ("ngram-k4-2", 4)]
    assert config_from_label("suffix-k8").speculative_config == {"method": "suffix", "num_speculative_tokens": 8}
    with pytest.raises(ConfigError, match="--config 'eagle-k2="):
        config_from_label("eagle-k2")


def test_parse_duration() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400 and parse_duration("90") == 90
    assert parse_duration(None) is None
    with pytest.raises(SweepError, match="--time-budget"):
        parse_duration("soon")


# ---------------------------------------------------------------------------- server targets


def test_command_template_spec_is_one_argument_and_off_drops_its_flag() -> None:
    t = "HF_HUB_OFFLINE=1 vllm serve {model} --port {port} --speculative-config {spec} {spec:--per-request=detailed} --dtype float32"
    argv, env = render_command(t, port=8123, spec=NGRAM4, model="m")
    assert env == {"HF_HUB_OFFLINE": "1"}
    assert argv[:5] == ["vllm", "serve", "m", "--port", "8123"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == NGRAM4
    assert argv[-3:] == ["--per-request=detailed", "--dtype", "float32"]
    off, _ = render_command(t, port=8123, spec=None, model="m")
    assert off == ["vllm", "serve", "m", "--port", "8123", "--dtype", "float32"]
    # a JSON value with quotes and spaces survives as one word, never through a shell
    spec = {"method": "ngram", "num_speculative_tokens": 2, "x": "a b'; rm -rf /"}
    argv, _ = render_command("srv --port={port} --speculative-config={spec}", port=1, spec=spec)
    assert argv == ["srv", "--port=1", "--speculative-config=" + json.dumps(spec, separators=(",", ":"))]


def test_command_target_checks_and_never_writes_secrets() -> None:
    with pytest.raises(ConfigError, match=r"\{port\}"):
        ServerTarget.from_command("vllm serve m --speculative-config {spec}")
    with pytest.raises(ConfigError, match="--model"):
        ServerTarget.from_command("vllm serve {model} --port {port}")
    t = ServerTarget.from_command("TOKEN_X=abc vllm serve m --port {port} --api-key sk-123 --speculative-config {spec}")
    pub = json.dumps(t.public())
    assert "sk-123" not in pub and "abc" not in pub and "***" in pub
    no_spec = ServerTarget.from_command("vllm serve m --port {port}")
    with pytest.raises(ConfigError, match=r"\{spec\}"):
        no_spec.check_labels(["off", "ngram-k4"], {"off": False, "ngram-k4": True})
    urls = ServerTarget.from_urls({"off": "http://u:pw@127.0.0.1:1/"})
    assert "pw" not in json.dumps(urls.public())
    with pytest.raises(ConfigError, match="--url ngram-k4="):
        urls.check_labels(["off", "ngram-k4"], {"off": False, "ngram-k4": True})


# ---------------------------------------------------------------------------- the runner


def _workload(tmp: Path, n: int = 6) -> Path:
    p = tmp / "w.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "prompt": "tokens:12 delay_ms:10", "max_tokens": 12, "temperature": 0.0,
                                     "segment": "ab"[i % 2]}) + "\n" for i in range(n)))
    return p


@pytest.fixture()
def two_servers():
    with FakeServer(spec=False) as off, FakeServer() as on:
        off.override, on.override = "per:1", "per:3"  # the speculative one sends 3 tokens per step
        yield off, on


CELLS = [CellSpec(label=lb, speculative_config=s, concurrency=c) for lb, s in (("off", None), ("ngram-k4", NGRAM4)) for c in (1, 2)]


def test_run_grid_resume_skips_finished_cells_and_continues_a_broken_one(tmp_path: Path, two_servers) -> None:
    off, on = two_servers
    target = ServerTarget.from_urls({"off": off.base_url, "ngram-k4": on.base_url})
    w, out = _workload(tmp_path), tmp_path / "sweep"
    res = run_grid(CELLS, target, [w], out, num_prompts=6, warmup=0)
    assert sorted(res.ran) == sorted((c.label, c.concurrency) for c in CELLS)
    m = SweepManifest.load(out)
    assert [c.status for c in m.cells] == ["done"] * 4 and m.settings.num_prompts == 6
    assert not Path(m.settings.workload[0]).is_absolute()  # no machine paths in sweep.json
    for c in m.cells:
        assert len(ResultsFile(out / c.dir / "results.jsonl").existing()) == 6

    with pytest.raises(SweepError, match="--resume"):
        run_grid(CELLS, target, [w], out, num_prompts=6)
    with pytest.raises(SweepError, match="num_prompts"):
        run_grid(CELLS, target, [w], out, num_prompts=4, resume=True)

    # break one cell: half its results, no summary, marked interrupted
    cell = m.cell("ngram-k4", 2)
    assert cell is not None
    rpath = out / cell.dir / "results.jsonl"
    rpath.write_text("".join(rpath.read_text().splitlines(keepends=True)[:3]))
    (out / cell.dir / "summary.json").unlink()
    cell.status = "interrupted"
    m.save(out)
    sent_before = on.requests
    res = run_grid(CELLS, target, [w], out, num_prompts=6, resume=True, warmup=0)
    assert res.ran == [("ngram-k4", 2)]
    assert on.requests - sent_before == 3  # only the missing requests were sent again
    recs = ResultsFile(rpath).existing()
    assert len(recs) == 6 and len({r.id for r in recs}) == 6
    assert SweepManifest.load(out).cell("ngram-k4", 2).status == "done"  # type: ignore[union-attr]

    # and the analysis: the 3-tokens-per-step server is faster, paired over the same 6 ids
    a = reanalyze(out).analysis
    assert a is not None and a.baseline == "off"
    for c in (1, 2):
        cr = a.cell("ngram-k4", c)
        assert cr is not None and cr.speedup is not None and cr.speedup.n == 6
        assert cr.speedup.estimate > 1.0 and cr.acceptance_rate is not None
        assert cr.greedy_pairs == 6 and cr.greedy_matches == 6
        assert {s.segment for s in cr.segments} == {"a", "b"}
    assert a.crossovers[0].label == "ngram-k4"


def test_time_budget_lists_every_cell_not_run_as_skipped(tmp_path: Path, two_servers) -> None:
    off, on = two_servers
    target = ServerTarget.from_urls({"off": off.base_url, "ngram-k4": on.base_url})
    now = [0.0]

    def clock() -> float:
        return now[0]

    def tick(_cell: object) -> None:  # each finished cell "takes" 40 s of a 100 s budget
        now[0] += 40.0

    res = run_grid(CELLS, target, [_workload(tmp_path)], tmp_path / "s", num_prompts=6, warmup=0, time_budget_s=100,
                   on_cell=tick, clock=clock)
    m = SweepManifest.load(tmp_path / "s")
    assert len(m.cells) == 4  # nothing dropped
    assert [c.status for c in m.cells] == ["done", "done", "done", "skipped"]
    assert "time budget" in (m.cell("ngram-k4", 2).skipped_reason or "")  # type: ignore[union-attr]
    assert [c.key for c in res.skipped] == [("ngram-k4", 2)]
    # resuming without a budget runs just the skipped cell
    res2 = run_grid(CELLS, target, [_workload(tmp_path)], tmp_path / "s", num_prompts=6, warmup=0, resume=True)
    assert res2.ran == [("ngram-k4", 2)]


def test_a_server_that_does_not_start_fails_its_cells_with_the_reason(tmp_path: Path) -> None:
    cmd = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(3)' --port {{port}} --speculative-config {{spec}}"
    target = ServerTarget.from_command(cmd, health_timeout_s=30)
    res = run_grid(CELLS, target, [_workload(tmp_path)], tmp_path / "s", num_prompts=2)
    m = SweepManifest.load(tmp_path / "s")
    assert [c.status for c in m.cells] == ["failed"] * 4 and len(res.failed) == 4
    assert all("exited with status 3" in (c.error or "") for c in m.cells)
    assert all(str(tmp_path) not in (c.error or "") for c in m.cells)  # paths inside the sweep are relative
    assert (tmp_path / "s" / "off" / "server.log").exists()


# ---------------------------------------------------------------------------- analysis on hand-made data


def _cell(label: str, c: int, tput: float, p95: float) -> CellResult:
    return CellResult(label=label, method=None, k=0, concurrency=c, status="done", throughput_tok_s=tput, e2e_p95_ms=p95)


def test_pareto_front() -> None:
    cells = [_cell("off", 1, 100, 500), _cell("off", 4, 300, 900), _cell("ng", 1, 180, 300), _cell("ng", 4, 280, 950),
             _cell("sx", 4, 300, 800)]
    front = pareto_front(cells)
    assert [(p.label, p.concurrency) for p in front] == [("ng", 1), ("sx", 4)]  # off@4 ties sx@4 on throughput but is slower


def test_crossover_interpolates_in_log2_concurrency_and_reads_the_cis() -> None:
    x = crossover("ng", [(4, 0.9, 0.8, 0.95), (1, 1.5, 1.3, 1.7), (2, 1.2, 1.05, 1.3), (8, 0.7, 0.6, 0.8)], 1.0)
    assert x.status == "stops_paying" and x.between == [2, 4]
    assert x.concurrency == pytest.approx(2 ** (1 + 0.2 / 0.3))
    assert x.clearly_pays_up_to == 2 and x.clearly_stops_by == 4
    assert crossover("ng", [(1, 1.3, 1.1, 1.5), (2, 1.2, 0.9, 1.4)], 1.0).status == "pays_throughout"
    assert crossover("ng", [(1, 0.9, 0.8, 1.1)], 1.0).status == "never_pays"
    assert crossover("ng", [(1, 0.9, 0.8, 1.1), (4, 1.2, 1.1, 1.3)], 1.0).status == "starts_paying"
    assert crossover("ng", [(1, 1.2, 1.1, 1.3), (2, 0.9, 0.8, 1.0), (4, 1.2, 1.1, 1.3)], 1.0).status == "mixed"
    assert crossover("ng", [], 1.0).status == "no_data"


def test_predicted_beside_measured_error_and_ci() -> None:
    from specgauge.sweep.models import SweepAnalysis

    c = _cell("ng", 2, 1, 1)
    c.speedup = CI(estimate=1.25, low=1.1, high=1.4, n=20)
    a = SweepAnalysis(baseline="off", min_speedup=1.0, concurrencies=[2], labels=["off", "ng"], cells=[c])
    attach_predictions(a, [CellPrediction(label="ng", method="ngram", k=4, concurrency=2, speedup=1.5)])
    assert c.prediction_error == pytest.approx(0.2) and c.prediction_in_ci is False


def test_resume_takes_a_draft_model_named_by_another_path_to_the_same_directory(tmp_path: Path, two_servers,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """sweep.json stores a draft model's directory portably and reads it back absolute: resuming with the
    same directory named relatively is the same config, another directory is not."""
    off, on = two_servers
    (tmp_path / "draft").mkdir()
    (tmp_path / "other").mkdir()
    target = ServerTarget.from_urls({"off": off.base_url, "dm": on.base_url})
    w, out = _workload(tmp_path), tmp_path / "sweep"

    def cells(model: str) -> list[CellSpec]:
        return [CellSpec(label="off", speculative_config=None, concurrency=1),
                CellSpec(label="dm", speculative_config={"model": model, "num_speculative_tokens": 2}, concurrency=1)]

    run_grid(cells(str(tmp_path / "draft")), target, [w], out, num_prompts=2, warmup=0)
    monkeypatch.chdir(tmp_path)
    assert run_grid(cells("draft"), target, [w], out, num_prompts=2, warmup=0, resume=True).ran == []
    with pytest.raises(SweepError, match="label the new config differently"):
        run_grid(cells("other"), target, [w], out, num_prompts=2, warmup=0, resume=True)
