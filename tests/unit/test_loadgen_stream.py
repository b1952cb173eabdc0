"""The load generator's per-chunk fast path (``apply_payload``: typed msgspec decode, one frame)
leaves a stream's state exactly as the reference path (``_apply_one``: orjson, dict lookups) does,
on any sequence of events: the shapes servers send and the ones they should not."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.loadgen.dialects import get_dialect
from specgauge.testing.fakeserver import vllm_chunk
from specgauge.loadgen.stream import StreamState, _apply_one, apply_payload, counts_by_usage

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 50), st.text(max_size=4), st.floats(allow_nan=False, width=32))
_maybe = st.one_of(_scalar, st.lists(st.integers(0, 9), max_size=3), st.dictionaries(st.text(max_size=3), _scalar, max_size=2))


@st.composite
def _choice(draw: Any) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(_maybe)  # not an object
    c: dict[str, Any] = {"index": 0}
    for key, values in (("text", st.one_of(st.text(max_size=5), _maybe)),
                        ("finish_reason", st.one_of(st.none(), st.sampled_from(["", "stop", "length"]), _scalar)),
                        ("token_ids", st.one_of(st.lists(st.integers(0, 99), max_size=3), _maybe)),
                        ("prompt_token_ids", st.one_of(st.lists(st.integers(0, 99), max_size=3), _maybe))):
        if draw(st.booleans()):
            c[key] = draw(values)
    if draw(st.booleans()):
        if draw(st.integers(0, 4)) == 0:
            c["delta"] = draw(_maybe)
        else:
            c["delta"] = draw(st.dictionaries(st.sampled_from(["content", "reasoning_content", "reasoning", "tool_calls", "role"]),
                                              st.one_of(st.text(max_size=4), _scalar, st.lists(_scalar, max_size=1)), max_size=3))
    return c


@st.composite
def _event(draw: Any) -> bytes:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return b"[DONE]"
    if kind == 1:
        return draw(st.sampled_from([b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe", b'{"a": NaN}', b'{"a": 123456789012345678901234567890}']))
    if kind == 2:
        return vllm_chunk("cmpl-1", "m", draw(st.text(max_size=4)), draw(st.booleans()), draw(st.integers(0, 40))).encode()
    o: dict[str, Any] = {"id": "x"}
    if draw(st.integers(0, 5)):
        o["choices"] = draw(st.lists(_choice(), max_size=2)) if draw(st.integers(0, 6)) else draw(_maybe)
    if draw(st.booleans()):
        o["usage"] = (draw(st.fixed_dictionaries({"completion_tokens": st.one_of(st.integers(0, 40), _scalar)}))
                      if draw(st.integers(0, 3)) else draw(_maybe))
    for key in ("prompt_token_ids", "timings", "error", "metrics"):
        if draw(st.integers(0, 5)) == 0:
            o[key] = draw(_maybe)
    return json.dumps(o, separators=(",", ":") if draw(st.booleans()) else (", ", ": ")).encode()


def _run(payloads: list[bytes], fast: bool, dialect: str) -> tuple[dict[str, Any], str | None]:
    s, d = StreamState(), get_dialect(dialect)
    cumulative = d.cumulative_tokens
    by_usage = counts_by_usage(cumulative)
    err = None
    try:
        for i, p in enumerate(payloads):
            if fast:
                apply_payload(p, float(i), s, 200, cumulative, by_usage)
            else:
                _apply_one(p, float(i), s, 200, cumulative)
    except Exception as e:  # RequestFailed, MalformedSSE: the same exception, message included
        err = f"{type(e).__name__}: {e}"
    return dataclasses.asdict(s), err


@settings(max_examples=400, deadline=None)
@given(st.lists(_event(), max_size=8), st.sampled_from(["vllm", "llamacpp", "sglang"]), st.booleans())
def test_fast_path_equals_reference(payloads: list[bytes], dialect: str, as_text: bool) -> None:
    """Payloads as bytes (the runner, the canary's copy) or text (``apply_events``)."""
    if as_text:
        payloads = [p.decode("utf-8", "replace") for p in payloads]  # type: ignore[misc]
    assert _run(payloads, True, dialect) == _run(payloads, False, dialect)


def test_fast_path_on_a_vllm_stream() -> None:
    """What vllm serve sends, chunk after chunk: the fast path counts every token and keeps the text."""
    payloads = [vllm_chunk("cmpl-1", "tiny", f"t{i} ", False, i + 1).encode() for i in range(5)]
    state, err = _run(payloads, True, "vllm")
    assert err is None
    assert state["counts"] == [1] * 5 and state["text"] == [f"t{i} " for i in range(5)]
    assert state["final"]["usage"] == {"prompt_tokens": 5, "total_tokens": 10, "completion_tokens": 5}
    assert (state, err) == _run(payloads, False, "vllm")


def test_only_the_usage_counter_is_inlined() -> None:
    """vLLM and SGLang count by usage (the fast path inlines it); llama.cpp has a counter of its own."""
    assert counts_by_usage(get_dialect("vllm").cumulative_tokens)
    assert counts_by_usage(get_dialect("sglang").cumulative_tokens)
    assert not counts_by_usage(get_dialect("llamacpp").cumulative_tokens)
