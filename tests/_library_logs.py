"""What specgauge must read from the logs LiteLLM and opentelemetry-instrumentation-openai-v2 write, checked
the same way on the copies recorded in tests/data (``tests/unit/test_library_logs.py``) and on logs the
libraries write during the test run (``tests/integration/test_library_logs.py``).

The logs come from ``tests.integration._log_producers`` (its ``CALLS``, in that order) against the
embedded server serving the shipped ``tiny-target``, whose tokenizer and chat template specgauge uses
here to re-tokenise: a prompt re-tokenised from a complete log equals the server's own count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.models import target_dir
from specgauge.workload.loaders import load_workload
from specgauge.workload.reader import WorkloadError
from specgauge.workload.schema import WorkloadItem
from specgauge.workload.tokenizer import HFTokenizer
from tests.integration._log_producers import CALLS, MODEL, TOOLS

#: what the capture error must name: 2.4b0's values and the old switch of earlier versions
CAPTURE_VALUES = ("span_only, event_only or span_and_event", "=true for earlier versions")


def _tok() -> HFTokenizer:
    return HFTokenizer(target_dir())


def _profile(*paths: Path) -> dict[str, Any]:
    r = CliRunner().invoke(app, ["profile", *map(str, paths), "--tokenizer", str(target_dir()), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _turns(item: WorkloadItem) -> list[tuple[str, str]]:
    return [(m.role, m.text()) for m in item.request.messages or []]


def _sent_turns(kw: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in kw["messages"]]


def check_litellm(path: Path) -> None:
    """LiteLLM 1.110's StandardLoggingPayload per call (``CALLS`` and a stream with include_usage)."""
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = load_workload([path])
    assert len(items) == len(raw) == len(CALLS) + 1
    (_, k_tools), (_, k_hist), _ = CALLS
    tools_item, hist_item, est_item, usage_item = items
    # tools / tool_choice sit under model_parameters: kept on the request
    assert tools_item.request.tools == TOOLS and tools_item.request.tool_choice == k_tools["tool_choice"]
    assert hist_item.request.tools == TOOLS and hist_item.request.tool_choice == k_hist["tool_choice"]
    assert _turns(tools_item) == _sent_turns(k_tools)  # Korean kept as sent
    assert hist_item.request.messages[1].tool_calls[0]["function"]["name"] == "get_weather"  # type: ignore[index]
    assert hist_item.request.messages[2].tool_call_id == "call_1"  # type: ignore[index]
    # finish_reason kept: the response's choices[0].finish_reason
    assert [i.response.finish_reason for i in items] == [p["response"]["choices"][0]["finish_reason"] for p in raw]  # type: ignore[union-attr]
    assert all(i.response.finish_reason for i in items)  # type: ignore[union-attr]
    # re-tokenised WITH the tool schemas through the chat template: the server's own prompt count
    tok = _tok()
    for item, p in ((tools_item, raw[0]), (hist_item, raw[1]), (usage_item, raw[3])):
        assert len(tok.encode_request(item.request)) == p["prompt_tokens"] == item.response.usage.prompt_tokens  # type: ignore[union-attr]
    bare = tools_item.request.model_copy(update={"tools": None})
    assert len(tok.encode_request(bare)) < raw[0]["prompt_tokens"]  # the schemas are part of what the server counted
    # a stream without include_usage: LiteLLM's own estimate, never the server's usage
    assert raw[2]["stream"] is True and "stream_options" not in raw[2]["model_parameters"]
    assert est_item.response.usage is None  # type: ignore[union-attr]
    assert est_item.request.metadata["litellm_estimated_usage"] == {
        "prompt_tokens": raw[2]["prompt_tokens"], "completion_tokens": raw[2]["completion_tokens"]}
    assert usage_item.response.usage.completion_tokens == raw[3]["completion_tokens"]  # type: ignore[union-attr]
    prof = _profile(path)
    assert prof["overall"]["tools_share"] == pytest.approx(2 / 4)
    assert prof["token_sources"]["output: usage"] == 3 and prof["token_sources"]["output: tokenizer"] == 1
    assert prof["token_counting"]["prompt_count_mismatch"] == 0


def _load_error(*paths: Path) -> str:
    with pytest.raises(WorkloadError) as e:
        load_workload(list(paths))
    return str(e.value)


