"""Korean everywhere the person reads (issue 24): the HTML report's sweep, recommendation and canary
sections, the figures' titles and axes, and the sweep, recommendation, canary and audit console
output under ``--lang ko`` carry no English word outside the data itself.

Inputs are real runs where they are cheap (a sweep benched over HTTP against the scripted fake
servers, audits against scripted servers: PASS and FAIL) and hand-made results where a case is hard
to provoke (a sweep whose cells failed, changed greedy outputs, a rolled-back canary whose proxy died
mid-write). Checked on the rendered text (HTML parsed, scripts and styles aside; user data is marked
``.data`` / ``code`` / ``.text`` in the page, or known by name here).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specgauge.audit import run_audit
from specgauge.canary.eventlog import read_events
from specgauge.cli.canary import _event_line
from specgauge.i18n import use_lang
from specgauge.report.audit_console import render_audit
from specgauge.report.sweep_console import render_recommendation, render_sweep
from specgauge.sweep.models import SweepManifest
from specgauge.recommend.sources import recommend_from_sweep
from specgauge.report.html import ReportConfig, write_report
from specgauge.sweep import ServerTarget, run_grid
from specgauge.testing.fakeserver import FakeServer
from specgauge.canary.config import CanaryConfig, Guardrails, JudgeConfig
from specgauge.canary.controller import Controller
from specgauge.canary.eventlog import DecisionLog
from specgauge.canary.judge import WindowInput, judge_window
from specgauge.canary.summary import CanaryResult, RunTotals, WindowRow, build_result, format_summary, window_latency
from tests.unit.test_audit_cli import Scripted, _cfg
from tests.unit.test_canary_judge import samples
from tests.unit.test_recommend import _write_sweep
from tests.unit.test_sweep import CELLS, _workload

#: names, not prose: figures' and methods' names, units, engines, flags' values
ALLOWED = {"specgauge", "TTFT", "TPOT", "ITL", "E2E", "MAL", "SLO", "RAG", "KV", "GPU", "CDF", "KS", "TVD", "TV", "tok",
           "MiB", "GiB", "ms", "sha256", "temperature", "ngram", "suffix", "draft_model", "vLLM", "vllm", "llama", "cpp",
           "SGLang", "JSON", "json", "p50", "p95", "min", "off", "Cram", "V", "PASS", "FAIL", "INCONCLUSIVE", "GO", "NO",
           "k", "C", "p", "dof", "n", "s", "x", "chi2", "http", "https", "ID", "CUDA", "nvidia-smi", "amd-smi", "rocm-smi",
           "ttft", "tpot", "e2e", "itl", "forward", "temperature-0", "Holm", "alpha", "n-gram", "ngram-simple", "NGRAM", "TTFT95", "E2E95", "req", "PATH", "bench", "HTTP", "RMSE"}


class _Text(HTMLParser):
    """Visible text of a page: not in script/style, not inside user data (``.data``, ``code``, ``.text``)."""

    SKIP = {"script", "style", "code"}
    VOID = {"br", "meta", "link", "img", "input", "hr", "col", "area", "base", "wbr", "source"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[bool] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        cls = (dict(attrs).get("class") or "").split()
        self.stack.append(tag in self.SKIP or "data" in cls or "text" in cls)

    def handle_endtag(self, tag: str) -> None:
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if not any(self.stack):
            self.parts.append(data)


def page_text(html: str) -> str:
    p = _Text()
    p.feed(html)
    return "\n".join(s.strip() for s in p.parts if s.strip())


def figure_text(html: str) -> list[str]:
    """Titles and axis titles of the plotly figures (what the chart shows as words)."""
    return [json.loads(f'"{s}"') for s in re.findall(r'"title":\{[^{}]*?"text":"((?:[^"\\]|\\.)*)"', html)]


def _words(text: str) -> list[str]:
    text = re.sub(r"--[a-z][a-z-]*", "", text)  # flags are names
    text = re.sub(r"\S+\.(?:json|jsonl|html|csv|gz)(?![A-Za-z])|(?<!\w)/[a-z]\w*|\w+_\w+", "", text)  # files, URL paths, fields
    text = re.sub(r"\{[^{}]*\}", "", text)  # JSON the user pastes (speculative configs); catalogue placeholders
    # what the console quotes it did not write: a model's output ('tems'), a validator's own words (“…”)
    text = re.sub(r"(?<!\w)'[^'\n]*'(?!\w)|(?<!\w)\"[^\"\n]*\"(?!\w)|“[^”\n]*”", "", text)
    return re.findall(r"[A-Za-z][A-Za-z0-9_\-]*", text)


@functools.cache
def names() -> frozenset[str]:
    """Words that are names, not prose, whatever a run prints: ``ALLOWED``; every word in Latin letters the
    Korean catalogue itself writes (CPU, forward, suffix, OpenAI …: what the translation keeps as it is);
    the step-cost law's parameter names (a fitted law prints the ones it found: ``knee`` only where the fit
    found a knee). So which lines a run happens to print (the causes of a gap, a knee) cannot decide
    whether its console reads as Korean (issue 40 item 11)."""
    from specgauge.i18n.catalogue import MESSAGES
    from specgauge.predict.law import CORE, DESCRIPTIONS
    from specgauge.predict.lsq import ELL

    korean = {w for entry in MESSAGES.values() if entry.get("ko") for w in _words(entry["ko"])}
    return frozenset(ALLOWED) | korean | set(DESCRIPTIONS) | set(CORE) | {ELL}


def english_words(text: str, data: set[str]) -> list[str]:
    return sorted({w for w in _words(text) if sum(c.isalpha() for c in w) >= 2 and w not in names()
                   and not any(w in d for d in data)})


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    with FakeServer(spec=False) as off, FakeServer() as on:
        off.override, on.override = "per:1", "per:3"
        target = ServerTarget.from_urls({"off": off.base_url, "ngram-k4": on.base_url})
        run_grid(CELLS, target, [_workload(root)], root / "sweep", num_prompts=6, warmup=0)
    return root / "sweep"


@pytest.fixture(scope="module")
def inputs(real_sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("inputs")
    hand = _write_sweep(root / "handsweep")
    rec = root / "rec.json"
    rec.write_text(recommend_from_sweep(hand).model_dump_json())
    write_canary(root / "canary")
    return [real_sweep, hand, rec, root / "canary"]


def write_canary(d: Path) -> CanaryResult:
    """A canary's decision log as the proxy writes it: windows judged by the real judge (an A/A pass,
    a faster candidate, too few requests, a slower one, one failing requests past the critical
    guardrail) and the real controller's decisions, so every reason is one the product writes; and
    the run's result as the proxy builds it at the end."""
    d.mkdir(parents=True)
    (d / "canary.json").write_text(json.dumps({"kind": "specgauge.canary"}))
    steps = [1.0, 5.0, 25.0, 50.0, 100.0]
    cfg = CanaryConfig(baseline="http://b:1", candidate="http://c:2", steps=steps, failure_limit=2, max_weight_without_speedup=5.0,
                       judge=JudgeConfig(min_samples=20, guardrails=Guardrails(ttft_p95_ms=60.0)))
    ctl = Controller.fresh(steps, cfg.failure_limit, cfg.max_weight_without_speedup, "fp")
    log = DecisionLog(d / "decisions.jsonl").open()
    log.append({"event": "start", "t": 100.0, "config": {"mode": "live", "steps": steps},
                "upstreams": {"baseline": {"url": cfg.baseline}, "candidate": {"url": cfg.candidate}}, "state": ctl.state})
    rows = []
    windows = [dict(scale=1.0), dict(scale=0.6), dict(scale=1.0, n=10), dict(scale=1.0), dict(scale=1.4), dict(scale=1.0, fail=30)]
    for i, w in enumerate(windows):
        inp = WindowInput(baseline=samples(100, seed=2 * i), candidate=samples(w.get("n", 100), scale=w["scale"], seed=2 * i + 1,
                                                                                  fail=w.get("fail", 0)))
        jd = judge_window(inp, cfg.judge)
        w0 = ctl.weight
        dec = ctl.decide(jd)
        info = {"start": 100.0 + 60 * i, "weight": w0, "requests": {"baseline": len(inp.baseline), "candidate": len(inp.candidate)},
                "latency_ms": window_latency(inp)}
        log.append({"event": "evaluation", "t": 160.0 + 60 * i, "mode": "live", "window": info, "judgement": jd, "decision": dec,
                    "state": ctl.state})
        rows.append(WindowRow.of(event_t=160.0 + 60 * i, window=info, inp=inp, j=jd, d=dec, spec=None))
    log.close()
    assert ctl.state.status == "rolled_back"
    return build_result(cfg, ctl.state, rows, RunTotals(), 400.0)


