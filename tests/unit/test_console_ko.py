"""``profile`` and ``simulate`` console tables under ``--lang ko``: every heading, column and fixed
line comes from the catalogue, so no English word is left outside the data itself (segment and
method names, the tokenizer's name) and the figures' own names (MAL, RAG, JSON, max_tokens…) — the
notes simulate and profile compute included (stored in English, shown through the catalogue)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.workload.samples import sample_logged_path

#: words that are names, not English prose: figures' names, API fields, formats
ALLOWED = {"MAL", "RAG", "JSON", "OpenAI", "tool_calls", "tool_call", "max_tokens", "top_p", "usage", "id", "hf", "tiny",
           "target", "temperature", "ngram", "suffix", "tok", "CSV", "p10", "p50", "p90", "p95", "en", "ko", "ID",
           # names inside the notes: a command, a file, a field, vLLM's option, the end-of-sequence token
           "specgauge", "calibrate", "cost_profile", "json", "vLLM", "return_token_ids",
           "EOS", "segment", "DIR", "llama", "model", "simulate", "detailed"}


def _english_words(text: str, data: set[str]) -> list[str]:
    out = []
    for line in text.splitlines():
        line = re.sub(r"--[a-z][a-z-]*", "", line)  # flags are names
        for w in re.findall(r"[A-Za-z][A-Za-z0-9_\-]*", line):
            if sum(c.isalpha() for c in w) < 2 or w in ALLOWED or any(w in d for d in data):
                continue
            out.append(w)
    return out


def _untokenised(tmp: Path) -> str:
    """A log without token ids, one request naming the target, one another model, one none: the
    re-tokenised note with all three parts."""
    p = tmp / "untokenised.jsonl"
    rows = [{"request": {"model": m, "messages": [{"role": "user", "content": "hello world hello world"}]},
             "response": {"text": "hello world hello world"}} for m in ("tiny-target", "llama", None)]
    for r in rows:
        if r["request"]["model"] is None:
            del r["request"]["model"]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


CMDS = {
    "profile": ["profile", "--limit", "20"],
    "simulate": ["simulate", "--limit", "10", "-m", "ngram,suffix", "-k", "1-2"],
    "partition": ["simulate", str(sample_logged_path()), "--partition-by", "segment", "--limit", "10", "-m", "suffix", "-k", "2"],
    "untokenised": ["simulate", "{untokenised}", "-m", "ngram", "-k", "2"],
    "profile-untokenised": ["profile", "{untokenised}"],
}


@pytest.mark.parametrize("name", list(CMDS))
def test_no_english_under_lang_ko(name: str, tmp_path: Path) -> None:
    cmd = [a.replace("{untokenised}", _untokenised(tmp_path)) if "{" in a else a for a in CMDS[name]]
    r = CliRunner().invoke(app, [*cmd, "--lang", "ko"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    data = {"agent_logs", "code_review", "rag_answer", "support_summary", "tool_calling", "tiny-target", "default", str(tmp_path)}
    left = _english_words(r.stdout, data)
    assert not left, f"English under --lang ko: {sorted(set(left))}"
    assert "워크로드 프로파일" in r.stdout or "오프라인 수락 재생" in r.stdout
    assert "참고:" in r.stdout or name == "profile"  # the notes are in what was checked
    # and the same command in English still says it in English
    r_en = CliRunner().invoke(app, [*cmd, "--lang", "en"], env={"COLUMNS": "250"})
    assert r_en.exit_code == 0 and ("Workload profile" in r_en.stdout or "Offline acceptance replay" in r_en.stdout)


def test_the_check_would_catch_english() -> None:
    assert _english_words("세그먼트 requests overall\n참고: a note", set()) == ["requests", "overall", "note"]
