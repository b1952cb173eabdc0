"""Greedy output pairing across windows, and what a window keeps of a record."""

from __future__ import annotations

from specgauge.canary.observe import Role, Side, is_greedy, pairing_key
from specgauge.canary.window import Pairing, Sample, Window
from specgauge.records import Chunk, FailureKind, RequestRecord


def rec(text: str = "out", ok: bool = True, **canary: object) -> RequestRecord:
    return RequestRecord(id="r1", index=1, scheduled_s=0, sent_s=0, started_at=0, ok=ok, text=text,
                         failure=None if ok else FailureKind.http_status, ttft_s=0.05 if ok else None, e2e_s=0.5 if ok else None,
                         output_tokens=10 if ok else None, chunks=[Chunk(0.05, 1), Chunk(0.5, 9)] if ok else [],
                         extra={"canary": canary})


def test_mirrored_pairs_match_once_even_across_windows() -> None:
    p = Pairing()
    assert p.add(Side.baseline, "id:r1", "hello") is None
    r = p.add(Side.candidate, "id:r1", "hello")  # arrives later (another window): still paired
    assert r is not None and r.match and r.kind == "shadow"
    assert p.add(Side.candidate, "id:r1", "hello") is None  # one pair per mirrored request
    assert p.add(Side.candidate, "id:r2", "a") is None
    r = p.add(Side.baseline, "id:r2", "b")
    assert r is not None and not r.match


def test_equal_greedy_bodies_pair_on_both_sides() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0, "stream": True, "user": "u1"}
    b = {**a, "stream": False, "user": "u2", "stream_options": {"include_usage": True}}
    assert pairing_key(a) == pairing_key(b) and is_greedy(a)
    assert pairing_key(a) != pairing_key({**a, "max_tokens": 5})
    assert not is_greedy({"temperature": 0.7}) and not is_greedy({}) and not is_greedy({"temperature": False})
    p = Pairing()
    k = "body:" + pairing_key(a)
    assert p.add(Side.baseline, k, "same") is None
    assert p.add(Side.baseline, k, "same") is None  # the same side twice is no pair
    r1, r2 = p.add(Side.candidate, k, "same"), p.add(Side.candidate, k, "other")
    assert r1 is not None and r1.match and r2 is not None and not r2.match and r1.kind == "repeat"


def test_window_keeps_samples_not_records() -> None:
    w = Window(weight=5.0)
    w.add(Side.candidate, Role.live, rec(retried_on_baseline=True, bytes_sent=False, role="live"), counted=True)
    w.add(Side.baseline, Role.live, rec(ok=False), counted=False, client_error=True)
    w.add(Side.baseline, Role.live, rec(), counted=False, client_gone=True)
    assert w.retried_on_baseline == 1 and w.client_errors == 1 and w.client_gone == 1
    assert len(w.samples[Side.candidate]) == 1 and not w.samples[Side.baseline]
    s = w.samples[Side.candidate][0]
    assert isinstance(s, Sample) and s.ttft == 0.05 and s.e2e == 0.5 and abs(s.tpot - 0.05) < 1e-12
