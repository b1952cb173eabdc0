"""suffix drafter: ArcticInference/vLLM suffix decoding semantics (exact equality with the real code is
checked in tests/integration/test_vllm_drafter_equivalence.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgauge.drafters import make_drafter
from specgauge.drafters.base import Drafter, replay_by_stepping
from specgauge.drafters.suffix.native import IMPORT_ERROR, native_available
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


# -- fast paths and backends ------------------------------------------------------------------------


def _speculate_ascending(tree: SuffixTree, context: list[int], k: int, factor: float, min_prob: float) -> tuple[float, list[int]]:
    """C++ ``SuffixTree::speculate`` literally: match lengths 1, 2, ... walked from the root, stop at the
    first absent one, keep a draft when ``score >= best``."""
    best_score, best = 0.0, []
    for m in range(1, len(context)):
        node = tree.root
        for t in context[len(context) - m :]:
            node = node.children.get(t)
            if node is None:
                break
        if node is None:
            break
        max_tokens = max(min(k, int(f32(f32(m * f32(factor)) + 0.0) + 1e-6)), 0)
        prob, score, toks = 1.0, 0.0, []
        while len(toks) < max_tokens and prob >= f32(min_prob) and node.order:
            child = node.order[0]
            prob = f32(prob * f32(child.count / node.count))
            if prob < f32(min_prob):
                break
            toks.append(child.token)
            score = f32(score + prob)
            node = child
        if score >= best_score:
            best_score, best = score, toks
    return best_score, best


@settings(max_examples=300, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=4),
    context=st.lists(st.integers(0, 3), max_size=10),
    depth=st.integers(1, 8),
    k=st.integers(0, 8),
    factor=st.sampled_from([1.0, 0.5, 2.0, 0.3]),
    min_prob=st.sampled_from([0.0, 0.1, 0.35, 1.0]),
)
def test_longest_match_first_search_equals_the_cpp_ascending_loop(
    seqs: list[list[int]], context: list[int], depth: int, k: int, factor: float, min_prob: float
) -> None:
    tree = SuffixTree(depth)
    for i, s in enumerate(seqs):
        tree.extend(i, s)
    ctx = context[-depth:]
    want_score, want = _speculate_ascending(tree, ctx, k, factor, min_prob)
    got = tree.speculate(ctx, k, factor, 0.0, min_prob)
    assert (got.token_ids, got.score) == (want, want_score)


def _requests(alphabet: int) -> st.SearchStrategy[list[tuple[list[int], list[int]]]]:
    tok = st.integers(0, alphabet - 1)
    return st.lists(st.tuples(st.lists(tok, max_size=12), st.lists(tok, max_size=40)), min_size=1, max_size=6)


CONFIGS = st.fixed_dictionaries({
    "suffix_decoding_max_tree_depth": st.sampled_from([1, 3, 6, 24]),
    "suffix_decoding_max_cached_requests": st.sampled_from([0, 1, 2, 10000]),
    "suffix_decoding_max_spec_factor": st.sampled_from([1.0, 0.5, 2.0]),
    "suffix_decoding_min_token_prob": st.sampled_from([0.0, 0.1, 0.5]),
    "max_model_len": st.sampled_from([None, 12, 30]),
})


def _same(a: object, b: object) -> bool:
    return a.drafted.tolist() == b.drafted.tolist() and a.accepted.tolist() == b.accepted.tolist()  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(reqs=_requests(3), cfg=CONFIGS, k=st.integers(1, 6), reuse=st.booleans())
def test_python_fast_replay_equals_stepping(reqs: list, cfg: dict, k: int, reuse: bool) -> None:
    fast = SuffixDrafter(num_speculative_tokens=k, backend="python", **cfg)
    ref = SuffixDrafter(num_speculative_tokens=k, backend="python", **cfg)
    for d in (fast, ref):  # another request stays open meanwhile (its tokens are in both trees)
        d.begin("open", [0, 1, 2, 0, 1])
        d.propose("open", [0, 1, 2, 0, 1, 2, 0], k)
    for i, (p, o) in enumerate(reqs):
        rid = "r0" if reuse else f"r{i}"  # a reused id evicts its cached response
        assert _same(fast.replay(rid, p, o, k), replay_by_stepping(ref, rid, p, o, k))
    for d in (fast, ref):  # the trees were left in the same state
        d.begin("q", reqs[0][0])
    assert fast.propose("q", reqs[0][0] + reqs[0][1][:3], k) == ref.propose("q", reqs[0][0] + reqs[0][1][:3], k)


needs_native = pytest.mark.skipif(not native_available(), reason=IMPORT_ERROR or "native backend unavailable")


@needs_native
def test_auto_picks_native_when_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGAUGE_SUFFIX_BACKEND", raising=False)
    assert SuffixDrafter().backend == "native"
    monkeypatch.setenv("SPECGAUGE_SUFFIX_BACKEND", "python")
    assert SuffixDrafter().backend == "python"


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="backend must be one of auto, python, native"):
        SuffixDrafter(backend="cuda")


@needs_native
@settings(max_examples=150, deadline=None)
@given(reqs=_requests(4), cfg=CONFIGS, k=st.integers(1, 8), schedule=st.lists(st.integers(0, 7), max_size=120),
       concurrency=st.integers(1, 3))
def test_native_and_python_backends_propose_identically_on_interleaved_requests(
    reqs: list, cfg: dict, k: int, schedule: list[int], concurrency: int
) -> None:
    """Requests run interleaved (up to ``concurrency`` at once, ids reused), steps of 1..4 tokens,
    FIFO eviction, max_model_len: every proposal of the native backend equals the python one."""
    ds = [SuffixDrafter(num_speculative_tokens=k, backend=b, **cfg) for b in ("python", "native")]
    waiting = [(f"r{i % 4}", p, o) for i, (p, o) in enumerate(reqs)]
    running: list[list] = []  # [rid, prompt, out, pos]
    steps = iter(schedule)
    proposals = 0
    while waiting or running:
        while waiting and len(running) < concurrency and all(r[0] != waiting[0][0] for r in running):
            rid, p, o = waiting.pop(0)
            for d in ds:
                d.begin(rid, p)
            running.append([rid, p, o, 0])
        r = running[next(steps, 0) % len(running)]
        rid, p, o, pos = r
        left = len(o) - pos
        if left == 0:
            for d in ds:
                d.end(rid, o)
            running.remove(r)
            continue
        r[3] = pos = pos + 1 + next(steps, 0) % min(4, left)
        got = [d.propose(rid, p + o[:pos], k) for d in ds]
        assert got[0] == got[1], (rid, pos)
        proposals += 1


@needs_native
@settings(max_examples=150, deadline=None)
@given(reqs=_requests(3), cfg=CONFIGS, k=st.integers(1, 6))
def test_native_replay_equals_python_replay_and_stepping(reqs: list, cfg: dict, k: int) -> None:
    nat = SuffixDrafter(num_speculative_tokens=k, backend="native", **cfg)
    py = SuffixDrafter(num_speculative_tokens=k, backend="python", **cfg)
    ref = SuffixDrafter(num_speculative_tokens=k, backend="python", **cfg)
    for i, (p, o) in enumerate(reqs):
        a, b, c = nat.replay(f"r{i}", p, o, k), py.replay(f"r{i}", p, o, k), replay_by_stepping(ref, f"r{i}", p, o, k)
        assert _same(a, c) and _same(b, c)


@needs_native
def test_backends_agree_on_a_longer_log_with_drafts() -> None:
    rng = np.random.default_rng(3)
    phrases = [rng.integers(0, 50, int(rng.integers(3, 9))).tolist() for _ in range(20)]
    nat, py = (SuffixDrafter(num_speculative_tokens=5, backend=b, suffix_decoding_max_cached_requests=8) for b in ("native", "python"))
    accepted = 0
    for i in range(40):
        parts: list[int] = []
        while len(parts) < 150:
            parts += phrases[int(rng.integers(20))] if rng.random() < 0.8 else [int(rng.integers(50))]
        a, b = nat.replay(str(i), parts[:40], parts[40:], 5), py.replay(str(i), parts[:40], parts[40:], 5)
        assert _same(a, b), i
        accepted += int(a.accepted.sum())
    assert accepted > 1000  # the logs really drafted
