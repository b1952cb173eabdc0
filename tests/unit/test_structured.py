"""Structured outputs checked against the request's own schema (``specgauge.structured``), recorded per
request by the stream reader, counted per segment (``stats.outputs``), judged in compare (NO-GO when
the candidate breaks more) and by the canary's guardrail; the structured sample's reference answers."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from specgauge.canary.config import JudgeConfig
from specgauge.canary.judge import Outcome, WindowInput, judge_window
from specgauge.canary.observe import Role
from specgauge.canary.window import Sample
from specgauge.i18n import translate
from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.stream import StreamState, apply_payloads, stream_record
from specgauge.records import OutputCheck, RequestRecord, ToolCall
from specgauge.stats.outputs import compare_outputs, outputs_summary
from specgauge.stats.verdict import RunInfo, Verdict, decide
from specgauge.structured import check_body, check_output, expectation, text_tool_calls
from specgauge.workload.samples import generate_pairs, generate_structured_pairs, structured_sample_path, write_sample

TOOLS = [{"type": "function", "function": {"name": "refund", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string", "pattern": "^ORD-[0-9]+$"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"], "additionalProperties": False}}}]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def body(**kw: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "x"}], **kw}


def test_text_tool_calls_valid_and_each_way_to_break_them() -> None:
    exp = expectation(body(tools=TOOLS, tool_choice="auto"))
    good = '<tool_call>\n{"name": "refund", "arguments": {"order_id": "ORD-12", "amount": 3.5}}\n</tool_call>'
    assert check_output(exp, good) == OutputCheck(kind="tool_call", valid=True, items=1)
    assert check_output(exp, good + " then " + good).items == 2
    broken = {
        '<tool_call>{"name": "refund", "arguments": {"order_id": "ORD-12",, "amount": 3}}</tool_call>': "not JSON",
        '<tool_call>{"name": "refund", "arguments": {"order_id": "X-1", "amount": 3}}</tool_call>': "does not match",
        '<tool_call>{"name": "refund", "arguments": {"order_id": "ORD-1"}}</tool_call>': "'amount' is a required property",
        '<tool_call>{"name": "wire", "arguments": {}}</tool_call>': "wire is not an offered tool",
        '<tool_call>{"name": "refund", "arguments": {"order_id": "ORD-1", "amount": 1}': "without </tool_call>",
        '<tool_call>["refund"]</tool_call>': "not an object with a name",
    }
    for text, why in broken.items():
        c = check_output(exp, text)
        assert c is not None and c.valid is False and why in (c.error or ""), (text, c)
    assert check_output(exp, "Your refund is on its way.") == OutputCheck(kind="tool_call", valid=None, items=0)
    assert check_output(expectation(body(tools=TOOLS, tool_choice="required")), "no call").valid is False
    cut = check_output(exp, '<tool_call>{"name": "refund", "argu', finish_reason="length")
    assert cut is not None and cut.error is not None and cut.error.endswith("(cut at max_tokens)")


def test_openai_tool_calls_json_object_and_json_schema() -> None:
    exp = expectation(body(tools=TOOLS))
    call = ToolCall(name="refund", arguments='{"order_id": "ORD-7", "amount": 1}')
    assert check_output(exp, "", [call]).valid is True
    assert check_output(exp, "", [call.model_copy(update={"arguments": '{"order_id": "ORD-7"'})]).valid is False
    obj = expectation(body(response_format={"type": "json_object"}))
    assert check_output(obj, ' {"a": 1}\n').valid is True
    assert check_output(obj, "[1, 2]").valid is False
    assert check_output(obj, "```json\n{}\n```").valid is False  # strict: structured output is the document itself
    js = expectation(body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}))
    assert check_output(js, '{"ok": true}').valid is True
    bad = check_output(js, '{"ok": "yes"}')
    assert bad is not None and bad.valid is False and "ok: 'yes' is not of type 'boolean'" in (bad.error or "")
    assert check_body(body(guided_json=json.dumps(SCHEMA)), '{"ok": false}') == OutputCheck(kind="json", valid=True, items=1)
    assert expectation(body()) is None and check_body(body(), "anything") is None
    # a schema that is no JSON Schema is the request's fault: not judged
    odd = check_body(body(response_format={"type": "json_schema", "json_schema": {"schema": {"type": 12}}}), "{}")
    assert odd is not None and odd.valid is None and "not a JSON Schema" in (odd.error or "")
    assert text_tool_calls("plain") == ([], None)


def test_tool_call_deltas_are_assembled_on_both_stream_paths() -> None:
    """vLLM streams a call's name once and its arguments in pieces; both parser paths assemble them."""
    events = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                                              "function": {"name": "refund", "arguments": ""}}]}}],
         "usage": {"completion_tokens": 1}},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"order_id": "ORD-1", '}}]}}],
         "usage": {"completion_tokens": 5}},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"amount": 2}'}}]}}],
         "usage": {"completion_tokens": 8}},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], "usage": {"completion_tokens": 8}},
    ]
    d = Dialect()
    fast, ref = StreamState(), StreamState()
    for i, ev in enumerate(events):
        raw = orjson.dumps(ev)
        apply_payloads([raw], 0.01 * i, fast, 200, d.cumulative_tokens)  # the typed fast path (msgspec)
        apply_payloads([raw.decode()], 0.01 * i, ref, 200, lambda e: d.cumulative_tokens(e))  # the reference path
    for st in (fast, ref):
        apply_payloads([b"[DONE]"], 0.05, st, 200, d.cumulative_tokens)
        rec = stream_record(st, d, failure=None, error=None, http_status=200, e2e_s=0.05, elapsed_s=0.05, id="r",
                            segment="s", index=0, scheduled_s=0.0, sent_s=0.0, ready_s=0.0, started_at=0.0)
        assert rec.tool_calls == [ToolCall(id="c1", name="refund", arguments='{"order_id": "ORD-1", "amount": 2}')]
        assert len(rec.chunks) == 3  # tool-call deltas carry output
        assert check_output(expectation(body(tools=TOOLS)), rec.text, rec.tool_calls).valid is True
        line = rec.model_dump_json()
        assert RequestRecord.model_validate_json(line).tool_calls == rec.tool_calls
    plain = RequestRecord(id="x", index=0, scheduled_s=0, sent_s=0, started_at=0, ok=True)
    assert "tool_calls" not in plain.model_dump_json() and "output_check" not in plain.model_dump_json()


