"""The HTML report in a real headless Chromium with the network off.

Chromium is driven over the DevTools protocol through ``--remote-debugging-pipe`` (fd 3 in, fd 4
out, NUL-terminated JSON): no port, no extra Python package. The report is made from hand-made
runs whose prompts and outputs carry ``<script>`` and ``<img onerror>`` payloads; the test checks
that the page renders, the plotly figures exist as SVG, the console has no error, nothing was
fetched from the network, and no payload ran. It skips, saying why, only when no Chromium binary
is installed (``scripts/test.sh`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from base64 import b64decode
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgauge.drafters.base import ReplayTrace
from specgauge.records import Chunk, RequestRecord, ResultsFile, SpecCounts
from specgauge.report.html import ReportConfig, write_report
from specgauge.report.runs import CompareRequest, compare_paths
from specgauge.simulate.cost_model import CostProfile, predict_speedup
from specgauge.simulate.replay import AcceptanceSummary, RequestAcceptance
from specgauge.simulate.run import SegmentResult, SimulateResult

XSS_PROMPT = 'Summarise qzxPROMPTmark <script>window.__pwned=1</script> and <img src=x onerror="window.__pwned=2"> please'
XSS_OUTPUT = 'Sure qzxOUTPUTmark: <script>window.__pwned=3</script><img src=x onerror="window.__pwned=4"> done'
XSS_SEGMENT = '<img src=x onerror="window.__pwned=5">'


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


# ---------------------------------------------------------------------------- hand-made runs


def make_bench_dir(d: Path, workload: Path, scale: float, spec: bool, concurrency: int, n: int = 30, seed: int = 0) -> Path:
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rf = ResultsFile(d / "results.jsonl").open()
    for i in range(n):
        tok = int(rng.integers(20, 60))
        e2e = scale * 0.01 * tok * (1 + 0.05 * rng.standard_normal())
        ttft = 0.03 * scale
        ts = np.linspace(ttft, e2e, 6)
        rf.append(RequestRecord(
            id=f"r{i}", segment="chat" if i % 2 else XSS_SEGMENT, index=i, scheduled_s=0.0, sent_s=0.0,
            started_at=1000.0 + i * 0.1, elapsed_s=e2e, ok=True, ttft_s=ttft, e2e_s=e2e, output_tokens=tok,
            text=f"{XSS_OUTPUT} #{i}" + ("" if not spec or i != 3 else " (diverged)"),
            chunks=[Chunk(t=float(t), n=max(1, tok // 6)) for t in ts],
            spec=SpecCounts(drafts=10, draft_tokens=30, accepted_tokens=18, accepted_per_pos=[8, 6, 4], source="test") if spec else None,
        ))
    rf.close()
    (d / "run.json").write_text(json.dumps({"config": {"workload": [str(workload)], "max_concurrency": concurrency}}))
    thr = (1400.0 if spec else 800.0) * concurrency ** 0.5
    (d / "summary.json").write_text(json.dumps({"duration": 5.0, "output_throughput": thr, "max_concurrent_requests": concurrency,
                                                **({"spec_decode_draft_tokens": 300} if spec else {})}))
    return d


def make_inputs(root: Path) -> list[Path]:
    wl = root / "workload.jsonl"
    with open(wl, "w") as f:
        for i in range(30):
            f.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"{XSS_PROMPT} #{i}"}], "temperature": 0}) + "\n")
    base = make_bench_dir(root / "base-c4", wl, 1.0, False, 4)
    cand = make_bench_dir(root / "spec-c4", wl, 0.55, True, 4, seed=1)
    make_bench_dir(root / "base-c16", wl, 1.0, False, 16, seed=2)
    make_bench_dir(root / "spec-c16", wl, 0.7, True, 16, seed=3)
    cmp = compare_paths(CompareRequest(baseline=base, candidate=cand))
    (root / "compare.json").write_text(cmp.model_dump_json())
    (root / "sim.json").write_text(make_simulate_result().model_dump_json(exclude={"requests"}))
    return [root / n for n in ("base-c4", "spec-c4", "base-c16", "spec-c16", "sim.json", "compare.json")]


def make_simulate_result(methods: tuple[str, ...] = ("ngram", "suffix"), ks: tuple[int, ...] = (1, 2, 3, 4),
                         batches: tuple[int, ...] = (1, 4, 16), segs: tuple[str, ...] = ("chat", "code")) -> SimulateResult:
    """A SimulateResult from geometric acceptance runs (higher for suffix and for code)."""
    rng = np.random.default_rng(0)
    rows = []
    for si, seg in enumerate(segs):
        for i in range(10):
            for mi, m in enumerate(methods):
                p = 0.35 + 0.2 * mi + 0.15 * si
                for k in ks:
                    acc = np.minimum(rng.geometric(1 - p, size=40) - 1, k).astype(np.int64)
                    tr = ReplayTrace(np.full(40, k, dtype=np.int64), acc)
                    rows.append(RequestAcceptance.from_trace(tr, f"{seg}{i}", seg, m, k, int((acc + 1).sum())))

    def group(sel: list[RequestAcceptance]) -> SegmentResult:
        sums, preds, best = [], [], {}
        for m in methods:
            best_v, best_k = -1.0, None
            for k in ks:
                s = AcceptanceSummary.of(m, k, [r for r in sel if r.method == m and r.k == k])
                sums.append(s)
                for b in batches:
                    pr = predict_speedup(m, k, s.output_tokens, s.steps, s.draft_tokens, b, CostProfile())
                    preds.append(pr)
                    if b == batches[0] and pr.predicted_speedup is not None and pr.predicted_speedup > best_v:
                        best_v, best_k = pr.predicted_speedup, k
            best[m] = best_k
        return SegmentResult(summaries=sums, predictions=preds, best_k=best)

    return SimulateResult(
        tokenizer="test", exact=True, methods=list(methods), ks=list(ks), batch_sizes=list(batches),
        overall=group(rows), segments={s: group([r for r in rows if r.segment == s]) for s in segs},
        requests_replayed=10 * len(segs), skipped={}, notes=[],
    )


# ---------------------------------------------------------------------------- DevTools over a pipe


class Browser:
    def __init__(self, binary: str, user_dir: str) -> None:
        to_chrome_r, self._to_chrome_w = os.pipe()
        self._from_chrome_r, from_chrome_w = os.pipe()

        def fds() -> None:  # runs in the child: the protocol wants fds 3 (in) and 4 (out)
            os.dup2(to_chrome_r, 100)  # via high numbers: the pipe ends may themselves be 3 or 4
            os.dup2(from_chrome_w, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-default-apps", "--disable-extensions", "--mute-audio",
             "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
             f"--user-data-dir={user_dir}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, timeout: float) -> dict[str, Any] | None:
        end = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self._from_chrome_r], [], [], left)
            if r:
                chunk = os.read(self._from_chrome_r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        mid = self._next
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome_w, json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self._read(end - time.monotonic())
            if m is None:
                break
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})  # type: ignore[no-any-return]
            self.events.append(m)
        raise TimeoutError(f"{method}: no answer in {timeout} s")

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            m = self._read(left)
            if m is not None:
                self.events.append(m)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome_w, self._from_chrome_r):
            try:
                os.close(fd)
            except OSError:
                pass


def _evaluate(b: Browser, session: str, expr: str) -> Any:
    r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
    return r.get("result", {}).get("value")


SVG_DIVS = "Array.from(document.querySelectorAll('div.plotly-graph-div')).filter(d => d.querySelector('svg.main-svg')).length"


def load_in_browser(html: Path, shot: Path, probes: dict[str, str] | None = None) -> dict[str, Any]:
    """Load ``html`` offline; what the page shows, its console errors and network requests, and the value
    of each JavaScript expression in ``probes`` (by name), evaluated after the plots drew."""
    binary = _chromium()
    assert binary is not None
    with tempfile.TemporaryDirectory(prefix="sg-chromium-") as user_dir:
        b = Browser(binary, user_dir)
        try:
            target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for dom in ("Runtime", "Log", "Network", "Page"):
                b.send(f"{dom}.enable", session=session)
            b.send("Network.emulateNetworkConditions",
                   {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}, session)
            b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
            b.send("Page.navigate", {"url": html.resolve().as_uri()}, session)
            end = time.monotonic() + 60
            while time.monotonic() < end and not any(e.get("method") == "Page.loadEventFired" for e in b.events):
                b.pump(0.2)
            while time.monotonic() < end:  # plotly draws after load
                svg = _evaluate(b, session, SVG_DIVS) or 0
                divs = _evaluate(b, session, "document.querySelectorAll('div.plotly-graph-div').length") or 0
                if divs and svg >= divs:
                    break
                b.pump(0.3)
            b.pump(0.5)
            out = {
                "loaded": any(e.get("method") == "Page.loadEventFired" for e in b.events),
                "pwned": _evaluate(b, session, "typeof window.__pwned"),
                "plot_divs": _evaluate(b, session, "document.querySelectorAll('div.plotly-graph-div').length"),
                "svg_divs": _evaluate(b, session, SVG_DIVS),
                "plotly": _evaluate(b, session, "typeof window.Plotly"),
                "title": _evaluate(b, session, "document.title"),
                "body_text": _evaluate(b, session, "document.body.innerText"),
                "height": _evaluate(b, session, "document.documentElement.scrollHeight"),
            }
            out.update({name: _evaluate(b, session, expr) for name, expr in (probes or {}).items()})
            h = min(int(out["height"] or 900), 16000)
            b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": h, "deviceScaleFactor": 1, "mobile": False}, session)
            b.pump(0.5)
            shot.write_bytes(b64decode(b.send("Page.captureScreenshot", {"format": "png"}, session)["data"]))
        finally:
            b.close()
    errors = []
    requests = []
    for e in b.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            errors.append(json.dumps(p.get("exceptionDetails", {}))[:300])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))[:300])
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append(f"{p['entry'].get('source')}: {p['entry'].get('text')} {p['entry'].get('url', '')}"[:300])
        elif m == "Network.requestWillBeSent":
            requests.append(p.get("request", {}).get("url", ""))
    out["errors"] = errors
    out["network"] = [u for u in requests if not u.startswith(("file:", "data:", "blob:", "about:"))]
    return out


# ---------------------------------------------------------------------------- tests


def test_report_has_no_network_script_or_stylesheet(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path)
    out = tmp_path / "report.html"
    write_report(ReportConfig(inputs=inputs, out=out))
    text = out.read_text()
    assert not re.search(r"<script[^>]+src\s*=\s*[\"']?\s*(https?:)?//", text, re.I)
    assert not re.search(r"<link[^>]+href\s*=\s*[\"']?\s*(https?:)?//", text, re.I)
    assert "<script>window.__pwned" not in text  # every payload arrives escaped
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text


def test_redact_leaves_no_prompt_or_output_text(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path)
    out, js, csv = tmp_path / "r.html", tmp_path / "r.json", tmp_path / "r.csv"
    write_report(ReportConfig(inputs=inputs, out=out, redact=True, json_out=js, csv_out=csv))
    for p in (out, js, csv):
        t = p.read_text()
        assert "qzxPROMPTmark" not in t, p
        assert "qzxOUTPUTmark" not in t, p
    assert "sha256:" in out.read_text()
    data = json.loads(js.read_text())
    assert data["redacted"] is True and all(s["output"].startswith("sha256:") for s in data["samples"])
    unredacted = tmp_path / "plain.html"
    write_report(ReportConfig(inputs=inputs, out=unredacted))
    plain = unredacted.read_text()
    assert "qzxPROMPTmark" in plain and "qzxOUTPUTmark" in plain  # the check above can fail


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (scripts/test.sh installs Debian's chromium)")
def test_report_renders_in_headless_chromium_offline(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path)
    out = tmp_path / "report.html"
    write_report(ReportConfig(inputs=inputs, out=out))
    res = load_in_browser(out, tmp_path / "report.png")
    assert res["loaded"]
    assert res["title"] == "specgauge report"
    assert res["pwned"] == "undefined", "a payload from a prompt/output/segment ran"
    assert res["plotly"] == "object"
    assert res["plot_divs"] >= 6  # acceptance ×2, CDFs ×3, throughput, speedup
    assert res["svg_divs"] == res["plot_divs"], f"a plotly div did not render its SVG; console: {res['errors']}"
    assert res["errors"] == [], res["errors"]
    assert res["network"] == [], res["network"]
    body = res["body_text"]
    assert "<script>window.__pwned=1</script>" in body  # shown as text, not run
    for heading in ("Verdict", "Workload profile", "Acceptance", "Latency", "Throughput vs concurrency", "Predicted vs measured speedup"):
        assert heading in body
    assert "GO" in body
    png = (tmp_path / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    keep = os.environ.get("SPECGAUGE_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(tmp_path / "report.png", keep)


def test_sections_say_what_is_missing(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path)
    out = tmp_path / "one.html"
    write_report(ReportConfig(inputs=[inputs[0]], out=out))
    t = out.read_text()
    assert "No comparison passed" in t and "No workload profile passed" in t and "No simulate result passed" in t
    assert 'id="fig-cdf-e2e"' in t and 'id="fig-acc-heatmap-0"' not in t


def test_compare_two_simulate_results_is_acceptance_only(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from specgauge.cli import app

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(make_simulate_result(ks=(1, 2)).model_dump_json(exclude={"requests"}))
    b.write_text(make_simulate_result(ks=(2, 3)).model_dump_json(exclude={"requests"}))
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    assert res.exit_code == 3, res.output
    data = json.loads(res.stdout)
    assert data["mode"] == "simulate" and {(d["method"], d["k"]) for d in data["simulation"]} == {("ngram", 2), ("suffix", 2)}
    assert "measure no latency" in data["verdict"]["overall"]["reasons"][0]
