"""``simulate`` with the shipped hidden-state heads on the shipped sample: the teacher-forced accuracy
training tools print stands beside the replayed acceptance (console column, JSON field, CSV column),
labelled optimistic; and a user's head whose config names no target here takes ``--target-model`` (or
the ``--tokenizer`` model directory), with one line naming the place when the target is missing or
does not fit."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from specgauge import models  # noqa: E402
from specgauge.cli import app  # noqa: E402

pytestmark = pytest.mark.skipif(not (models.available() and models.heads_available()), reason="shipped heads missing")
BASE = ["--limit", "12", "-k", "1-3"]


def _sim(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr with the terminal's line wrapping undone)."""
    r = CliRunner().invoke(app, ["simulate", *BASE, *args], env={"COLUMNS": "250"})
    return r.exit_code, r.stdout, " ".join(r.stderr.split())


def _summaries(stdout: str) -> dict[tuple[str, int], dict]:
    return {(s["method"], s["k"]): s for s in json.loads(stdout)["overall"]["summaries"]}


def test_teacher_forced_accuracy_stands_beside_the_replay(tmp_path: Path) -> None:
    methods = f"ngram,eagle3:{models.eagle3_dir()},mtp:{models.mtp_dir()}"
    code, out, err = _sim("-m", methods, "--json")
    assert code == 0, err
    s = _summaries(out)
    for head in ("eagle3:tiny-eagle3", "mtp:tiny-mtp"):
        rates = [s[(head, k)]["teacher_forced_acceptance_rate"] for k in (1, 2, 3)]
        assert all(r is not None and 0 < r < 1 for r in rates)
        # draft 1 reads the target's own hidden state: both figures are one figure at k = 1
        assert rates[0] == pytest.approx(s[(head, 1)]["acceptance_rate"])
        assert s[(head, 1)]["teacher_forced_per_position_rate"] == pytest.approx(s[(head, 1)]["per_position_rate"])
        assert rates[1] != s[(head, 2)]["acceptance_rate"] or rates[2] != s[(head, 3)]["acceptance_rate"]
    assert all(s[("ngram", k)]["teacher_forced_acceptance_rate"] is None for k in (1, 2, 3))  # not a head: no figure

    code, out, err = _sim("-m", methods, "--csv", str(tmp_path / "sim.csv"))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "teacher-forced" in out and "No server drafts that way" in flat  # the column, and the note that labels it
    rows = list(csv.DictReader((tmp_path / "sim.csv").open()))
    head_rows = [r for r in rows if r["method"].startswith("eagle3")]
    assert head_rows and all(r["teacher_forced_acceptance_rate"] for r in head_rows)
    assert all(not r["teacher_forced_acceptance_rate"] for r in rows if r["method"] == "ngram")
    # without a head the table has no such column
    code, out, _ = _sim("-m", "ngram")
    assert code == 0 and "teacher-forced" not in out
    # the figure is a column now, not a method of its own
    code, _, err = _sim("-m", f"eagle3_teacher_forced:{models.eagle3_dir()}")
    assert code == 2 and "unknown draft method 'eagle3_teacher_forced'" in err


def test_a_users_head_takes_its_target_or_says_where_to_give_it(tmp_path: Path) -> None:
    from specgauge.testing.engine import make_tiny_model

    head = tmp_path / "my-eagle3"
    shutil.copytree(models.eagle3_dir(), head)
    cfg = json.loads((head / "config.json").read_text())
    del cfg["target_model"]  # a head trained elsewhere: its config names no target found here
    (head / "config.json").write_text(json.dumps(cfg))
    m = f"eagle3:{head}"

    code, _, err = _sim("-m", m, "--json")
    assert code == 2 and "names no target" in err and "--target-model DIR" in err and "Traceback" not in err

    code, given, err = _sim("-m", m, "--target-model", str(models.target_dir()), "--json")
    assert code == 0, err
    code, from_tok, err = _sim("-m", m, "--tokenizer", str(models.target_dir()), "--json")
    assert code == 0, err
    code, shipped, err = _sim("-m", f"eagle3:{models.eagle3_dir()}", "--json")  # the shipped config names it
    assert code == 0, err
    per_k = [[s[k] for k in ("acceptance_rate", "teacher_forced_acceptance_rate")]
             for s in json.loads(shipped)["overall"]["summaries"]]
    for run in (given, from_tok):
        assert [[s[k] for k in ("acceptance_rate", "teacher_forced_acceptance_rate")]
                for s in json.loads(run)["overall"]["summaries"]] == per_k

    other = make_tiny_model(tmp_path / "other-target", vocab_size=96, hidden=32, layers=4, seed=1)
    code, _, err = _sim("-m", m, "--target-model", str(other))
    assert code == 2 and "vocab_size 4096 but the target has 96" in err and "other-target" in err
    code, _, err = _sim("-m", m, "--target-model", str(tmp_path / "nowhere"))
    assert code == 2 and "--target-model" in err and "no such directory" in err
    code, _, err = _sim("-m", "ngram", "--target-model", str(models.target_dir()))
    assert code == 2 and "--target-model: only for methods" in err
