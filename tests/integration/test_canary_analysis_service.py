"""The canary judge service driven the way Argo Rollouts and Flagger drive it, over real loopback
HTTP against two scripted servers (``testing/fakeserver.py``, as the other canary tests: a real
socket server whose speed is set exactly; a real inference server cannot be slowed on demand):
the request and conditions are read from the shipped AnalysisTemplate (``deploy/``), a healthy
candidate is Successful, a slow one Failed; Flagger gets 200 / 412."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from specgauge.canary.analysis_service import AnalysisConfig, AnalysisThread
from specgauge.canary.config import JudgeConfig
from specgauge.testing.fakeserver import FakeServer

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
#: the judge on TPOT and E2E: a scripted server's TTFT is loopback jitter (~1 ms), and on 3 ms tokens an A/A
#: of two identical servers failed 2-6 of 30 analyses on TTFT or the TPOT p95 tail; on 20 ms tokens without
#: the TTFT check 0 of 30. What these tests hold is Argo's and Flagger's contract, not the judge's noise floor.
JUDGE = JudgeConfig(min_samples=10, min_tail_samples=10, metrics=["tpot", "e2e"])


def _argo_metric() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "argo-rollouts-analysis.yaml").read_text()))
    tmpl = next(d for d in docs if d["kind"] == "AnalysisTemplate")
    return tmpl["spec"]["metrics"][0]


def _condition(expr: str, result: dict[str, Any]) -> bool:
    """Argo's expr for the conditions the template uses: ``result.FIELD == "VALUE"``."""
    m = re.fullmatch(r'result\.(\w+) == "(\w+)"', expr.strip())
    assert m, f"the template's condition {expr!r} is not of the form this test evaluates"
    return result.get(m.group(1)) == m.group(2)


def _json_path(path: str, body: Any) -> Any:
    """Argo's ``jsonPath`` as the template uses it: ``{$}`` (the whole body) or ``{$.a.b}``."""
    m = re.fullmatch(r"\{\$((?:\.\w+)*)\}", path)
    assert m, path
    for part in filter(None, m.group(1).split(".")):
        body = body[part]
    return body


def _argo_measure(judge_url: str) -> str:
    """One AnalysisRun measurement as Argo's web provider takes it: the template's method, path,
    headers and body; non-2xx is an Error; jsonPath -> result; the conditions -> the phase."""
    metric = _argo_metric()
    web = metric["provider"]["web"]
    path = "/" + web["url"].split("://", 1)[1].split("/", 1)[1]
    headers = {h["key"]: h["value"] for h in web.get("headers", [])}
    r = httpx.request(web.get("method", "GET"), judge_url + path, headers=headers, content=web.get("body"),
                      timeout=web.get("timeoutSeconds", 10))
    if not 200 <= r.status_code < 300:
        return "Error"
    result = _json_path(web.get("jsonPath", "{$}"), r.json())
    if _condition(metric["failureCondition"], result):
        return "Failed"
    if _condition(metric["successCondition"], result):
        return "Successful"
    return "Inconclusive"


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[tuple[FakeServer, FakeServer, Path]]:
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"id": f"q{i}", "temperature": 0,
                                      "messages": [{"role": "user", "content": f"tokens:16 per:1 delay_ms:20 q{i}"}]}) + "\n"
                          for i in range(24)))
    with FakeServer(model="m") as b, FakeServer(model="m") as c:
        yield b, c, wl


def test_argo_web_metric_success_for_healthy_failure_for_slow(upstreams: tuple[FakeServer, FakeServer, Path]) -> None:
    b, c, wl = upstreams
    with AnalysisThread(AnalysisConfig(baseline=b.base_url, candidate=c.base_url, workload=[wl], port=0,
                                       judge=JUDGE)) as judge:
        assert _argo_measure(judge.base_url) == "Successful"
        c.override = "delay_ms:100"  # the candidate now takes 5x as long per token
        assert _argo_measure(judge.base_url) == "Failed"
        body = httpx.post(judge.base_url + "/v1/analysis", timeout=60).json()
        assert body["outcome"] == "FAIL" and body["speedup"] < 0.5
        assert any("slower beyond the margin" in r for r in body["reasons"])
        assert body["requests"] == {"baseline": 24, "candidate": 24, "baseline_failed": 0, "candidate_failed": 0}
        metrics = httpx.get(judge.base_url + "/metrics", timeout=10).text
        assert 'specgauge_canary_analysis_total{outcome="PASS"} 1.0' in metrics
        assert 'specgauge_canary_analysis_total{outcome="FAIL"} 2.0' in metrics


def test_flagger_webhook_status_codes(upstreams: tuple[FakeServer, FakeServer, Path]) -> None:
    b, c, wl = upstreams
    payload = {"name": "podinfo", "namespace": "test", "phase": "Progressing", "checksum": "85d557f47b",
               "metadata": {"test": "all", "token": "16688eb5e9f289f1991c"}}
    with AnalysisThread(AnalysisConfig(baseline=b.base_url, candidate=c.base_url, workload=[wl], port=0,
                                       judge=JUDGE)) as judge:
        r = httpx.post(judge.base_url + "/v1/flagger", json=payload, timeout=60)
        assert r.status_code == 200 and r.json()["canary"]["name"] == "podinfo"
        c.override = "fault:http500"
        r = httpx.post(judge.base_url + "/v1/flagger", json=payload, timeout=60)
        assert r.status_code == 412 and r.json()["outcome"] == "FAIL"
        assert httpx.post(judge.base_url + "/v1/flagger", content=b"not json", timeout=10).status_code == 400


def test_unreachable_candidate_is_an_argo_error_not_a_verdict(upstreams: tuple[FakeServer, FakeServer, Path]) -> None:
    b, _, wl = upstreams
    with AnalysisThread(AnalysisConfig(baseline=b.base_url, candidate="http://127.0.0.1:9", workload=[wl], port=0,
                                       requests=4)) as judge:
        assert _argo_measure(judge.base_url) == "Error"
        r = httpx.get(judge.base_url + "/v1/analysis", timeout=60)
        assert r.status_code == 502 and "candidate http://127.0.0.1:9: unreachable" in r.json()["error"]
