"""The one SSE parser: framing variants, split reads, comments, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.loadgen.sse import MalformedSSE, SSEEvent, SSEParser


def parse_all(chunks: list[bytes]) -> tuple[list[SSEEvent], bool]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(p.feed(c))
    tail, left = p.close()
    return out + tail, left


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    body = eol.join([b"data: a", b"", b": keep-alive", b"", b"event: x", b"data: b1", b"data:b2", b"", b""])
    events, left = parse_all([body])
    assert [e.data for e in events] == ["a", "b1\nb2"]
    assert events[1].event == "x" and events[0].event == "message"
    assert not left


def test_comment_only_and_blank_lines_make_no_event() -> None:
    events, left = parse_all([b": ping\n\n\n\n: pong\n\n"])
    assert events == [] and not left


def test_unterminated_event_is_reported_on_close() -> None:
    events, left = parse_all([b"data: a\n\ndata: half"])
    assert [e.data for e in events] == ["a"]
    assert left


def test_not_sse_raises() -> None:
    with pytest.raises(MalformedSSE, match="not an SSE line"):
        SSEParser().feed(b"<html>oops</html>\n")
    with pytest.raises(MalformedSSE, match="not an SSE line"):
        SSEParser().feed(b"data: ok\n\n<html>\n")
    p = SSEParser()
    p.feed(b"<html>no newline yet")
    with pytest.raises(MalformedSSE, match="not an SSE line"):
        p.feed(b"\n")


def test_bad_utf8_raises() -> None:
    with pytest.raises(MalformedSSE, match="UTF-8"):
        SSEParser().feed(b"data: \xff\xfe\n\n")


def test_only_one_space_after_colon_is_stripped() -> None:
    events, _ = parse_all([b"data:  two\n\n"])
    assert events[0].data == " two"


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20), min_size=1, max_size=6),
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_any_split_gives_the_same_events(payloads: list[str], eol: str, cuts: list[int]) -> None:
    body = "".join(f"data: {p}{eol}{eol}" for p in payloads).encode()
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)])]
    events, left = parse_all(pieces)
    assert [e.data for e in events] == payloads
    assert not left


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20), min_size=1, max_size=6),
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    extra=st.sampled_from(["", "event: x{eol}", ": ping{eol}", "id: 7{eol}"]),
)
def test_feed_data_gives_the_payloads_feed_gives(payloads: list[str], eol: str, cuts: list[int], extra: str) -> None:
    """The bytes fast path (``feed_data``) and ``feed`` frame every stream alike, split anywhere."""
    body = "".join(f"{extra.format(eol=eol) if i % 2 else ''}data: {p}{eol}{eol}" for i, p in enumerate(payloads)).encode()
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *points], [*points, len(body)])]
    p = SSEParser()
    got: list[bytes] = []
    for piece in pieces:
        got.extend(p.feed_data(piece))
    tail, left = p.close_data()
    assert [g.decode() for g in got + tail] == payloads
    assert not left
    events, _ = parse_all(pieces)
    assert [e.data for e in events] == payloads


def test_feed_data_multi_line_data_and_unterminated_event() -> None:
    p = SSEParser()
    assert p.feed_data(b"data: a\ndata: b\n\ndata: {\"x\": 1}\n\ndata: half") == [b"a\nb", b'{"x": 1}']
    assert p.close_data() == ([], True)
    with pytest.raises(MalformedSSE, match="not an SSE line"):
        SSEParser().feed_data(b"data: ok\n\n<html>\n")