def test_sample_reference_answers_are_valid_and_the_shipped_file_is_fresh(tmp_path: Any) -> None:
    structured = list(generate_structured_pairs())
    assert len(structured) == 24 and {line["metadata"]["lang"] for line, _ in structured} == {"en", "ko"}
    for line, answer in structured:
        c = check_output(expectation(line), answer)
        assert c is not None and c.kind == "json" and c.valid is True, (line["id"], c)
    calls = [check_output(expectation(line), a) for line, a in generate_pairs() if line["segment"] == "tool_calling"]
    assert sum(c.valid is True for c in calls if c) >= 10 and not any(c.valid is False for c in calls if c)
    out = tmp_path / "s.jsonl"
    assert write_sample(out, structured=True) == 24
    assert structured_sample_path().read_bytes() == out.read_bytes(), "regenerate: python -m specgauge.workload.samples.generate --structured"


def _rec(i: int, valid: bool | None, segment: str = "json") -> RequestRecord:
    oc = None if valid is None else OutputCheck(kind="json", valid=valid, items=1, error=None if valid else "the output is not JSON (x)")
    return RequestRecord(id=f"r{i}", segment=segment, index=i, scheduled_s=0, sent_s=0, started_at=0, ok=True, ttft_s=0.05,
                         e2e_s=0.5 + 0.001 * (i % 7), output_tokens=40, chunks=[(0.05, 1), (0.5, 39)], output_check=oc)


def test_compare_says_no_go_when_the_candidate_breaks_more_and_not_on_a_a() -> None:
    base = [_rec(i, True) for i in range(40)]
    worse = [_rec(i, i % 4 != 0) for i in range(40)]  # 10 of 40 invalid
    info = RunInfo(label="b", path="b", kind="results")
    res = decide(base, worse, info, info.model_copy(update={"label": "c"}))
    o = res.overall.outputs if res.overall else None
    assert o is not None and (o.baseline_k, o.baseline_n, o.candidate_k, o.candidate_n) == (0, 40, 10, 40) and o.p_value < 0.01
    assert res.verdict.overall.verdict is Verdict.NO_GO
    reason = next(r for r in res.verdict.overall.reasons if "structured outputs" in r)
    assert "10 of 40 invalid against 0 of 40" in reason and "first: r0: the output is not JSON" in reason
    assert "구조화 출력" in translate(reason, "ko")
    same = decide(base, [_rec(i, True) for i in range(40)], info, info.model_copy(update={"label": "c"}))
    assert not any("break more" in r for r in same.verdict.overall.reasons)
    assert outputs_summary(worse) == {"asked": 40, "judged": 40, "invalid": 10, "kinds": {"json": {"asked": 40, "judged": 40, "invalid": 10}},
                                      "examples": [f"r{i}: the output is not JSON (x)" for i in (0, 4, 8, 12, 16)]}
    assert compare_outputs([_rec(0, None)], [_rec(0, None)]) is None


def _samples(n: int, invalid: int) -> list[Sample]:
    return [Sample(role=Role.live, ok=True, failure=None, ttft=0.05, tpot=0.02 * (1 + 0.01 * (i % 5)), e2e=2.0 + 0.01 * (i % 5),
                   invalid=i < invalid, error="tool call 1: not JSON (x)" if i < invalid else None) for i in range(n)]


@pytest.mark.parametrize("invalid, outcome", [(0, Outcome.PASS), (12, Outcome.FAIL)])
def test_canary_guardrail_on_structured_outputs(invalid: int, outcome: Outcome) -> None:
    cfg = JudgeConfig(min_samples=20)
    j = judge_window(WindowInput(baseline=_samples(40, 0), candidate=_samples(40, invalid)), cfg)
    c = next(c for c in j.checks if c.name == "guardrail:structured_outputs")
    assert c.kind == "guardrail" and c.status == ("fail" if invalid else "pass") and j.outcome is outcome
    if invalid:
        assert c.evidence["candidate_invalid"] == 12 and c.evidence["p_value"] < 0.01
        assert "구조화 출력" in translate(c.reason, "ko")
    alone = judge_window(WindowInput(baseline=[], candidate=_samples(40, 1), baseline_expected=False), cfg)
    assert next(c for c in alone.checks if c.name == "guardrail:structured_outputs").status == "skipped"
