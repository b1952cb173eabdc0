"""Plain bench outputs as calibration runs (``calibrate --from-runs``): a newcomer benches with a list of
concurrencies, or with ``--speculative-config``, and calibrates from that directory as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specgauge.predict.fit import expand_run_dirs
from specgauge.predict.runs import load_run
from specgauge.predict.types import ProfileError

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}


def _bench_dir(d: Path, conc: int, spec: dict | None = None, inferred_k: int | None = None) -> Path:
    d.mkdir(parents=True)
    (d / "results.jsonl").write_text("", encoding="utf-8")
    server = {"speculative_config_inferred": {"num_speculative_tokens": inferred_k}} if inferred_k else {}
    run = {"config": {"max_concurrency": conc, "speculative_config": spec}, "server": server}
    (d / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return d


def test_a_bench_over_a_list_of_concurrencies_stands_for_its_sub_directories(tmp_path: Path) -> None:
    for c in (16, 1, 4):
        _bench_dir(tmp_path / "b" / f"c{c}", c)
    (tmp_path / "b" / "c2-notes").mkdir()  # not a concurrency directory
    single = _bench_dir(tmp_path / "single", 2)
    dirs, cells = expand_run_dirs([tmp_path / "b", single])
    assert [d.relative_to(tmp_path).as_posix() for d in dirs] == ["b/c1", "b/c4", "b/c16", "single"]
    assert cells == {}
    assert load_run(dirs[2]).name == "b/c16" and load_run(dirs[2]).cell.concurrency == 16


def test_the_speculative_config_bench_was_told_describes_the_run(tmp_path: Path) -> None:
    rd = load_run(_bench_dir(tmp_path / "spec", 4, SPEC, inferred_k=3))
    assert (rd.method, rd.k, rd.cell.concurrency, rd.cell.label) == ("ngram", 3, 4, "ngram-k3")
    off = load_run(_bench_dir(tmp_path / "off", 1))
    assert (off.method, off.k, off.cell.label) == (None, 0, "off")


def test_a_speculating_server_without_its_config_is_refused_saying_what_to_add(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as e:
        load_run(_bench_dir(tmp_path / "b2", 2, None, inferred_k=3))
    msg = str(e.value)
    assert "k=3" in msg and "--speculative-config" in msg and "cell.json" in msg and "specgauge.predict" not in msg
    assert '"concurrency": 2' in msg
