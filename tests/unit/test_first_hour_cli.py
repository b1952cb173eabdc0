"""The first hour with one's own logs (issue 40), through the real entry point (``python -m specgauge``):
what a newcomer trips over when the input is not what a command wants, each as the person reads it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # os.environ as Python sees it: pytest's process leaves COLUMNS=80 in the C environment a child inherits
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "specgauge", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env)


def _prompts(tmp_path: Path, n: int = 3) -> Path:
    w = tmp_path / "prompts.jsonl"
    w.write_text("".join(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"hello {i}"}]}) + "\n"
                         for i in range(n)))
    return w


def test_simulate_on_prompts_only_says_nothing_to_replay(tmp_path: Path) -> None:
    """Item 1: a prompts file has nothing to replay: one line naming the file and why, exit 2 — not a
    table of dashes labelled EXACT with exit 0."""
    w = _prompts(tmp_path)
    for args in ((), ("--json",)):
        r = cli("simulate", str(w), "-m", "ngram", "-k", "1,2", *args)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and "EXACT" not in r.stdout + r.stderr and '"exact": true' not in r.stdout
        assert "nothing to replay in prompts.jsonl (3 request(s) with no logged response)" in r.stderr
        assert "specgauge bench" in r.stderr
    ko = cli("simulate", str(w), "-m", "ngram", "-k", "1", "--lang", "ko")
    assert ko.returncode == 2 and "재생할 것이 없습니다" in ko.stderr and "기록된 응답 없음" in ko.stderr


def test_nothing_replayed_is_not_exact(tmp_path: Path) -> None:
    """Item 1, the library: a result with no replayed request is not labelled exact (nor its summaries)."""
    from specgauge.simulate.run import SimulateConfig, simulate
    from specgauge.workload.tokenizer import ApproxTokenizer

    r = simulate(SimulateConfig(workload=[_prompts(tmp_path)], methods=["ngram"], ks=[1]), ApproxTokenizer())
    assert r.requests_replayed == 0 and not r.exact and not any(s.exact for s in r.overall.summaries)


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def _tool_log(tmp_path: Path, ids: bool = False) -> Path:
    """Two replies of OpenAI tool_calls only (content null) and one of text, as a chat log with responses."""
    def call(i: int, city: str) -> dict:
        resp = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call{i}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 50, "completion_tokens": 20}}
        if ids:
            resp["choices"][0]["token_ids"] = [5, 6, 7, 8, 5, 6, 7, 9]
        return {"request": {"id": f"t{i}", "model": "tiny-target", "tools": WEATHER,
                            "messages": [{"role": "user", "content": f"Weather in {city}?"}]}, "response": resp}
    text = {"request": {"id": "x", "model": "tiny-target", "messages": [{"role": "user", "content": "Say hello"}]},
            "response": {"choices": [{"message": {"role": "assistant", "content": "Hello! Hello there."}, "finish_reason": "stop"}]}}
    p = tmp_path / ("tools_ids.jsonl" if ids else "tools.jsonl")
    p.write_text("".join(json.dumps(r) + "\n" for r in (call(1, "Seoul"), call(2, "Busan"), text)))
    return p


def test_tool_call_replies_are_replayed_as_the_template_writes_them(tmp_path: Path) -> None:
    """Item 2: replies that are OpenAI tool_calls only are output the model generated: replayed (as the chat
    template writes the calls, labelled approximate), not skipped as 'empty logged output'."""
    r = cli("simulate", str(_tool_log(tmp_path)), "-m", "ngram", "-k", "2", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["requests_replayed"] == 3 and res["skipped"] == {} and res["exact"] is False
    assert any("2 logged response(s) held OpenAI tool_calls: replayed as the text hf:tiny-target's chat template" in n
               for n in res["notes"])
    shown = cli("simulate", str(_tool_log(tmp_path)), "-m", "ngram", "-k", "2")
    assert "APPROXIMATE" in shown.stdout and "EXACT" not in shown.stdout and "empty logged output" not in shown.stdout
    # logged token ids win: exact, and no note about writing the calls back
    exact = json.loads(cli("simulate", str(_tool_log(tmp_path, ids=True)), "-m", "ngram", "-k", "2", "--json").stdout)
    assert exact["requests_replayed"] == 3 and not any("tool_calls" in n for n in exact["notes"])


def test_reply_text_follows_the_chat_template(tmp_path: Path) -> None:
    """Item 2: the calls come back as the model's own template writes them — the shipped tiny model's,
    Qwen2.5's real template (tests/data/chat_templates), and the hermes form without a template."""
    import shutil

    from specgauge.models import target_dir
    from specgauge.workload.loaders import load_workload
    from specgauge.workload.tokenizer import ApproxTokenizer, load_tokenizer, reply_text

    item = load_workload([_tool_log(tmp_path)])[0]
    calls = item.response.tool_calls
    qwen = tmp_path / "qwen"
    qwen.mkdir()
    shutil.copy(Path(target_dir()) / "tokenizer.json", qwen / "tokenizer.json")
    shutil.copy(ROOT / "tests/data/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja", qwen / "chat_template.jinja")
    want = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Seoul"}}\n</tool_call>'
    for tok in (load_tokenizer(target_dir()), load_tokenizer(qwen)):
        assert reply_text(tok, item.request, "", calls) == (want, "template")
        assert reply_text(tok, item.request, "Checking.", calls) == ("Checking.\n" + want, "template")
    assert reply_text(ApproxTokenizer(), item.request, "", calls) == (want, "hermes")
    assert reply_text(ApproxTokenizer(), item.request, "plain", None) == ("plain", None)


