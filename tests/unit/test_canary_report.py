"""A canary run in ``specgauge report``: read from the decision log alone (a run still going or
crashed), weight timeline and decision points, text escaped."""

from __future__ import annotations

import json
from pathlib import Path

from specgauge.canary.eventlog import DecisionLog
from specgauge.report.canary_html import is_canary, load_canary, render_canaries, split_canaries
from specgauge.report.html import ReportConfig, write_report


def write_run(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "canary.json").write_text(json.dumps({"kind": "specgauge.canary"}))
    log = DecisionLog(d / "decisions.jsonl").open()
    cfg = {"mode": "live", "steps": [1.0, 5.0, 100.0]}
    up = {"baseline": {"url": "http://b:1"}, "candidate": {"url": "http://c:2/<script>alert(1)</script>"}}
    log.append({"event": "start", "t": 100.0, "config": cfg, "upstreams": up, "state": {"weight": 1.0, "status": "running"}})
    lat = {"ttft": {"baseline": {"p50": 40.0, "p95": 80.0}, "candidate": {"p50": 45.0, "p95": 90.0}},
           "e2e": {"baseline": {"p50": 400.0, "p95": 800.0}, "candidate": {"p50": 300.0, "p95": None}}}
    for t, (w, to, action, outcome) in enumerate([(1.0, 5.0, "promote", "PASS"), (5.0, 5.0, "hold", "INCONCLUSIVE"),
                                                   (5.0, 5.0, "hold", "FAIL"), (5.0, 0.0, "rollback", "FAIL")]):
        log.append({"event": "evaluation", "t": 160.0 + 60 * t,
                    "window": {"weight": w, "requests": {"baseline": 50, "candidate": 3}, "latency_ms": lat,
                               "acceptance": {"acceptance_rate": 0.4}},
                    "judgement": {"outcome": outcome, "score": 80.0, "checks": [{"name": "relative:tpot", "status": "fail" if outcome == "FAIL" else "pass"}]},
                    "decision": {"action": action, "from_weight": w, "to_weight": to, "reason": f"because <b>{action}</b>"},
                    "state": {"weight": to, "status": "rolled_back" if action == "rollback" else "running",
                              "rollback_reason": "2 failed evaluations" if action == "rollback" else None}})
    log.close()
    with open(d / "decisions.jsonl", "a") as f:
        f.write('{"event": "evalua')  # the proxy died mid-write


def test_canary_section_from_the_decision_log(tmp_path: Path) -> None:
    d = tmp_path / "run<1>"
    write_run(d)
    assert is_canary(d) and is_canary(d / "decisions.jsonl") and not is_canary(tmp_path)
    can, rest = split_canaries([d, tmp_path / "other"])
    assert can == [d] and rest == [tmp_path / "other"]
    sec = load_canary(d)
    assert sec.status == "rolled_back" and sec.rollback_reason == "2 failed evaluations"
    assert sec.timeline == [(100.0, 1.0), (160.0, 5.0), (340.0, 0.0)]
    assert [w.action for w in sec.windows] == ["promote", "hold", "hold", "rollback"]
    assert sec.totals is None and any("summary.json" in n for n in sec.notes)
    html = render_canaries([sec])
    assert "ROLLED BACK" in html and "fig-canary-weight-0" in html and "fig-canary-latency-0" in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<b>rollback</b>" not in html and "run&lt;1&gt;" in html
    assert html.count("<tr>") == 1 + 3  # header + promote, the failed hold, rollback (not the inconclusive hold)


def test_report_command_renders_a_canary_run(tmp_path: Path) -> None:
    d = tmp_path / "canary"
    write_run(d)
    out = tmp_path / "report.html"
    write_report(ReportConfig(inputs=[d], out=out))
    html = out.read_text()
    assert 'id="canary-0"' in html and "<script src=\"http" not in html
