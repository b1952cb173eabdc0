"""Acceptance against the replay per position and prompt-length band, the collapse named where it is
(``stats.collapse``); the TTFT delta split by the servers' histograms (``stats.ttft``) and the step
law's drafter prefill beside it (``predict.ttft``)."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.i18n import translate
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.ttft import predicted_prefill_delta_s
from specgauge.records import Chunk, RequestRecord, SpecCounts
from specgauge.stats.collapse import CollapseCriteria, Row, profile
from specgauge.stats.diagnosis import diagnose
from specgauge.stats.ttft import server_mean, split_ttft


def row(prompt: int, steps: int, acc: int, live_acc: int | None = None, k: int = 3) -> Row:
    """``steps`` drafts of k tokens; the replay accepts ``acc`` per draft, the server ``live_acc``."""
    live = acc if live_acc is None else live_acc
    per_pos = [steps if i < live else 0 for i in range(k)]
    return Row(prompt_tokens=prompt, server=SpecCounts(drafts=steps, draft_tokens=k * steps, accepted_tokens=live * steps,
                                                       accepted_per_pos=per_pos, source="t"),
               drafted=np.full(steps, k), accepted=np.full(steps, acc))


def test_a_server_equal_to_its_replay_shows_no_collapse() -> None:
    p = profile([row(100, 40, 2), row(600, 40, 1), row(3000, 40, 2)], k=3)
    assert p.collapse is None and p.server_rate == p.replay_rate == pytest.approx(5 / 9)
    assert [b.label for b in p.bands] == ["0–256", "512–1K", "2K–4K"]
    assert [(r.server, r.replay) for r in p.positions] == [(1.0, 1.0), (pytest.approx(2 / 3), pytest.approx(2 / 3)), (0.0, 0.0)]


def test_collapse_past_a_prompt_length_is_named_with_its_band() -> None:
    p = profile([row(100, 40, 2), row(700, 40, 2), row(5000, 40, 2, live_acc=0), row(9000, 40, 2, live_acc=0)], k=3)
    assert p.collapse is not None and p.collapse.where == "band" and p.collapse.band == "4K–8K"
    assert p.collapse.server_rate == 0.0 and p.collapse.replay_rate == pytest.approx(2 / 3)
    assert "prompts of 4K–8K tokens" in p.collapse.summary and "not the workload" in p.collapse.summary
    assert "4K–8K" in translate(p.collapse.summary, "ko") and "붕괴" not in p.collapse.summary
    # a diagnosis names the server as the problem
    check = {"available": True, "requests": 4, "profile": p.model_dump()}
    d = diagnose(None, {"specgauge": {"replay_check": check}})
    assert d.failed == ["drafter"] and d.collapse == p.collapse.summary


def test_collapse_everywhere_is_overall_and_a_late_position_is_named() -> None:
    p = profile([row(100, 40, 2, live_acc=0), row(700, 40, 2, live_acc=0)], k=3)
    assert p.collapse is not None and p.collapse.where == "overall"
    chain = profile([row(100, 60, 3, live_acc=1)], k=3)  # position 0 fine, the chain breaks after it
    assert chain.collapse is not None and chain.collapse.where == "position" and chain.collapse.position == 1
    assert profile([row(100, 5, 2, live_acc=0)], k=3).collapse is None  # 15 draft tokens: too few to judge
    lower = [row(100, 60, 2), row(120, 60, 2, live_acc=1)]  # position 1: live half the replay's
    assert profile(lower, CollapseCriteria(ratio=0.4), k=3).collapse is None
    assert profile(lower, CollapseCriteria(ratio=0.6), k=3).collapse.position == 1  # type: ignore[union-attr]


def rec(i: int, ttft: float) -> RequestRecord:
    return RequestRecord(id=f"r{i}", index=i, scheduled_s=0, sent_s=0, started_at=0, ok=True, ttft_s=ttft, e2e_s=ttft + 1,
                         output_tokens=10, chunks=[Chunk(ttft, 1), Chunk(ttft + 1, 9)], prompt_tokens=1000)


def test_ttft_split_adds_up_and_names_the_prefill() -> None:
    base = [rec(i, 0.050 + 0.001 * (i % 3)) for i in range(20)]
    cand = [rec(i, 0.080 + 0.001 * (i % 3) + 0.0005 * (i % 2) - 0.00025) for i in range(20)]
    diff = {'vllm:request_queue_time_seconds_sum{engine="0"}': 0.2, 'vllm:request_queue_time_seconds_count{engine="0"}': 20,
            "vllm:request_prefill_time_seconds_sum": 0.8, "vllm:request_prefill_time_seconds_count": 20}
    slow = {**diff, "vllm:request_queue_time_seconds_sum": 0.3, "vllm:request_prefill_time_seconds_sum": 1.3}
    slow.pop('vllm:request_queue_time_seconds_sum{engine="0"}')
    slow["vllm:request_queue_time_seconds_count"] = slow.pop('vllm:request_queue_time_seconds_count{engine="0"}')
    assert server_mean([diff], "request_queue_time_seconds") == pytest.approx(0.01)
    s = split_ttft(base, cand, [diff], [slow])
    assert s.pairs == 20 and s.measured_delta_ms == pytest.approx(30.0)
    assert s.queue_delta_ms == pytest.approx(5.0) and s.prefill_delta_ms == pytest.approx(25.0)
    assert s.rest_delta_ms == pytest.approx(0.0, abs=1e-9) and s.finding == "prefill"
    none = split_ttft(base, cand, [{}], [slow])
    assert none.queue_delta_ms is None and none.reason is not None and "not split" in none.reason
    same = split_ttft(base, base, [diff], [diff])
    assert same.measured_delta_ms == 0.0 and same.finding is None


def test_the_step_law_predicts_a_draft_models_prefill_and_nothing_for_ngram() -> None:
    prof = StepCostProfile(params={"a": 0.004, "p": 2e-5, "q": 0.001, "draft_prefill[draft_model]": 7e-6, "host[ngram]": 0.001})
    dm = {"method": "draft_model", "model": "/nonexistent/draft", "num_speculative_tokens": 4}
    assert predicted_prefill_delta_s(prof, dm, [1000, 3000]) == pytest.approx(7e-6 * 2000)
    assert predicted_prefill_delta_s(prof, {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}, [1000]) == 0.0
    assert predicted_prefill_delta_s(prof, None, [1000]) == 0.0