def test_bench_says_connection_refused_and_drop_v1(tmp_path: Path) -> None:
    """Item 5: nothing listening at --base-url is "connection refused at URL", with or without --model, and
    leaves no results folder; a base URL ending in /v1 is told to drop it (the server root is wanted)."""
    from specgauge.servers import free_port

    w = _prompts(tmp_path, 2)
    url = f"http://127.0.0.1:{free_port()}"
    for extra in ((), ("--model", "x")):
        out = tmp_path / "out" / "run"
        r = cli("bench", "--base-url", url, "-w", str(w), "-o", str(out), *extra)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"connection refused at {url}" in r.stderr and "nothing was written" in r.stderr
        assert not (tmp_path / "out").exists()
    v1 = cli("bench", "--base-url", url + "/v1/", "-w", str(w), "-o", str(tmp_path / "o2"))
    assert v1.returncode == 2 and "drop /v1" in v1.stderr and f"--base-url {url}\n" in v1.stderr
    from specgauge.i18n import translate

    line = r.stderr.split("error: ", 1)[1].strip()
    assert "연결이 거부됨" in translate(line, "ko") and url in translate(line, "ko")  # what --lang ko shows


def test_compare_diagnosis_without_per_request_counts() -> None:
    """Item 4 in compare's cause line: no per-request counts is "the run's totals agree", or "not checked"
    without counters either — never "0 of N requests equal the replay"."""
    from specgauge.stats.diagnosis import diagnose

    def check(rate: float | None) -> dict:
        return {"specgauge": {"replay_check": {"available": True, "gap": False, "requests": 6, "matching": 0,
                                               "no_server_counts": 6, "server_acceptance_rate": rate}}}
    ok = diagnose(None, check(0.519))
    assert ok.drafter == "the drafter accepts what its own outputs allow: the run's totals agree with the replay " \
                         "(51.9 % accepted; the server gave no per-request counts)"
    unknown = diagnose(None, check(None))
    assert "drafter" not in unknown.failed and "was not checked" in unknown.drafter and "0 of 6" not in unknown.cause


