"""ngram drafter: vLLM v0.32 prompt-lookup semantics, and fast replay == step-by-step reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.drafters import make_drafter
from specgauge.drafters.base import Drafter, replay_by_stepping
from specgauge.drafters.ngram import NgramDrafter
from specgauge.drafters.reference import ngram_propose_kmp


def test_registered_and_implements_protocol() -> None:
    d = make_drafter("ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4)
    assert isinstance(d, NgramDrafter) and isinstance(d, Drafter)
    assert d.deterministic and d.kind == "ngram"


def test_vllm_defaults() -> None:
    d = NgramDrafter(num_speculative_tokens=2)
    assert (d.min_n, d.max_n) == (5, 5)
    assert (NgramDrafter(prompt_lookup_max=3).min_n, NgramDrafter(prompt_lookup_min=2).max_n) == (3, 2)


def test_longest_match_wins_over_later_shorter() -> None:
    # suffix [7, 8, 9]: "8 9" occurs at 5 (followed by 30), "7 8 9" only at 0 (followed by 10)
    h = [7, 8, 9, 10, 11, 8, 9, 30, 7, 8, 9]
    assert NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=3).propose("r", h, 2) == [10, 11]
    assert NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2).propose("r", h, 2) == [10, 11]


def test_earliest_occurrence_wins_among_equal_lengths() -> None:
    h = [1, 2, 50, 1, 2, 60, 1, 2]
    assert NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2).propose("r", h, 1) == [50]


def test_draft_cut_at_end_of_context_and_overlap_allowed() -> None:
    # [1,1,1]: suffix [1,1] occurs at 0 (overlapping the suffix), only one token follows
    assert NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2).propose("r", [1, 1, 1], 5) == [1]


def test_no_match_no_draft_and_short_context() -> None:
    d = NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=3)
    assert d.propose("r", [1, 2, 3, 4], 4) == []
    assert d.propose("r", [1], 4) == []
    assert d.propose("r", [], 4) == []


def test_max_model_len_clips_and_scheduler_trims() -> None:
    h = [1, 2, 3, 4, 5, 1, 2]
    d = NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2, max_model_len=10)
    assert d.propose_vllm(h, 5) == [3, 4, 5]  # k clipped to max_model_len - L = 3
    assert d.propose("r", h, 5) == [3, 4]  # the scheduler keeps max_model_len - L - 1
    d9 = NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2, max_model_len=8)
    assert d9.propose_vllm(h, 5) == [3] and d9.propose("r", h, 5) == []
    assert NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=2, max_model_len=7).propose_vllm(h, 5) == []


@pytest.mark.parametrize(
    "opts",
    [{"num_speculative_tokens": 0}, {"prompt_lookup_min": 3, "prompt_lookup_max": 2}, {"prompt_lookup_min": 0}],
)
def test_bad_options_name_the_option(opts: dict) -> None:
    with pytest.raises(ValueError, match="ngram drafter: .*(num_speculative_tokens|prompt_lookup_min)"):
        NgramDrafter(**opts)


def test_bad_k_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        NgramDrafter().replay("r", [1, 2], [3], 0)


def test_replay_counts_full_draft_at_the_end_of_the_output() -> None:
    # the output ends inside a match: the engine still drafts k and counts them all as drafted.
    # The prefill emits 6; then the last token 6 matches at index 1 and drafts 7, 8, 9, 5.
    d = NgramDrafter(prompt_lookup_min=1, prompt_lookup_max=1)
    prompt, out = [5, 6, 7, 8, 9, 5], [6, 7, 8]
    t = d.replay("r", prompt, out, 4)
    assert t.drafted.tolist() == [4] and t.accepted.tolist() == [2]


tokens = st.lists(st.integers(0, 3), max_size=40)


@settings(max_examples=600, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 3), max_size=12),
    out=tokens,
    k=st.integers(1, 10),
    lo=st.integers(1, 4),
    span=st.integers(0, 3),
    mml=st.one_of(st.none(), st.integers(1, 60)),
)
def test_fast_replay_equals_step_by_step_reference(
    prompt: list[int], out: list[int], k: int, lo: int, span: int, mml: int | None
) -> None:
    d = NgramDrafter(num_speculative_tokens=k, prompt_lookup_min=lo, prompt_lookup_max=lo + span, max_model_len=mml)
    fast = d.replay("r", prompt, out, k)
    ref = replay_by_stepping(d, "r", prompt, out, k)
    assert fast.drafted.tolist() == ref.drafted.tolist()
    assert fast.accepted.tolist() == ref.accepted.tolist()
    # the prefill emits token 0; each decode step emits accepted + 1 at most
    assert (len(out) > 0) + int(fast.accepted.sum()) + len(fast.accepted) >= len(out)
    assert (fast.accepted <= fast.drafted).all()


@settings(max_examples=600, deadline=None)
@given(
    h=st.lists(st.integers(0, 2), max_size=50),
    k=st.integers(1, 8),
    lo=st.integers(1, 4),
    span=st.integers(0, 4),
    mml=st.one_of(st.none(), st.integers(1, 60)),
)
def test_propose_equals_kmp_transcription_of_vllm(h: list[int], k: int, lo: int, span: int, mml: int | None) -> None:
    d = NgramDrafter(prompt_lookup_min=lo, prompt_lookup_max=lo + span, max_model_len=mml)
    assert d.propose_vllm(h, k) == ngram_propose_kmp(h, lo, lo + span, mml, k)


def test_replay_on_long_repetitive_sequence_matches_reference() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 50, 40).tolist()
    seq = (base * 6)[:230]
    seq[100] = 7  # a break in the repetition
    prompt, out = seq[:30], seq[30:]
    d = NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=4)
    for k in (1, 3, 8):
        fast, ref = d.replay("r", prompt, out, k), replay_by_stepping(d, "r", prompt, out, k)
        assert fast.drafted.tolist() == ref.drafted.tolist() and fast.accepted.tolist() == ref.accepted.tolist()
        assert fast.accepted.sum() >= 0.8 * len(out) * k / (k + 1)  # the repetition is found


@pytest.mark.parametrize(
    ("vocab", "lo", "hi"),
    [(7, 2, 4), (2**40, 2, 5), (5000, 3, 8)],  # packed token ids; packed ranks (huge ids); the pair-rank chain
)
def test_fast_replay_window_id_paths_equal_the_reference(vocab: int, lo: int, hi: int) -> None:
    """Every way of building exact window ids (int64-packed token ids, packed ranks of huge ids, and
    the chain of pair ranks when 5000 distinct tokens ** 8 overflows int64) gives the reference trace."""
    from specgauge.drafters.ngram import _I64

    rng = np.random.default_rng(vocab)
    base = rng.integers(0, vocab, 400)
    seq = np.concatenate([base, base[50:120], rng.integers(0, vocab, 60), base[200:260]])
    distinct = len(np.unique(seq))
    packs = min(vocab, int(seq.max()) + 1) ** hi < _I64 or distinct**hi < _I64
    assert packs == (vocab != 5000)  # the third case really takes the fallback
    prompt, out = seq[:300].tolist(), seq[300:].tolist()
    d = NgramDrafter(prompt_lookup_min=lo, prompt_lookup_max=hi)
    for k in (1, 4):
        fast, ref = d.replay("r", prompt, out, k), replay_by_stepping(d, "r", prompt, out, k)
        assert fast.drafted.tolist() == ref.drafted.tolist() and fast.accepted.tolist() == ref.accepted.tolist()
        assert fast.accepted.sum() > 0
