"""suffix drafter: ArcticInference/vLLM suffix decoding semantics (exact equality with the real code is
checked in tests/integration/test_vllm_drafter_equivalence.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.drafters import make_drafter
from specgauge.drafters.base import Drafter, replay_by_stepping
from specgauge.drafters.suffix import SuffixDrafter, SuffixTree, f32


def test_registered_with_vllm_defaults() -> None:
    d = make_drafter("suffix")
    assert isinstance(d, SuffixDrafter) and isinstance(d, Drafter) and d.deterministic
    assert (d.k, d.max_tree_depth, d.max_cached_requests) == (24, 24, 10000)
    assert (d.max_spec_factor, d.min_token_prob) == (1.0, 0.1)


@pytest.mark.parametrize(
    ("opts", "name"),
    [
        ({"suffix_decoding_max_tree_depth": 0}, "suffix_decoding_max_tree_depth"),
        ({"suffix_decoding_min_token_prob": 1.5}, "suffix_decoding_min_token_prob"),
        ({"suffix_decoding_max_cached_requests": -1}, "suffix_decoding_max_cached_requests"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
    ],
)
def test_bad_options_name_the_option(opts: dict, name: str) -> None:
    with pytest.raises(ValueError, match=f"suffix drafter: {name}"):
        SuffixDrafter(**opts)


def test_unknown_request_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="request 'x' was not begun"):
        SuffixDrafter().propose("x", [1, 2], 3)


def test_draft_from_prompt_then_from_earlier_outputs() -> None:
    d = SuffixDrafter(num_speculative_tokens=4)
    d.begin("a", [1, 2, 3, 4, 5, 9, 1, 2])
    assert d.propose("a", [1, 2, 3, 4, 5, 9, 1, 2], 4) == [3, 4]  # "1 2" in the prompt; <= 1.0 x match length
    d.end("a", [70, 71, 72, 73, 74])
    d.begin("b", [8, 70, 71])  # "70 71" only occurs in a's output: the global tree
    assert d.propose("b", [8, 70, 71], 4) == [72, 73]  # draft <= match length (factor 1.0)


def test_spec_factor_limits_draft_to_factor_times_match() -> None:
    out = [30, 31, 32, 33, 34, 35, 36]
    for factor, want in ((1.0, [32, 33]), (2.0, [32, 33, 34, 35]), (0.5, [32])):
        d = SuffixDrafter(num_speculative_tokens=8, suffix_decoding_max_spec_factor=factor)
        d.begin("a", [0])
        d.end("a", out)
        d.begin("b", [5, 30, 31])  # match length 2
        assert d.propose("b", [5, 30, 31], 8) == want


def test_min_token_prob_stops_at_an_uncertain_branch() -> None:
    # after "1 2": 3 twice, 4 twice; then 5 always -> path prob 0.5 for "3"
    prompt = [1, 2, 3, 5, 1, 2, 4, 6, 1, 2, 3, 5, 1, 2, 4, 6, 0, 1, 2]
    lo = SuffixDrafter(num_speculative_tokens=4, suffix_decoding_min_token_prob=0.4, suffix_decoding_max_cached_requests=0)
    hi = SuffixDrafter(num_speculative_tokens=4, suffix_decoding_min_token_prob=0.6, suffix_decoding_max_cached_requests=0)
    for d in (lo, hi):
        d.begin("a", prompt)
    assert len(lo.propose("a", prompt, 4)) == 2
    assert hi.propose("a", prompt, 4) == []


def test_fifo_eviction_of_cached_responses() -> None:
    def run(max_cached: int) -> list[int]:
        d = SuffixDrafter(num_speculative_tokens=3, suffix_decoding_max_cached_requests=max_cached)
        for rid, out in (("a", [50, 51, 52, 53]), ("b", [60, 61, 62]), ("c", [70, 71])):
            d.begin(rid, [0])
            d.end(rid, out)
        d.begin("q", [9, 50, 51])
        return d.propose("q", [9, 50, 51], 3)

    assert run(10) == [52, 53]
    assert run(3) == []  # q's own slot evicts the oldest response, a's
    assert run(0) == []  # global cache disabled


def test_a_running_requests_output_is_visible_to_others() -> None:
    for max_cached, want in ((10, [72, 73]), (0, [])):
        d = SuffixDrafter(num_speculative_tokens=2, suffix_decoding_max_cached_requests=max_cached)
        d.begin("a", [1])
        d.propose("a", [1, 70, 71, 72, 73], 2)  # a is still running
        d.begin("b", [2, 70, 71])
        assert d.propose("b", [2, 70, 71], 2) == want


def test_max_model_len_caps_k() -> None:
    d = SuffixDrafter(num_speculative_tokens=8, max_model_len=10)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    d.begin("a", prompt)
    assert d.propose("a", prompt, 8) == [3]  # max_model_len - L - 1 = 1
    assert d.propose("a", prompt + [3, 4], 8) == []  # L = max_model_len: skipped


def test_replay_is_the_engine_loop_and_learns_across_requests() -> None:
    a, b = SuffixDrafter(num_speculative_tokens=4), SuffixDrafter(num_speculative_tokens=4)
    reqs = [([1, 2, 3], [5, 6, 7, 8, 5, 6, 7, 8]), ([4, 5, 6], [7, 8, 5, 6, 7, 9])]
    for i, (p, o) in enumerate(reqs):
        fast, ref = a.replay(str(i), p, o, 4), replay_by_stepping(b, str(i), p, o, 4)
        assert fast.drafted.tolist() == ref.drafted.tolist() and fast.accepted.tolist() == ref.accepted.tolist()
    second = a.replay("2", [4, 5, 6], [7, 8, 5, 6, 7, 9], 4)
    assert second.accepted.sum() > 0


def test_f32_rounding_like_cpp_float() -> None:
    assert f32(0.1) != 0.1 and f32(f32(0.1)) == f32(0.1)
    assert int(f32(f32(10 * f32(0.3)) + 0.0) + 1e-6) == 3


def _brute_counts(seqs: dict[int, list[int]], depth: int) -> Counter[tuple[int, ...]]:
    c: Counter[tuple[int, ...]] = Counter()
    for seq in seqs.values():
        for start in range(len(seq)):
            for end in range(start + 1, min(len(seq), start + depth) + 1):
                c[tuple(seq[start:end])] += 1
    return c


def _tree_counts(tree: SuffixTree) -> Counter[tuple[int, ...]]:
    c: Counter[tuple[int, ...]] = Counter()
    stack = [(tree.root, ())]
    while stack:
        node, path = stack.pop()
        if node is not tree.root:  # the root keeps no sibling order (never drafted from)
            counts = [ch.count for ch in node.order]
            assert counts == sorted(counts, reverse=True), "children not in decreasing count order"
            assert {id(x) for x in node.order} == {id(x) for x in node.children.values()}
        for tok, ch in node.children.items():
            assert ch.count > 0
            c[path + (tok,)] = ch.count
            stack.append((ch, path + (tok,)))
    return c


@settings(max_examples=500, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(0, 3), max_size=25), min_size=1, max_size=5),
    depth=st.integers(1, 6),
    drop=st.lists(st.integers(0, 4), max_size=3),
)
def test_tree_counts_equal_brute_force_after_appends_and_removals(seqs: list[list[int]], depth: int, drop: list[int]) -> None:
    tree = SuffixTree(depth)
    live = {}
    for i, s in enumerate(seqs):
        tree.extend(i, s)
        live[i] = s
    for i in drop:
        if i in live:
            tree.remove(i)
            del live[i]
    assert _tree_counts(tree) == _brute_counts(live, depth)
