"""Stalls (``stats.stalls``): the longest gap of each response against the reference TPOT, the text that
ended it (recorded by the stream reader), per run, baseline against candidate in compare (NO-GO when
the candidate stalls more), and the canary's guardrail."""

from __future__ import annotations

import orjson
import pytest

from specgauge.canary.config import JudgeConfig
from specgauge.canary.judge import Outcome, WindowInput, judge_window
from specgauge.canary.observe import Role
from specgauge.canary.window import Sample
from specgauge.i18n import translate
from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.stream import StreamState, apply_payloads, stream_record
from specgauge.records import Chunk, GapEnd, RequestRecord
from specgauge.stats.stalls import StallCriteria, compare_stalls, longest_gap, summarize_stalls
from specgauge.stats.verdict import RunInfo, Verdict, decide


def _stream(texts: list[str], times: list[float]) -> RequestRecord:
    d, st = Dialect(), StreamState()
    for i, (text, t) in enumerate(zip(texts, times)):
        ev = {"choices": [{"index": 0, "delta": {"content": text}}], "usage": {"completion_tokens": i + 1}}
        apply_payloads([orjson.dumps(ev)], t, st, 200, d.cumulative_tokens)
    apply_payloads([orjson.dumps({"choices": [], "usage": {"completion_tokens": len(texts)}}), b"[DONE]"], times[-1], st, 200,
                   d.cumulative_tokens)
    return stream_record(st, d, failure=None, error=None, http_status=200, e2e_s=times[-1], elapsed_s=times[-1], id="s",
                         segment="tools", index=0, scheduled_s=0.0, sent_s=0.0, ready_s=0.0, started_at=0.0)


def test_the_stream_reader_keeps_the_text_that_ended_the_longest_gaps() -> None:
    texts = ['<tool_call>{"name"', ': "f", ', '"arguments": {"a": 1', "}}", "</tool_call>"]
    rec = _stream(texts, [0.10, 0.11, 0.12, 0.92, 0.93])
    assert rec.gap_ends is not None and rec.gap_ends[0] == GapEnd(3, "}}")  # the 0.8 s silence ended at the braces
    assert len(rec.gap_ends) == 4 and longest_gap(rec) == pytest.approx(0.8)
    again = RequestRecord.model_validate_json(rec.model_dump_json())
    assert again.gap_ends == rec.gap_ends


def rec(i: int, gaps: list[float], segment: str = "s", text: str = "}") -> RequestRecord:
    """A response of len(gaps) + 1 chunks of one token each; the gap ending at chunk j is gaps[j-1]."""
    t, chunks = 0.05, [Chunk(0.05, 1)]
    for g in gaps:
        t += g
        chunks.append(Chunk(round(t, 6), 1))
    j = max(range(len(gaps)), key=lambda k: gaps[k]) + 1
    return RequestRecord(id=f"r{i}", segment=segment, index=i, scheduled_s=0, sent_s=0, started_at=0, ok=True, ttft_s=0.05,
                         e2e_s=t, output_tokens=len(chunks), chunks=chunks, gap_ends=[GapEnd(j, text)])


STEADY = [0.02] * 30


def test_summary_counts_stalls_against_the_runs_own_tpot() -> None:
    runs = [rec(i, STEADY) for i in range(18)] + [rec(18, STEADY[:10] + [1.5] + STEADY[:10]), rec(19, STEADY[:5] + [0.3] + STEADY[:5])]
    s = summarize_stalls(runs)
    assert s is not None and s.requests == 20 and s.tpot_ref_ms == pytest.approx(20.0, abs=0.5)
    assert s.threshold_ms == pytest.approx(250.0)  # 10 × 20 ms is below the 250 ms floor
    assert s.stalled == 2 and [x.id for x in s.stalls] == ["r18", "r19"]
    top = s.stalls[0]
    assert top.ended_by == "}" and top.gap_ms == pytest.approx(1500.0) and top.times_tpot == pytest.approx(75.0, rel=0.05)
    assert summarize_stalls(runs, StallCriteria(factor=20, min_gap_ms=0)).stalled == 1  # 400 ms: r19's 300 ms is not
    assert summarize_stalls(runs, StallCriteria(factor=20, min_gap_ms=0)).threshold_ms == pytest.approx(400.0, rel=0.02)


