"""Logs written for real by the libraries teams log with, against a running OpenAI-compatible server.

Run in a subprocess (each library patches the ``openai`` client or sets process-wide state, and the
OpenTelemetry instrumentation reads its switches from the environment when instrumented):

    python -m tests.integration._log_producers litellm URL OUT
        LiteLLM's StandardLoggingPayload, as its callbacks get it (a CustomLogger's
        ``kwargs["standard_logging_object"]``), one JSON line per call: OUT/litellm.jsonl
    python -m tests.integration._log_producers otel URL OUT
        opentelemetry-instrumentation-openai-v2 on the official openai client, exported as OTLP JSON
        by opentelemetry-exporter-otlp-json-file (FileSpanExporter / FileLogExporter, one export
        request per line), one folder per content mode: OUT/<mode>/{traces,logs}.jsonl; with 2.4b0:
        span_only, event_only, span_and_event (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental),
        true (what earlier versions took), and console/ (the SDK's console exporters, span_and_event);
        with 2.3b0 (its folder first on PYTHONPATH): true. OUT/<mode>/stderr.txt keeps what the
        libraries logged (2.4b0 rejects ``true`` there).

The calls (``CALLS``): Korean with tools and tool_choice, a tool-call history with a forced tool, a
stream without ``include_usage`` and (LiteLLM) one with it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

KEY = "sk-test"
MODEL = "tiny-target"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "city name"}},
                   "required": ["city"]}}}]
HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
]
#: (name, keyword arguments of chat.completions.create)
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("korean_tools", {"messages": [{"role": "system", "content": "간결하게 답하세요."},
                                   {"role": "user", "content": "서울 날씨 알려줘"}],
                      "tools": TOOLS, "tool_choice": "auto"}),
    ("tool_history", {"messages": HISTORY, "tools": TOOLS,
                      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("stream_no_usage", {"messages": [{"role": "user", "content": "hello there, how are you?"}], "stream": True}),
]
STREAM_WITH_USAGE = ("stream_usage", {"messages": [{"role": "user", "content": "hello there, how are you?"}],
                                      "stream": True, "stream_options": {"include_usage": True}})
COMMON = {"max_tokens": 8, "temperature": 0}


def _drain(r: Any) -> None:
    if hasattr(r, "__iter__") and not hasattr(r, "choices"):
        for _ in r:
            pass


def litellm_logs(url: str, out: Path) -> None:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no download of the model price map
    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    got: list[dict[str, Any]] = []

    class Capture(CustomLogger):  # type: ignore[misc]
        def log_success_event(self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any) -> None:
            got.append(kwargs["standard_logging_object"])

    litellm.callbacks = [Capture()]
    for _, kw in [*CALLS, STREAM_WITH_USAGE]:
        n = len(got)
        _drain(litellm.completion(model=f"openai/{MODEL}", api_base=url + "/v1", api_key=KEY, **COMMON, **kw))
        deadline = time.monotonic() + 30  # success callbacks of streams run on a worker thread
        while len(got) == n and time.monotonic() < deadline:
            time.sleep(0.05)
    with open(out / "litellm.jsonl", "w", encoding="utf-8") as f:
        for p in got:
            f.write(json.dumps(p, ensure_ascii=False, default=str) + "\n")


def _otel_run(url: str, folder: Path, console: bool) -> None:
    import openai
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    folder.mkdir(parents=True, exist_ok=True)
    tp, lp = TracerProvider(), LoggerProvider()
    if console:
        tp.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=open(folder / "traces.txt", "w"))))
        lp.add_log_record_processor(SimpleLogRecordProcessor(ConsoleLogRecordExporter(out=open(folder / "logs.txt", "w"))))
    else:
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter
        from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter

        tp.add_span_processor(SimpleSpanProcessor(FileSpanExporter(folder / "traces.jsonl")))
        lp.add_log_record_processor(SimpleLogRecordProcessor(FileLogExporter(folder / "logs.jsonl")))
    warnings = logging.FileHandler(folder / "stderr.txt")
    logging.getLogger().addHandler(warnings)
    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp, logger_provider=lp)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
        for _, kw in CALLS:
            _drain(client.chat.completions.create(model=MODEL, **COMMON, **kw))
    finally:
        inst.uninstrument()
        tp.shutdown()
        lp.shutdown()
        logging.getLogger().removeHandler(warnings)
        warnings.close()


def otel_logs(url: str, out: Path) -> None:
    from importlib.metadata import version

    v = version("opentelemetry-instrumentation-openai-v2")
    if v.startswith("2.3"):
        modes = {"v23_true": ("true", False, False)}
    else:
        modes = {"span_only": ("span_only", True, False), "event_only": ("event_only", True, False),
                 "span_and_event": ("span_and_event", True, False), "v24_true": ("true", False, False),
                 "console": ("span_and_event", True, True)}
    for name, (capture, opt_in, console) in modes.items():
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = capture
        if opt_in:
            os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        else:
            os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
        _otel_run(url, out / name, console)
    (out / "version.txt").write_text(v)


if __name__ == "__main__":
    which, base_url, dest = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dest.mkdir(parents=True, exist_ok=True)
    (litellm_logs if which == "litellm" else otel_logs)(base_url, dest)