def test_serve_refuses_a_bad_speculative_config_before_saying_it_serves() -> None:
    """Item 7: a bad --speculative-config is one error line, before the models load and without the
    "serving … (Ctrl-C to stop)" line that used to come first."""
    for spec, why in (("{bad", "not valid JSON"), ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens")):
        r = cli("serve", "--port", "9", "--speculative-config", spec)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"error: --speculative-config: {why}" in r.stderr and "serving" not in r.stderr + r.stdout


def _profile(tmp_path: Path, rows: list[dict], name: str = "w.jsonl") -> dict:
    w = tmp_path / name
    w.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli("profile", str(w), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["overall"]


def test_profile_labels_korean_tool_calls_and_context(tmp_path: Path) -> None:
    """Item 8: short all-Korean prompts are "ko" (they were "other" beside "Hangul 100 %"); OpenAI tool
    calls with valid JSON arguments are counted well-formed (they read "0 of those well-formed JSON"); a
    "Context:" system message is retrieved context (it read RAG 0 %)."""
    ko = _profile(tmp_path, [{"id": f"k{i}", "messages": [{"role": "user", "content": q}]}
                             for i, q in enumerate(["주문 상태 알려줘", "환불은 언제 되나요?", "배송지 변경 가능해?"])])
    assert ko["hangul_share"] == 1.0 and ko["languages"] == {"ko": 3}

    log = _tool_log(tmp_path)
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    rows[1]["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"city": '  # cut off
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    calls = _profile(tmp_path, rows, "calls.jsonl")
    assert calls["tool_calls_openai"] == 2 and calls["tool_calls_openai_parsed"] == 1
    shown = cli("profile", str(tmp_path / "calls.jsonl")).stdout
    assert "2 as OpenAI tool_calls (1 with well-formed JSON arguments), 0 as text" in " ".join(shown.split())

    rag = _profile(tmp_path, [{"id": f"r{i}", "messages": [
        {"role": "system", "content": "Answer from the context only.\n\nContext:\nRefunds take 3 business days. "
                                      "Return shipping is free over $100."},
        {"role": "user", "content": f"How long do refunds take? ({i})"}]} for i in range(2)], "rag.jsonl")
    assert rag["context_share"] == 1.0 and rag["context_char_share"] > 0.4


def test_simulate_shows_the_uncalibrated_speedup_as_a_guess(tmp_path: Path) -> None:
    """Item 8: without a fitted law the speedup column is a guess and says so (it read "speedup B=1 1.32x",
    beside a live A/B of 0.87x)."""
    r = cli("simulate", "-m", "ngram", "-k", "2", "--limit", "6", "--batch", "1,4")
    assert r.returncode == 0, r.stderr
    shown = " ".join(r.stdout.split())
    assert "guess B=1" in shown and "guess B=4" in shown and "speedup B=" not in shown
    assert "guess = speedup from an uncalibrated cost model (~)" in shown and re.search(r"~\d+\.\d\dx", shown)
    assert "best k by the uncalibrated speedup guess" in shown


def test_peak_output_throughput_is_never_below_the_mean() -> None:
    """Item 8: a run shorter than a second (or with a short last second) showed a "peak" below its mean,
    vLLM's partial 1-second bucket counted as a whole second."""
    from specgauge.records import Chunk, RequestRecord, TokenCountSource
    from specgauge.stats.latency import latency_metrics

    def rec(rid: str, chunks: list[tuple[float, int]]) -> RequestRecord:
        cs = [Chunk(t=t, n=n) for t, n in chunks]
        return RequestRecord(id=rid, index=0, scheduled_s=0.0, sent_s=0.0, started_at=1000.0, ok=True, ttft_s=cs[0].t,
                             e2e_s=cs[-1].t, elapsed_s=cs[-1].t, chunks=cs, token_counts=TokenCountSource.usage,
                             prompt_tokens=10, output_tokens=sum(n for _, n in chunks))

    short = [rec("a", [(0.05 * i, 4) for i in range(1, 9)]), rec("b", [(0.05 * i, 4) for i in range(1, 9)])]
    m = latency_metrics(short, 0.42)  # 64 tokens in 0.42 s: 152 tok/s; one 1-second bucket held 64
    assert m.max_output_tokens_per_s >= m.output_throughput
    # 10 tokens every 0.1 s to 2.0 s, 1 more at 2.1 s: buckets [0,1) 90, [1,2) 100, [2,2.1] 11 — a 0.1 s tail,
    # counted with the bucket before it: 111 tokens / 1.1 s
    tail = [rec("a", [(0.1 * i, 10) for i in range(1, 21)] + [(2.1, 1)])]
    m2 = latency_metrics(tail, 2.1)
    assert m2.max_output_tokens_per_s >= m2.output_throughput and abs(m2.max_output_tokens_per_s - 111 / 1.1) < 1e-9


def test_help_has_no_bool_placeholder_and_is_not_cut_at_80_columns() -> None:
    """Item 9: flags take no value, so no "<bool>" after them; piped help is as wide as the rest of the output."""
    shown = {}
    for args in (("--help",), ("simulate", "--help"), ("bench", "--help")):
        r = cli(*args)
        assert r.returncode == 0, r.stderr
        assert "<bool>" not in r.stdout and "--help" in r.stdout
        assert max(len(line) for line in r.stdout.splitlines()) > 100  # rich's default outside a terminal was 80
        shown[args[0]] = r.stdout
    assert re.search(r"--json\s+Print JSON instead of tables", shown["simulate"])


def test_help_lists_every_workload_format_and_the_teacher_forced_figure() -> None:
    """Item 9: the workload help names every format the loaders read (trace importers too); the known
    methods say where the teacher-forced figure is (it is not a method of its own)."""
    from specgauge.cli.common import FormatOpt, WorkloadArg
    from specgauge.workload.loaders import FORMATS

    arg_help, fmt_help = WorkloadArg.__metadata__[0].help.lower(), FormatOpt.__metadata__[0].help
    for name in FORMATS:
        assert name in arg_help or name.replace("-", " ") in arg_help, name
        assert name in fmt_help, name
    r = cli("simulate", "-m", "eagle3_teacher_forced", "-k", "1")
    assert r.returncode == 2 and "unknown draft method 'eagle3_teacher_forced'" in r.stderr
    assert re.search(r"\(eagle3, mtp(, \w+)* and \w+ also give the teacher-forced figure", r.stderr), r.stderr
    assert "--method eagle3:DIR; it is not a method of its own" in r.stderr


def test_report_on_a_workload_says_what_it_is_and_leaves_it_alone(tmp_path: Path) -> None:
    """Item 9: report (or compare) handed a workload says it is a workload and what to pass instead (it said
    "9 validation errors for RequestRecord"), and never cuts the file's unterminated last line."""
    w = _tool_log(tmp_path)
    w.write_bytes(w.read_bytes().rstrip(b"\n"))  # a last line without its newline
    before = w.read_bytes()
    r = cli("report", str(w), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{w}: a workload file (openai), not results" in r.stderr and "specgauge profile tools.jsonl --json" in r.stderr
    assert "validation error" not in r.stderr and w.read_bytes() == before


def test_a_bad_flag_value_names_the_flag() -> None:
    """Item 9: a value the config refuses names the flag typed (it named the field: "max_concurrency: …")."""
    r = cli("bench", "--base-url", "http://127.0.0.1:9", "--max-concurrency", "-1")
    assert r.returncode == 2 and "error: --max-concurrency: Input should be greater than or equal to 1" in r.stderr
    assert "max_concurrency:" not in r.stderr


def test_demo_replay_ticker_prints_a_bounded_number_of_lines(monkeypatch) -> None:  # noqa: ANN001
    """Item 9: the demo's "replayed N requests" line comes after 2, 4, 8 … s, not every 2 s: 10 minutes of
    replay write 8 lines into a non-terminal log (they wrote 300)."""
    import io

    from rich.console import Console

    import specgauge.demo as demo

    clock = [0.0]
    monkeypatch.setattr(demo.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    tick = demo._ticker(Console(file=out, width=100), "demo.tick.replayed")
    for n in range(1, 6001):  # a request every 0.1 s for 600 s
        clock[0] += 0.1
        tick(n)
    lines = out.getvalue().splitlines()
    assert len(lines) == 9 and lines[0].strip() == "replayed 20 requests" and lines[-1].strip() == "replayed 5120 requests"
