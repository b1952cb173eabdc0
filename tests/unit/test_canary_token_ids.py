"""The token ids the canary proxy adds to a candidate's requests come out of what the client gets,
byte for byte: every pair of documents below is (what the server writes when asked, what it writes
when not asked), and stripping the first must give the second exactly — key order, separators,
nulls and every other byte as they were.

Embedded shapes come from the engine's own chunk builder (``engine.service._chunk``) and its body
layout; vLLM shapes are the recorded bytes of a real vLLM 0.32 run
(``tests/data/recorded/vllm_0.32.0_ngram.json``, recorded without token ids) with the ids put where
vLLM puts them when asked (``"token_ids":null`` -> a list; see ``canary/token_ids.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specgauge.canary.token_ids import Absent, StreamStripper, TokenIdAsk, refused, strip_json, with_field

RECORDED = Path(__file__).parents[1] / "data" / "recorded" / "vllm_0.32.0_ngram.json"


def _embedded_chunks(token_ids: bool, chat: bool) -> bytes:
    """An embedded engine stream as ``EngineService._sse`` writes it (``json.dumps``, default separators)."""
    from specgauge.engine.service import _Piece, _chunk, _event

    base = {"id": "chatcmpl-0123", "created": 1796226299, "model": "tiny-target"}
    obj = "chat.completion.chunk" if chat else "text_completion"
    events = []
    first = True
    if chat:
        head: dict[str, Any] = {**base, "object": obj, "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
        if token_ids:
            head["prompt_token_ids"] = [1, 17, 230]
            first = False
        head["usage"] = {"prompt_tokens": 3, "total_tokens": 3, "completion_tokens": 0}
        events.append(_event(head))
    for p in (_Piece("Hel", [11, 12]), _Piece("lo \"token_ids\": [1]", [13]), _Piece("", [2], finish_reason="stop")):
        chunk = _chunk(base, obj, chat, p, token_ids, [1, 17, 230] if first else None)
        first = first and not token_ids
        chunk["usage"] = {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}
        events.append(_event(chunk))
    events.append(_event({**base, "object": obj, "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4},
                          "metrics": {"speculative_decoding": {"num_spec_steps": 1}}}))
    events.append("data: [DONE]\n\n")
    return "".join(events).encode()


def _embedded_body(token_ids: bool, chat: bool) -> bytes:
    """A non-streamed embedded body as ``EngineService._whole`` lays it out, through starlette's
    ``JSONResponse`` (compact separators, ``ensure_ascii=False``)."""
    from starlette.responses import JSONResponse

    choice: dict[str, Any] = {"index": 0}
    if chat:
        choice["message"] = {"role": "assistant", "content": "Héllo, \"prompt_token_ids\": [9]", "tool_calls": []}
    else:
        choice["text"] = "Héllo"
    choice.update(logprobs=None, finish_reason="length", stop_reason=None)
    body: dict[str, Any] = {"id": "cmpl-1", "created": 1, "model": "m", "object": "chat.completion" if chat else "text_completion",
                            "choices": [choice], "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}}
    if token_ids:
        choice["token_ids"] = [5, 6]
        if chat:
            body["prompt_token_ids"] = [1, 2, 3]
        else:
            choice["prompt_token_ids"] = [1, 2, 3]
    body["metrics"] = {"speculative_decoding": {"num_spec_steps": 1}}
    return bytes(JSONResponse(body).body)


def _strip_stream(raw: bytes, absent: Absent, piece: int | None = None) -> bytes:
    s = StreamStripper(absent)
    if piece is None:
        return s.feed(raw) + s.close()
    return b"".join(s.feed(raw[i:i + piece]) for i in range(0, len(raw), piece)) + s.close()


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("piece", [None, 1, 7, 64])
def test_an_embedded_stream_without_the_ids_is_the_stream_not_asked(chat: bool, piece: int | None) -> None:
    asked, plain = _embedded_chunks(True, chat), _embedded_chunks(False, chat)
    assert b'"token_ids": [11, 12]' in asked and b"prompt_token_ids" in asked and asked != plain
    assert _strip_stream(asked, Absent.drop, piece) == plain


@pytest.mark.parametrize("chat", [True, False])
def test_an_embedded_body_without_the_ids_is_the_body_not_asked(chat: bool) -> None:
    asked, plain = _embedded_body(True, chat), _embedded_body(False, chat)
    assert b'"token_ids":[5,6]' in asked and asked != plain
    assert strip_json(asked, Absent.drop) == plain


def _recorded_vllm() -> list[str]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))["responses"][0]["chunks"]


def test_a_vllm_stream_gets_its_nulls_back() -> None:
    plain = "".join(_recorded_vllm()).encode()
    asked_chunks = []
    for i, c in enumerate(_recorded_vllm()):  # as vLLM writes them when asked: lists where it writes null
        c = c.replace('"token_ids":null', f'"token_ids":[{100 + i},{200 + i}]')
        if i == 0:
            c = c.replace('"prompt_token_ids":null', '"prompt_token_ids":[1,2,3]')
        asked_chunks.append(c)
    asked = "".join(asked_chunks).encode()
    assert asked != plain and b'"token_ids":[100,200]' in asked
    for piece in (None, 1, 13):
        assert _strip_stream(asked, Absent.null, piece) == plain


def test_a_vllm_chat_chunk_sent_only_for_the_ids_is_dropped_whole() -> None:
    head = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
            '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":%s}\n\n')
    text = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"é"},"logprobs":null,"finish_reason":null,"token_ids":%s}]}\n\n'
    empty = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":null,"token_ids":%s}]}\n\n'
    last = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":%s}]}\n\n'
    asked = (head % "[1,2]" + empty % "[195]" + text % "[169]" + last % "[2]" + "data: [DONE]\n\n").encode()
    plain = (head % "null" + text % "null" + last % "null" + "data: [DONE]\n\n").encode()
    for piece in (None, 1, 5):
        assert _strip_stream(asked, Absent.null, piece) == plain


def test_only_the_keys_go_and_anything_doubtful_is_left_as_it_came() -> None:
    # inside strings (escaped quotes) nothing is touched
    s = b'{"choices":[{"text":"a \\"token_ids\\": [1] b","x\\"token_ids":[1]}]}'
    assert strip_json(s, Absent.drop) == s and strip_json(s, Absent.null) == s
    # a token_ids key somewhere else than a choice or the top: the rewrite does not check out, so nothing changes
    nested = b'{"choices":[{"text":"a","token_ids":[1]}],"metrics":{"token_ids":[4]}}'
    assert strip_json(nested, Absent.drop) == nested
    # first key, only key, spaces, negative numbers, a list of lists (not ids: left)
    assert strip_json(b'{"choices": [{"token_ids": [1, -2], "index": 0}]}', Absent.drop) == b'{"choices": [{"index": 0}]}'
    assert strip_json(b'{"choices":[{"token_ids":[]}]}', Absent.drop) == b'{"choices":[{}]}'
    two_first = b'{"choices": [{"token_ids": [1], "prompt_token_ids": [2], "b": 1}], "prompt_token_ids": [3]}'
    assert strip_json(two_first, Absent.drop) == b'{"choices": [{"b": 1}]}'
    assert strip_json(two_first, Absent.null) == b'{"choices": [{"token_ids": null, "prompt_token_ids": null, "b": 1}], "prompt_token_ids": null}'
    assert strip_json(b'{"choices":[{"token_ids":[[1]]}]}', Absent.drop) == b'{"choices":[{"token_ids":[[1]]}]}'
    # not JSON, an error body: as it came
    assert strip_json(b'{"token_ids": [1]', Absent.drop) == b'{"token_ids": [1]'
    # stream lines that are not data, CRLF line ends, a last line without its newline
    raw = b': ping\r\ndata: {"choices":[{"text":"a","token_ids":[1]}]}\r\n\r\ndata: {"choices":[{"text":"b","token_ids":[2]}]}'
    assert _strip_stream(raw, Absent.drop, 3) == (b': ping\r\ndata: {"choices":[{"text":"a"}]}\r\n\r\n'
                                                   b'data: {"choices":[{"text":"b","token_ids":[2]}]}')


def test_the_field_is_added_at_the_end_and_only_when_the_client_did_not_set_it() -> None:
    assert with_field(b'{"a": 1}', {"a": 1}) == b'{"a": 1,"return_token_ids":true}'
    assert with_field(b'{"a":{"b":2}}\n  ', {"a": {"b": 2}}) == b'{"a":{"b":2},"return_token_ids":true}\n  '
    assert with_field(b"{ }", {}) == b'{ "return_token_ids":true}'
    assert json.loads(with_field(b'{"messages":[{"content":"}"}]}', {"messages": [{"content": "}"}]}) or b"") == {
        "messages": [{"content": "}"}], "return_token_ids": True}
    for obj in ({"return_token_ids": False}, {"return_token_ids": True}, {"echo": True, "prompt": "x"}):
        assert with_field(json.dumps(obj).encode(), obj) is None
    ask = TokenIdAsk(Absent.null)
    assert ask.body(b'{"a":1}', {"a": 1}) == b'{"a":1,"return_token_ids":true}' and ask.body(b"[1]", None) is None
    ask.refused = "HTTP 400: no"
    assert ask.body(b'{"a":1}', {"a": 1}) is None
    assert TokenIdAsk.for_dialect("vllm") == TokenIdAsk(Absent.null) and TokenIdAsk.for_dialect("sglang") is None
    assert TokenIdAsk.for_dialect("embedded") == TokenIdAsk(Absent.drop)


def test_a_refusal_names_the_field() -> None:
    assert refused(400, b'{"error":{"message":"return_token_ids: extra inputs are not permitted"}}')
    assert refused(422, b'{"detail":[{"loc":["body","return_token_ids"]}]}')
    assert not refused(400, b'{"error":{"message":"max_tokens too large"}}')
    assert not refused(500, b"return_token_ids")