DATA = {"ngram-k4", "suffix-k8", "suffix-k4", "off", "handsweep", "sweep", "canary", "chat", "code", "mysweep", "a", "b",
        "rec", "relative:tpot"}


@pytest.mark.parametrize("lang", ["ko", "en"])
def test_html_sections_have_no_english_under_ko(inputs: list[Path], tmp_path: Path, lang: str) -> None:
    out = tmp_path / f"{lang}.html"
    write_report(ReportConfig(inputs=inputs, out=out, lang=lang))
    html = out.read_text()
    for sec in ('id="sweep-0"', 'id="sweep-1"', 'id="recommendation-0"', 'id="canary-0"'):
        assert sec in html
    words = english_words(page_text(html) + "\n" + "\n".join(figure_text(html)), DATA)
    if lang == "ko":
        assert words == [], "English under --lang ko"
    else:  # the check reads real text: the English report is full of English words
        assert {"speedup", "concurrency"} & {w.lower() for w in words}


def test_the_text_extraction_skips_data_and_scripts() -> None:
    html = '<p>보고서 <span class="data">my-run</span><code>vllm serve m</code></p><script>var english = 1</script><p>the end</p>'
    assert page_text(html) == "보고서\nthe end"
    assert english_words(page_text(html), set()) == ["end", "the"]


