"""``specgauge.units``: the one grammar for durations, integer lists, k lists and NAME=VALUE pairs, used
by sweep, canary, simulate and the CLI alike; and SimulateConfig deciding what --speculative-config
sets from the fields the user gave (``model_fields_set``), not from flag strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specgauge.canary.config import parse_duration as canary_duration
from specgauge.config import MIN_SPEEDUP, ConfigError, SpeculativeConfig
from specgauge.simulate.run import SimulateConfig
from specgauge.sweep.models import SweepError
from specgauge.sweep.run import parse_duration as sweep_duration
from specgauge.units import parse_duration, parse_int_list, parse_ks, parse_pairs


@pytest.mark.parametrize(("text", "seconds"), [
    ("30min", 1800), ("90sec", 90), ("30m", 1800), ("1h30m", 5400), ("90", 90), ("90s", 90), ("500ms", 0.5),
    ("1.5m", 90), ("2h", 7200), (" 1h 30min ", 5400), ("2HR", 7200), ("1m30s", 90),
])
def test_durations_one_grammar(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == seconds
    assert sweep_duration(text) == seconds and canary_duration(text) == seconds  # the same grammar everywhere


def test_bad_durations_name_the_flag() -> None:
    for bad in ("0s", "soon", "-1", "1x", "", "m", "30 minutes"):
        with pytest.raises(ConfigError, match="--interval"):
            canary_duration(bad, "--interval")
        with pytest.raises(SweepError, match="--time-budget"):
            sweep_duration(bad or " ")
    assert sweep_duration(None) is None and canary_duration(2.5) == 2.5


def test_sweep_cli_time_budget_accepts_min_and_sec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``specgauge sweep --time-budget 30min`` / ``90sec`` reach the sweep's config (they were refused:
    the old alternation matched ``m`` / ``s`` first)."""
    from specgauge.cli import app

    seen: list[Any] = []

    class Stop(Exception):
        pass

    def fake_run(cfg: Any, console: Any = None) -> Any:
        seen.append(cfg.time_budget_s)
        raise Stop

    monkeypatch.setattr("specgauge.sweep.run.run_sweep", fake_run)
    for text, want in (("30min", 1800.0), ("90sec", 90.0)):
        r = CliRunner().invoke(app, ["sweep", "--url", "off=http://127.0.0.1:9", "--time-budget", text,
                                     "-o", str(tmp_path / text)])
        assert isinstance(r.exception, Stop), r.output
        assert seen[-1] == want


def test_lists_and_pairs() -> None:
    assert parse_int_list("1,4,16", "--c") == [1, 4, 16] and parse_int_list(None, "--c") == []
    assert parse_ks("2,4-6") == [2, 4, 5, 6] and parse_ks("8,2,2") == [2, 8]
    for bad in ("0", "3-1", "x", "1-100"):
        with pytest.raises(ConfigError, match="--k"):
            parse_ks(bad)
    with pytest.raises(ConfigError, match="--concurrency"):
        parse_int_list("1,0", "--concurrency")
    assert parse_pairs(["a=1", " b = x=y "], "--env") == {"a": "1", "b": "x=y"}
    for bad in ("novalue", "=1"):
        with pytest.raises(ConfigError, match=r"--env .*expected NAME=VALUE"):
            parse_pairs([bad], "--env")
    assert MIN_SPEEDUP == 1.05


def test_speculative_config_fills_only_what_was_not_given(tmp_path: Path) -> None:
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3)
    w = [tmp_path / "w.jsonl"]
    assert (SimulateConfig(workload=w, speculative_config=spec).methods, SimulateConfig(workload=w, speculative_config=spec).ks) == (["ngram"], [3])
    given = SimulateConfig(workload=w, speculative_config=spec, methods=["ngram", "suffix"], ks=list(range(1, 9)))
    assert given.methods == ["ngram", "suffix"] and given.ks == list(range(1, 9))  # typed as the defaults: still kept
    assert SimulateConfig(workload=w).methods == ["ngram", "suffix"]