def check_otel_24(folder: Path) -> None:
    """opentelemetry-instrumentation-openai-v2 2.4b0: the three content modes, ``true``, the console."""
    span_only = load_workload([folder / "span_only" / "traces.jsonl"])
    assert [_turns(i) for i in span_only][0] == _sent_turns(CALLS[0][1])  # Korean, system turn first
    hist = span_only[1].request.messages or []
    assert [m.role for m in hist] == ["user", "assistant", "tool"]
    assert hist[1].tool_calls[0]["function"] == {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}  # type: ignore[index]
    assert hist[2].tool_call_id == "call_1"
    assert all(i.response.finish_reason == "length" for i in span_only)  # type: ignore[union-attr]
    assert all(i.named_model() == MODEL for i in span_only)
    # event_only: content in the details log records, model and usage on the spans: one call each
    ev = load_workload([folder / "event_only" / "traces.jsonl", folder / "event_only" / "logs.jsonl"])
    assert [_turns(i) for i in ev] == [_turns(i) for i in span_only]
    assert [i.response.usage.prompt_tokens if i.response.usage else None for i in ev] == \
        [i.response.usage.prompt_tokens if i.response.usage else None for i in span_only]  # type: ignore[union-attr]
    assert all(v in _load_error(folder / "event_only" / "traces.jsonl") for v in CAPTURE_VALUES)
    # span_and_event: the same call on its span and in its log record is one request, not a duplicate
    both = load_workload([folder / "span_and_event" / "traces.jsonl", folder / "span_and_event" / "logs.jsonl"])
    assert [_turns(i) for i in both] == [_turns(i) for i in span_only]
    assert len({i.request.id for i in both}) == len(CALLS)
    # `true`: 2.4b0 itself rejects it (its warning) and captures nothing; our message names its values
    warned = (folder / "v24_true" / "stderr.txt").read_text()
    assert "SPAN_ONLY" in warned and "true is not a valid option" in warned
    msg = _load_error(folder / "v24_true" / "traces.jsonl")
    assert all(v in msg for v in CAPTURE_VALUES) and "gen_ai.input.messages" in msg
    # no tool definitions on the spans: the re-tokenised prompt is far below the server's count
    tok = _tok()
    for item in span_only[:2]:
        assert len(tok.encode_request(item.request)) < item.response.usage.prompt_tokens / 2  # type: ignore[union-attr]
    prof = _profile(folder / "span_only" / "traces.jsonl")
    tc = prof["token_counting"]
    assert tc["label"] == "approximate" and tc["prompt_count_mismatch"] == 2
    assert "differ from the prompt_tokens the server logged" in tc["reason"] and "tool definitions" in tc["reason"]
    check_console(folder / "console")


def check_console(folder: Path) -> None:
    """The SDK's console exporters' output: recognised, and the user told to export OTLP JSON."""
    for name, exporter in (("traces.txt", "ConsoleSpanExporter"), ("logs.txt", "ConsoleLogRecordExporter")):
        msg = _load_error(folder / name)
        assert exporter in msg and "not OTLP JSON: export OTLP JSON instead" in msg
    r = subprocess.run([sys.executable, "-m", "specgauge", "profile", str(folder / "traces.txt")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "ConsoleSpanExporter" in r.stderr and "invalid JSON" not in r.stderr


def check_otel_23(folder: Path) -> None:
    """2.3b0 with content capture (``true``): per-message log events, content in ``body``."""
    logs, traces = folder / "v23_true" / "logs.jsonl", folder / "v23_true" / "traces.jsonl"
    names = [json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["eventName"]
             for line in logs.read_text().splitlines()]
    assert {"gen_ai.user.message", "gen_ai.choice", "gen_ai.assistant.message", "gen_ai.tool.message"} <= set(names)
    alone = load_workload([logs])
    assert [_turns(i) for i in alone][0] == _sent_turns(CALLS[0][1])
    hist = alone[1].request.messages or []
    assert [m.role for m in hist] == ["user", "assistant", "tool"]
    assert hist[1].tool_calls[0]["function"]["name"] == "get_weather" and hist[2].tool_call_id == "call_1"  # type: ignore[index]
    assert all(i.response is not None and i.response.text and i.response.finish_reason == "length" for i in alone)
    assert all(i.named_model() is None for i in alone)  # the events name no model: the spans do
    joined = load_workload([traces, logs])
    assert [_turns(i) for i in joined] == [_turns(i) for i in alone]
    assert all(i.named_model() == MODEL for i in joined)
    assert joined[0].response.usage is not None and joined[0].response.usage.prompt_tokens > 0  # type: ignore[union-attr]
    assert [i.response.text for i in joined] == [i.response.text for i in alone]  # type: ignore[union-attr]
    msg = _load_error(traces)  # the spans alone: content went to the logs
    assert all(v in msg for v in CAPTURE_VALUES) and "pass it beside the traces" in msg
