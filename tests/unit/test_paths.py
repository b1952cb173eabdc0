"""Paths stored in results are never absolute, and read back to the same files."""

from __future__ import annotations

from pathlib import Path

from specgauge.paths import portable_path, resolve_portable
from specgauge.workload.samples import sample_logged_path


def test_builtin_sample_is_stored_by_name(tmp_path: Path) -> None:
    s = portable_path(sample_logged_path(), tmp_path / "out")
    assert s == "specgauge:samples/sample_logged.jsonl"
    assert resolve_portable(s, tmp_path / "out") == sample_logged_path().resolve()


def test_a_user_file_is_stored_relative_to_the_output_dir(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "data").mkdir()
    w = tmp_path / "data" / "w.jsonl"
    w.write_text("{}\n")
    out = tmp_path / "results" / "run1"
    out.mkdir(parents=True)
    s = portable_path(w, out)
    assert s == "../../data/w.jsonl" and not Path(s).is_absolute()
    assert resolve_portable(s, out).resolve() == w.resolve()
    monkeypatch.chdir(tmp_path)  # relative input paths resolve against the working directory first
    assert portable_path(Path("data/w.jsonl"), Path("results/run1")) == "../../data/w.jsonl"


def test_older_results_with_absolute_or_cwd_relative_paths_still_resolve(tmp_path: Path) -> None:
    assert resolve_portable(str(tmp_path / "w.jsonl"), tmp_path / "o") == tmp_path / "w.jsonl"
    assert resolve_portable("w.jsonl", tmp_path / "o") == Path("w.jsonl")  # not beside the run: as written


def test_public_url_drops_credentials_and_query_tokens() -> None:
    from specgauge.paths import public_url

    assert public_url("http://user:pw@h:8000/v1?token=abc#x") == "http://h:8000/v1"
    assert public_url("https://[::1]:9000/") == "https://[::1]:9000/"
    assert public_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"


def test_bench_run_json_never_holds_credentials(tmp_path) -> None:
    from specgauge.bench import BenchConfig

    cfg = BenchConfig(base_url="http://user:secret@127.0.0.1:8000/?api_key=tok-9f3a", workload=[tmp_path / "w.jsonl"],
                      output_dir=tmp_path / "out", api_key="sk-123")
    text = str(cfg.public())
    assert "secret" not in text and "tok-9f3a" not in text and "sk-123" not in text  # ("tok" alone is in max_tokens)


def test_speculative_configs_store_a_draft_model_without_machine_paths(tmp_path) -> None:
    import json

    from specgauge.paths import portable_specs, resolve_specs

    draft = tmp_path / "models" / "draft"
    draft.mkdir(parents=True)
    out = tmp_path / "sweep"
    out.mkdir()
    data = {"cells": [{"label": "d", "speculative_config": {"model": str(draft), "num_speculative_tokens": 2}},
                      {"label": "off", "speculative_config": None}]}
    stored = portable_specs(data, out)
    assert str(tmp_path) not in json.dumps(stored)
    assert stored["cells"][0]["speculative_config"] == {"model": "../models/draft", "num_speculative_tokens": 2}
    assert resolve_specs(stored, out) == {"cells": [{"label": "d", "speculative_config": {"model": str(draft.resolve()),
                                                                                          "num_speculative_tokens": 2}},
                                                    {"label": "off", "speculative_config": None}]}