def test_compare_no_go_when_the_candidate_stalls_more_quiet_on_a_a() -> None:
    base = [rec(i, STEADY) for i in range(30)]
    stalled = [rec(i, STEADY[:10] + [1.0] + STEADY[:10]) if i % 3 == 0 else rec(i, STEADY) for i in range(30)]
    info = RunInfo(label="b", path="b", kind="results")
    res = decide(base, stalled, info, info.model_copy(update={"label": "c"}))
    st = res.overall.stalls if res.overall else None
    assert st is not None and (st.rate.baseline_k, st.rate.candidate_k, st.rate.candidate_n) == (0, 10, 30)
    assert res.verdict.overall.verdict is Verdict.NO_GO
    why = next(r for r in res.verdict.overall.reasons if "stall" in r)
    assert "10 of 30 with a gap above 250 ms" in why and "→ '}'" in why and "멈춤" in translate(why, "ko")
    aa = decide(base, [rec(i, STEADY) for i in range(30)], info, info.model_copy(update={"label": "c"}))
    assert aa.overall is not None and aa.overall.stalls is not None and aa.overall.stalls.rate.candidate_k == 0
    assert not any("stall" in r for r in aa.verdict.overall.reasons)
    assert compare_stalls([], [], 0.25, None) is None


def _samples(n: int, stalled: int) -> list[Sample]:
    return [Sample(role=Role.live, ok=True, failure=None, ttft=0.05, tpot=0.02 * (1 + 0.01 * (i % 5)), e2e=2.0 + 0.01 * (i % 5),
                   longest_gap=1.2 if i < stalled else 0.03, gap_text="}" if i < stalled else "a") for i in range(n)]


@pytest.mark.parametrize("stalled, outcome", [(0, Outcome.PASS), (10, Outcome.FAIL)])
def test_canary_guardrail_on_stalls(stalled: int, outcome: Outcome) -> None:
    j = judge_window(WindowInput(baseline=_samples(40, 0), candidate=_samples(40, stalled)), JudgeConfig(min_samples=20))
    c = next(c for c in j.checks if c.name == "guardrail:stalls")
    assert c.status == ("fail" if stalled else "pass") and j.outcome is outcome
    assert c.evidence["threshold_ms"] == pytest.approx(250.0)
    if stalled:
        assert c.evidence["candidate_stalled"] == 10 and "1200 ms → '}'" in c.reason and "멈춤" in translate(c.reason, "ko")


def test_a_gap_the_client_itself_caused_is_no_stall() -> None:
    """A CPU-starved load generator reads every stream late at once: bench records when its own event
    loop was held up, and that time is taken out of the gaps (vs the server's own silences)."""
    from specgauge.records import SessionRecord
    from specgauge.stats.stalls import Held

    r = rec(0, STEADY[:10] + [0.6] + STEADY[:10])  # started_at 0: the 0.6 s gap spans 0.25 .. 0.85 s
    start = r.chunks[10].t
    held = Held.of_sessions([SessionRecord(client_loop={"held": [[start + 0.05, 0.5]]})])
    assert held.overlap(start, start + 0.6) == pytest.approx(0.5)
    assert longest_gap(r) == pytest.approx(0.6) and longest_gap(r, held) == pytest.approx(0.1, abs=0.03)
    runs = [rec(i, STEADY) for i in range(10)] + [r]
    assert summarize_stalls(runs).stalled == 1 and summarize_stalls(runs, held=held).stalled == 0
    c = compare_stalls(runs, runs, 0.25, 0.02, (Held(), held))
    assert c is not None and (c.rate.baseline_k, c.rate.candidate_k) == (1, 0)
