"""``profile`` and ``simulate`` console tables under ``--lang ko``: every heading, column and fixed
line comes from the catalogue, so no English word is left outside the data itself (segment and
method names, the tokenizer's name) and the figures' own names (MAL, RAG, JSON, max_tokens…).
The notes computed by simulate / profile are still English and are left out here (what remains)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from specgauge.cli import app

#: words that are names, not English prose: figures' names, API fields, formats
ALLOWED = {"MAL", "RAG", "JSON", "OpenAI", "tool_calls", "tool_call", "max_tokens", "top_p", "usage", "id", "hf", "tiny",
           "target", "temperature", "ngram", "suffix", "tok", "CSV", "p10", "p50", "p90", "p95", "en", "ko"}


def _english_words(text: str, data: set[str]) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.strip().startswith("참고:"):  # computed notes come last: still English (reported)
            break
        for w in re.findall(r"[A-Za-z][A-Za-z0-9_\-]*", line):
            if sum(c.isalpha() for c in w) < 2 or w in ALLOWED or any(w in d for d in data):
                continue
            out.append(w)
    return out


@pytest.mark.parametrize("cmd", [["profile", "--limit", "20"], ["simulate", "--limit", "10", "-m", "ngram,suffix", "-k", "1-2"]])
def test_no_english_under_lang_ko(cmd: list[str]) -> None:
    r = CliRunner().invoke(app, [*cmd, "--lang", "ko"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    data = {"agent_logs", "code_review", "rag_answer", "support_summary", "tool_calling", "tiny-target"}
    left = _english_words(r.stdout, data)
    assert not left, f"English under --lang ko: {sorted(set(left))}"
    assert "워크로드 프로파일" in r.stdout or "오프라인 수락 재생" in r.stdout
    # and the same command in English still says it in English
    r_en = CliRunner().invoke(app, [*cmd, "--lang", "en"], env={"COLUMNS": "250"})
    assert r_en.exit_code == 0 and ("Workload profile" in r_en.stdout or "Offline acceptance replay" in r_en.stdout)


def test_the_check_would_catch_english() -> None:
    assert _english_words("세그먼트 requests overall\n참고: a note", set()) == ["requests", "overall"]