def _console(render: Callable[[Any, Console], None], obj: Any) -> str:
    buf = io.StringIO()
    render(obj, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


#: a command the user pastes (the recommendation's flags) is a name as a whole
COMMAND = re.compile(r"^\s*(vllm serve|llama-server|python -m sglang)\b")


def console_english(text: str, data: set[str]) -> list[tuple[str, str]]:
    """(word, line) for each English word left in console output, pasted commands and ``data`` aside."""
    return [(w, line.strip()) for line in text.splitlines() if not COMMAND.match(line) for w in english_words(line, data)]


def _no_english(text: str, data: set[str]) -> None:
    bad = [f"{w}: {line}" for w, line in console_english(text, data)]
    assert not bad, "English under --lang ko:\n" + "\n".join(bad)


def test_console_sweep_and_recommendation_in_korean(real_sweep: Path, tmp_path: Path) -> None:
    hand = _write_sweep(tmp_path / "handsweep")
    with use_lang("ko"):
        for d in (real_sweep, hand):
            _no_english(_console(render_sweep, SweepManifest.load(d)), DATA)
            _no_english(_console(render_recommendation, recommend_from_sweep(d)), DATA)


def test_console_canary_in_korean(tmp_path: Path) -> None:
    res = write_canary(tmp_path / "canary")
    with use_lang("ko"):
        lines = [x for e in read_events(tmp_path / "canary" / "decisions.jsonl") if (x := _event_line(e))]
        assert len(lines) == 7
        _no_english("\n".join(lines), DATA)
        _no_english(format_summary(res), DATA | {"http://b:1", "http://c:2"})


@pytest.mark.parametrize("lossy", [0.0, 0.2])
def test_console_audit_in_korean(tmp_path: Path, lossy: float) -> None:
    with Scripted(lossy=lossy, greedy_broken=bool(lossy)) as cand, Scripted(seed=1) as ref:
        res = run_audit(_cfg(tmp_path, cand, ref))
        urls = {cand.url, ref.url}
    assert res.verdict == ("FAIL" if lossy else "PASS")
    with use_lang("ko"):
        _no_english(_console(render_audit, res), DATA | urls | {"scripted"} | {p for p in res.prompts} if hasattr(res, "prompts") else DATA | urls | {"scripted"})


def test_bench_and_compare_sections_too(tmp_path: Path) -> None:
    """The hand-made bench runs and their comparison (GO, a changed greedy output, memory absent) of
    the browser tests, read as a whole page, not only headings and verdicts."""
    from tests.integration.test_report_browser import XSS_SEGMENT, make_inputs

    out = tmp_path / "ko.html"
    write_report(ReportConfig(inputs=make_inputs(tmp_path), out=out, lang="ko"))
    html = out.read_text()
    data = DATA | {"base-c4", "spec-c4", "base-c16", "spec-c16", "sim", XSS_SEGMENT, "test"}  # "test": the counts' source
    assert english_words(page_text(html) + "\n" + "\n".join(figure_text(html)), data) == []


def test_console_bench_and_compare_in_korean(real_sweep: Path, tmp_path: Path) -> None:
    """Bench summaries of the sweep's real cells (a run without and one with speculation counts) and a
    comparison of them, and the hand-made GO comparison with a changed greedy output."""
    from specgauge.report.bench_console import format_summary as bench_summary
    from specgauge.report.decide_console import render_comparison
    from specgauge.report.runs import CompareRequest, compare_paths
    from specgauge.stats.verdict import ComparisonResult
    from tests.integration.test_report_browser import XSS_OUTPUT, XSS_SEGMENT, make_inputs

    m = SweepManifest.load(real_sweep)
    dirs = {c.label: real_sweep / c.dir for c in m.cells if c.concurrency == 2}
    made = make_inputs(tmp_path)
    cmps = [compare_paths(CompareRequest(baseline=dirs["off"], candidate=dirs["ngram-k4"])),
            ComparisonResult.model_validate_json(made[-1].read_text())]
    with use_lang("ko"):
        for d in dirs.values():
            _no_english(bench_summary(json.loads((d / "summary.json").read_text())), DATA)
        for c in cmps:
            runs = {c.baseline.label, c.candidate.label, c.baseline.path, c.candidate.path}
            outputs = {XSS_SEGMENT, XSS_OUTPUT, "(diverged)"}  # a segment name and the outputs' own text
            _no_english(_console(render_comparison, c), DATA | runs | outputs | {"base-c4", "spec-c4", "r3", "vllm:per-request"})


def test_console_calibration_and_predict_in_korean(tmp_path: Path) -> None:
    """A law fitted on scripted calibration runs (its table of parameters and their meaning), then
    ``predict`` and ``simulate --cost-profile`` with it under ``--lang ko``."""
    from typer.testing import CliRunner

    from specgauge.cli import app
    from specgauge.predict.fit import fit_profile
    from specgauge.report.predict_console import render_profile_fit
    from tests.unit.test_predict_fit import calibration

    prof = fit_profile(calibration(tmp_path, "flattened"), bootstrap=5)
    path = prof.save(tmp_path / "cost_profile.json")
    names = (DATA | set(prof.param_names) | {"flattened", "padded", "synthetic", "ngram-k2", "ngram-k4", "suffix-k2", "suffix-k4",
                                             "ngram-k4-sched"}
             | {f"{c}-c{n}" for c in ("off", "ngram-k4") for n in (1, 4)})
    with use_lang("ko"):  # the law's parameter and shape names, the runs' labels are names
        _no_english(_console(render_profile_fit, prof), names)
    for args in (["predict", str(path), "--method", "ngram,suffix", "--k", "2,4", "--concurrency", "1,4", "--num-prompts", "10"],
                 ["simulate", "--limit", "10", "-m", "ngram", "-k", "2", "--cost-profile", str(path)]):
        r = CliRunner().invoke(app, [*args, "--lang", "ko"])
        assert r.exit_code == 0, r.output
        _no_english(r.output, names | {str(path)})


def test_other_tools_results_in_korean(tmp_path: Path) -> None:
    """vllm bench serve (with and without spec-decode keys), AIPerf and GuideLLM results in the report
    and in compare: what they lack is said in Korean too."""
    from specgauge.report.decide_console import render_comparison
    from specgauge.report.runs import CompareRequest, compare_paths
    from tests.unit.test_foreign_runs import AIPERF, GUIDELLM, VLLM_BASE, VLLM_SPEC, _own_run

    own = _own_run(tmp_path / "own")
    gl = f"{GUIDELLM}#2"
    inputs = [own, VLLM_BASE, VLLM_SPEC, AIPERF, Path(gl)]
    out = tmp_path / "ko.html"
    write_report(ReportConfig(inputs=inputs, out=out, lang="ko"))
    html = out.read_text()
    names = DATA | {"own", "AIPerf", "GuideLLM", "ITL", "vllm_bench_baseline.json", "vllm_bench_ngram_k3.json",
                    "aiperf_profile_export.jsonl", "guidellm_benchmarks.json#2", "concurrent@4", "conversation_id:turn_index",
                    "spec_decode_*", "save-result", "tiny", "facebook/opt-125m", "default", "usage", "vllm bench serve"}
    assert english_words(page_text(html) + "\n" + "\n".join(figure_text(html)), names) == []
    with use_lang("ko"):
        for b, c in ((VLLM_BASE, VLLM_SPEC), (own, AIPERF), (own, Path(gl))):
            r = compare_paths(CompareRequest(baseline=b, candidate=c))
            runs = {r.baseline.label, r.candidate.label, r.baseline.path, r.candidate.path}
            _no_english(_console(render_comparison, r), names | runs)
