"""The report in Korean and in English, rendered in a real headless Chromium (network off), from
``specgauge demo --lang ko`` (the embedded server really runs twice) and from hand-made runs whose
comparison ends in GO with every kind of verdict line.

Checked in the browser: the page's language; the Korean report's headings (h1–h3, table headers)
and verdicts (badges, findings, reasons, notes, what more is needed) contain no untranslated
English word — data the user supplied (run labels, paths, segment names, model names, marked
``span.data`` or in ``code``) and technical abbreviations excepted; the English report still reads
in English; the numbers in the verdict lines are the same in both languages.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from specgauge.i18n import translate
from specgauge.models import available
from specgauge.report.html import ReportConfig, write_report
from tests.integration._demo_run import demo_ko
from tests.integration.test_report_browser import (
    Browser,
    _chromium,
    _evaluate,
    make_inputs,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (scripts/test.sh installs Debian's chromium)")]

#: words that stay as they are in a Korean report: abbreviations and units engineers use untranslated
ALLOWED = {"specgauge", "TTFT", "TPOT", "ITL", "E2E", "MAL", "SLO", "RAG", "KV", "GPU", "CDF", "KS", "TVD", "tok", "MiB",
           "GiB", "sha256", "temperature", "ngram", "suffix", "metrics", "min", "speedup", "vllm", "json", "JSON"}

#: headings and verdict elements, user data removed (run labels, segment names, file names, commands)
TEXTS_JS = """
(() => Array.from(document.querySelectorAll('h1, h2, h3, th, .badge, .verdict, caption')).map(e => {
  const c = e.cloneNode(true);
  c.querySelectorAll('.data, code').forEach(x => x.remove());
  return c.innerText;
}))()
"""
VERDICT_JS = "Array.from(document.querySelectorAll('.verdict')).map(e => e.innerText).join('\\n')"


def _page(html: Path) -> dict[str, Any]:
    binary = _chromium()
    assert binary is not None
    with tempfile.TemporaryDirectory(prefix="sg-chromium-") as user_dir:
        b = Browser(binary, user_dir)
        try:
            target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for dom in ("Runtime", "Page", "Network"):
                b.send(f"{dom}.enable", session=session)
            b.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}, session)
            b.send("Page.navigate", {"url": html.resolve().as_uri()}, session)
            for _ in range(200):
                if any(e.get("method") == "Page.loadEventFired" for e in b.events):
                    break
                b.pump(0.2)
            return {"lang": _evaluate(b, session, "document.documentElement.lang"), "title": _evaluate(b, session, "document.title"),
                    "texts": _evaluate(b, session, TEXTS_JS) or [], "verdict": _evaluate(b, session, VERDICT_JS) or "",
                    "body": _evaluate(b, session, "document.body.innerText") or "",
                    "errors": [e for e in b.events if e.get("method") == "Runtime.exceptionThrown"]}
        finally:
            b.close()


def _english_words(texts: list[str], extra_allowed: set[str] = frozenset()) -> list[str]:
    words = [w for s in texts for w in re.findall(r"[A-Za-z]{3,}", s)]
    return sorted({w for w in words if w not in ALLOWED and w not in extra_allowed})


def _numbers(text: str) -> Counter[str]:
    """Figures as printed (``1.234×``, ``-25.0``, ``3.3``), not digits inside words (``r3``, ``temperature-0``)."""
    return Counter(re.findall(r"(?<![A-Za-z\d-])[-+±]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?×?", text))


def _check_pair(ko: Path, en: Path, extra_allowed: set[str] = frozenset()) -> tuple[dict[str, Any], dict[str, Any]]:
    pk, pe = _page(ko), _page(en)
    assert pk["lang"] == "ko" and pe["lang"] == "en"
    assert pk["errors"] == [] and pe["errors"] == []
    assert _english_words(pk["texts"], extra_allowed) == [], "untranslated English in the Korean report's headings or verdicts"
    for h in ("판정", "워크로드 프로파일", "드래프트 수락", "지연 시간", "벤치마크 실행", "메모리"):
        assert h in pk["texts"], h
    for h in ("Verdict", "Workload profile", "Acceptance", "Latency", "Bench runs", "Memory"):
        assert h in pe["texts"], h
    assert pk["verdict"] and _numbers(pk["verdict"]) == _numbers(pe["verdict"])  # same figures, same formatting
    return pk, pe


def test_hand_made_runs_report_in_korean_and_english(tmp_path: Path) -> None:
    inputs = make_inputs(tmp_path)
    ko, en = tmp_path / "ko.html", tmp_path / "en.html"
    write_report(ReportConfig(inputs=inputs, out=ko, lang="ko"))
    write_report(ReportConfig(inputs=inputs, out=en, lang="en"))
    pk, pe = _check_pair(ko, en)
    assert pk["title"] == "specgauge 보고서" and pe["title"] == "specgauge report"
    assert ("도입 권장" in pk["verdict"] or "도입 보류" in pk["verdict"]) and "GO" in pe["verdict"]
    assert "마진" in pk["verdict"] and "margin" in pe["verdict"]  # findings and reason sentences, not only the badge


def sample_ids() -> set[str]:
    from specgauge.workload.loaders import load_workload
    from specgauge.workload.samples import sample_logged_path

    return {it.request.id for it in load_workload([sample_logged_path()])}


#: the demo's data: its segments, methods, models, run labels, metric names, replay backends, language codes.
#: Names the Korean catalogue writes itself (CPU, EAGLE, flattened…) and the law's parameter names (knee…) are
#: names for every check (``test_report_ko_sections.names``): what a run happens to print cannot fail it
DEMO_NAMES = {"agent_logs", "code_review", "rag_answer", "support_summary", "tool_calling", "tiny-target", "tiny-draft",
              "tiny-eagle3", "draft_model:tiny-draft", "eagle3:tiny-eagle3", "native", "python", "embedded:per-request",
              "specgauge:kv_cache_capacity_bytes", "vllm:kv_cache_usage_perc", "specgauge:model_weight_bytes",
              "eagle3", "draft_model", "hf:tiny-target", "bench-baseline", "bench-speculative", "en", "ko",
              *sample_ids()}  # the shipped sample's request ids (bench's stalls and structured outputs name them)
#: a method label (suffix-k4, eagle3-k2/c1), a law parameter (host[ngram]), a one-letter term
_NAME = re.compile(r"[a-z_0-9]+-k\d+(/c\d+)?|[a-z_]+\[[a-z_0-9]+\]|[a-z]")


def _console_english(text: str, data: set[str] = frozenset()) -> list[str]:
    """English words left in console output, names aside (the checker of tests/unit/test_report_ko_sections)."""
    from tests.unit.test_report_ko_sections import DATA, console_english

    return sorted({w for w, _ in console_english(text, DATA | DEMO_NAMES | data) if not _NAME.fullmatch(w)})


def test_untranslated_english_would_be_caught() -> None:
    assert _console_english("요청 3개 재생함\n  ngram-k4/c1: 수락률 21.4%\n│ host[ngram] │ gd │") == []
    assert _console_english("off: starting the server") == ["server", "starting", "the"]
    assert _english_words(["판정", "후보가 더 빠름"]) == []
    assert _english_words(["the candidate is faster"]) == ["candidate", "faster", "the"]
    assert translate("something new the catalogue lacks", "ko") == "something new the catalogue lacks"


@pytest.mark.skipif(not available(), reason="shipped tiny models missing")
def test_demo_lang_ko_writes_a_korean_report(tmp_path: Path) -> None:
    out, r = demo_ko()  # the same run test_demo.py checks
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "서빙 벤치마크 결과" in r.stdout and "판정" not in r.stderr  # the console summaries are Korean too
    assert _console_english(r.stdout + r.stderr, {str(out)}) == [], "English in the Korean demo's console"
    en = tmp_path / "en.html"
    inputs = [out / n for n in ("profile.json", "simulate.json", "bench-baseline", "bench-speculative", "compare.json")]
    write_report(ReportConfig(inputs=inputs, out=en, lang="en"))
    pk, pe = _check_pair(out / "report.html", en)
    assert "specgauge 데모" in pk["title"]
    # the embedded server reports its own weights and KV cache, so the memory section has figures on the CPU
    assert "최대 시점에 사용 중인 KV 캐시" in pk["body"] and "KV cache in use at peak" in pe["body"]
    assert "대상 모델 가중치" in pk["body"] and "target model weights" in pe["body"]
