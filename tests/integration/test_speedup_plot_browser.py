"""The sweep report's speedup-vs-batch plot in a real headless Chromium, offline.

A hand-made sweep (its analysis as ``specgauge sweep --cost-profile`` stores it: measured speedups with
95 % CIs and a prediction attached to every cell) whose best n-gram k falls with the batch and stops
paying at 64. ``store_recommendation`` computes the recommendation and its ``SpeedupCurves`` once,
beside sweep.json; the report reads them and renders the plot (``report.speedup_plot``). In the browser:
the figure is drawn as SVG, every configuration has a predicted line, a band and measured points with
CI bars, the schedule's ranges are marked with their k (the last one as "k = 0 (not off …)"), the title
says from which batch speculation should be off, nothing is fetched, the console has no error; the same
page in Korean draws the same figure with Korean words. Skips only when no Chromium is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specgauge.predict.types import CellPrediction
from specgauge.recommend.models import Recommendation
from specgauge.recommend.sources import STORED, store_recommendation
from specgauge.report.html import ReportConfig, write_report
from specgauge.stats.compare import CI
from specgauge.sweep.models import CellResult, SweepAnalysis, SweepManifest, SweepSettings

sys.path.insert(0, str(Path(__file__).parent))
from test_report_browser import _chromium, load_in_browser  # noqa: E402  the report's own browser harness

NG = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}
#: (k, concurrency) -> measured (estimate, low, high); the prediction is 2 % off the estimate, band ±3 %
MEASURED = {(4, 1): (1.80, 1.70, 1.90), (4, 8): (1.10, 1.04, 1.16), (4, 64): (0.80, 0.76, 0.84),
            (2, 1): (1.45, 1.38, 1.52), (2, 8): (1.30, 1.25, 1.35), (2, 64): (0.95, 0.91, 0.99)}
FIGURE = "document.getElementById('fig-sweep0-speedup')"


def _sweep(d: Path) -> Path:
    cells = [CellResult(label="off", method=None, k=0, concurrency=c, status="done") for c in (1, 8, 64)]
    for (k, c), (est, lo, hi) in MEASURED.items():
        label = f"ngram-k{k}"
        cell = CellResult(label=label, method="ngram", k=k, concurrency=c, status="done", speculative_config={**NG, "num_speculative_tokens": k},
                          speedup=CI(estimate=est, low=lo, high=hi, n=64))
        cell.predicted = CellPrediction(label=label, method="ngram", k=k, concurrency=c, speedup=est * 1.02,
                                        speedup_low=est * 0.99, speedup_high=est * 1.05)
        cells.append(cell)
    a = SweepAnalysis(baseline="off", min_speedup=1.0, concurrencies=[1, 8, 64], labels=["off", "ngram-k4", "ngram-k2"], cells=cells)
    d.mkdir()
    m = SweepManifest(settings=SweepSettings(workload=["w.jsonl"]), analysis=a)
    m.save(d)
    assert store_recommendation(m, d) is not None
    return d


def _probe(expr: str) -> str:
    return f"(() => {{ const d = {FIGURE}; return d && d.data ? {expr} : null }})()"


PROBES = {
    "names": _probe("d.data.map(t => t.name || '')"),
    "fills": _probe("d.data.filter(t => t.fill === 'toself').length"),
    "error_bars": _probe("d.data.filter(t => t.error_y && t.error_y.array).map(t => t.error_y.array.length)"),
    "annotations": _probe("(d.layout.annotations || []).map(a => a.text)"),
    "title": _probe("(d.layout.title && d.layout.title.text) || ''"),
    "svg_points": _probe("d.querySelectorAll('g.scatterlayer g.points path').length"),
}


def test_the_sweep_report_draws_predicted_speedup_vs_batch_with_the_measured_points(tmp_path: Path) -> None:
    d = _sweep(tmp_path / "sweep")
    rec = Recommendation.model_validate(json.loads((d / STORED).read_text()))
    assert rec.schedule == [[1, 2, 4], [3, 22, 2], [23, 256, 0]] and rec.off_from == 23, (rec.schedule, rec.off_from)
    assert rec.curves is not None and rec.curves.stops_paying_at == 23
    assert [c.label for c in rec.curves.curves] == ["ngram-k4", "ngram-k2"]
    assert [p.batch for p in rec.curves.curves[0].measured] == [1, 8, 64]
    if _chromium() is None:
        pytest.skip("no chromium binary (scripts/test.sh installs Debian's chromium)")
    for lang, words in (("en", ("predicted", "measured", "should be off from batch 23", "k = 0 (not off")),
                        ("ko", ("예측", "측정", "23", "k = 0"))):
        html = tmp_path / f"report-{lang}.html"
        write_report(ReportConfig(inputs=[d], out=html, lang=lang))
        res = load_in_browser(html, tmp_path / f"shot-{lang}.png", probes=PROBES)
        assert res["loaded"] and res["errors"] == [] and res["network"] == [], res
        assert res["svg_divs"] == res["plot_divs"] >= 1, res
        names = res["names"]
        assert names is not None, "no speedup-vs-batch figure in the sweep section"
        assert sum(words[0] in n for n in names) == 2 and sum(words[1] in n for n in names) == 2, names
        assert res["fills"] == 2 and res["error_bars"] == [3, 3], res
        assert res["svg_points"] >= 6, res  # the measured markers are drawn, not only described
        ann = " | ".join(res["annotations"])
        assert "k = 4" in ann and "k = 2" in ann and words[3] in ann, ann
        assert words[2] in res["title"], res["title"]
