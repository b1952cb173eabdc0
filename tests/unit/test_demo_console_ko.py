"""The Korean demo's console, checked in every branch without running the demo (issue 40 item 11).

``tests/integration/test_report_ko.py`` scans one real ``specgauge demo --lang ko`` run (≈ 15 min on 2 cores),
which prints only the branches that machine's timings took: the causes of a gap between prediction and
A/B (the "measurement noise" cause says CPU), a fitted knee, "nothing pays" or a candidate. Here each of
the demo's own lines is rendered in Korean in every branch, and the law's table with and without a
knee, and read with the same checker (``test_report_ko_sections.console_english``): names the Korean
catalogue writes itself and the law's parameter names are names, whatever a run prints."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

import specgauge.demo as demo
from specgauge.i18n import t, use_lang
from specgauge.predict.fit import fit_profile
from specgauge.report.predict_console import render_profile_fit
from tests.unit.test_predict_fit import calibration
from tests.unit.test_report_ko_sections import DATA, console_english, names

#: the data in these lines: run labels (the demo's, and the calibration runs' of tests/unit/test_predict_fit)
LABELS = {"ngram-k2", "tiny-target", *(f"{c}-c{n}" for c in ("off", "ngram-k4") for n in (1, 4))}


def _english(text: str) -> list[str]:
    return sorted({w for w, _ in console_english(text, DATA | LABELS)})


def _pred(extrapolated: bool, notes: list[str]) -> SimpleNamespace:
    return SimpleNamespace(acceptance_rate=0.42, extrapolated=extrapolated, notes=notes, label="ngram-k2", speedup=1.31,
                           speedup_low=1.12, speedup_high=1.5, tokens_per_forward=2.6, mean_acceptance_length=1.8)


def test_every_branch_of_the_demos_own_lines_reads_korean() -> None:
    cmp = SimpleNamespace(overall=SimpleNamespace(speedup=SimpleNamespace(low=0.81, high=0.93)))
    live = {"specgauge": {"acceptance": {"counters": {"acceptance_rate": 0.42}}}}
    gap = {"specgauge": {"acceptance": {"counters": {"acceptance_rate": 0.31}}}}
    note = "predicted speedup: UNCALIBRATED cost model (guessed costs; not fitted on a live server); fit your " \
           "server's law with `specgauge calibrate` and pass its cost_profile.json as --cost-profile"
    law = SimpleNamespace(params={"a": 0.004, "b": 6e-4, "b2": 2e-5, "knee": 150.0, "host[ngram]": 5e-4, "ell": 0.001})
    with use_lang("ko"):
        lines = [
            *(demo.agreement(p, m, lo, hi)[1] for p, m, lo, hi in ((1.3, None, None, None), (1.3, 1.28, 1.1, 1.4),
                                                                   (1.3, 1.0, 0.9, 1.35), (1.3, 0.87, 0.8, 0.95))),
            *demo.disagreement_reasons(_pred(True, [note]), cmp, live),  # every cause: acceptance, extrapolated, noise, a note
            *demo.disagreement_reasons(_pred(False, []), cmp, gap),
            *demo._why_not(law, _pred(False, [])),
            t("demo.candidate", label="ngram-k2", x="1.31x", c=4, band=t("demo.band", lo="1.12", hi="1.50x")),
            t("demo.nothing_pays", label="ngram-k2", x="0.97x", band="–", c=4, m="1.05"),
            t("demo.ab_anyway", label="ngram-k2"),
            t("demo.pred_vs_meas", label="ngram-k2", c=4, line="…"), t("demo.cause", text="…"), t("demo.why", text="…"),
            t("demo.uncalibrated"), t("demo.done", s="812"), t("demo.tick.replayed", n=120),
        ]
    text = "\n".join(lines)
    assert "CPU" in text and "knee" not in text  # the noise cause is there; the knee is no cost, so not in the ms list
    assert _english(text) == [], text


def test_the_law_table_reads_korean_with_and_without_a_knee(tmp_path: Path) -> None:
    prof = fit_profile(calibration(tmp_path, "flattened"), bootstrap=3)
    knee = prof.model_copy(update={"params": {**prof.params, "b2": 2e-5, "knee": 150.0}, "bootstrap": []})
    for p in (prof, knee):
        buf = io.StringIO()
        with use_lang("ko"):
            render_profile_fit(p, Console(file=buf, width=200, color_system=None))
        text = buf.getvalue()
        assert _english(text) == [], text
    assert "150 tok" in text and "knee" in names()  # a position in tokens, not 150000 ms; its name is a name


def test_a_line_the_catalogue_lacks_is_still_caught() -> None:
    """The names come from the Korean catalogue, not from what a run printed: prose stays prose."""
    assert _english("측정 잡음: 공유 CPU에서 실측") == []
    assert _english("the live speedup moved between the calibration and the A/B") == \
        ["between", "calibration", "live", "moved", "speedup", "the"]


@pytest.mark.slow  # loads torch, transformers and the tiny target: 10-35 s on the shared 2 cores
def test_a_head_replay_under_ko_prints_no_loading_bar() -> None:
    """The demo's step 2 replays an EAGLE-3 head: loading its target through transformers drew an English
    "Loading weights" progress bar into the Korean console (stderr), on every run."""
    import subprocess
    import sys

    from specgauge.models import eagle3_dir, heads_available

    if not heads_available():
        pytest.skip("shipped tiny heads missing")
    r = subprocess.run([sys.executable, "-m", "specgauge", "simulate", "-m", f"eagle3:{eagle3_dir()}", "-k", "2",
                        "--limit", "1", "--lang", "ko"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Loading" not in r.stderr and _english(r.stderr) == [], r.stderr
