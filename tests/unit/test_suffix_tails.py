"""The suffix replay's tail: tokens a live server learned past each logged output.

vLLM's suffix cache learns every token of a request's final step, also the draft tokens it accepted
past ``max_tokens`` / after the EOS and the bonus token after them (found against real vLLM,
``tests/integration/test_suffix_vs_vllm.py``). Here, without a server:
- given the server's final-step accepted count (and the bonus when known), the replay learns exactly
  the tokens a replay of the longer output would have learned, and reports the server's count;
- ``global_draft_certain`` is sound: whenever it calls a step certain, the draft is the same for
  every value of the unknown tokens (checked by brute force over a small vocabulary), and it is not
  vacuous (it calls most steps certain).
"""

from __future__ import annotations

import itertools
import random

import pytest

from specgauge.drafters.base import ServerReport, replay_by_stepping
from specgauge.drafters.suffix.trie import SuffixTree, best_draft, f32, spec_limits
from specgauge.drafters.suffix.unknown import UnknownTails, global_draft_certain
from specgauge.drafters.suffix import SuffixDrafter

K = 4


def _cut_request() -> tuple[list[int], list[int]]:
    """A prompt that repeats a phrase, and an output cut in the middle of copying it: the final
    step's draft runs past the cut (the server may have accepted beyond it)."""
    phrase = [11, 12, 13, 14, 15, 16, 17, 18]
    return phrase * 3, phrase[:3]


def test_tail_from_server_count_is_learned_as_a_longer_output() -> None:
    prompt, out = _cut_request()
    probe_p, probe_o = [30, 31, 11, 12, 13], [14, 15, 16, 17, 18, 19]
    a = SuffixDrafter(num_speculative_tokens=K, backend="python")
    t = a.replay("r0", prompt, out, K, server=ServerReport(final_accepted=3, bonus=40))
    assert t.drafted.tolist() == [K] and t.final_draft == [12, 13, 14, 15]  # copied from the prompt
    assert t.open_end and not t.checked  # (no unknown-tail tracking asked for)
    assert int(t.accepted[-1]) == 3 and t.tail_unknown == 0  # the server's count, not the log's 2
    assert t.tail_learned == [14, 40]
    # the same global state as a replay that saw the longer output
    b = SuffixDrafter(num_speculative_tokens=K, backend="python")
    b.replay("r0", prompt, out + t.tail_learned, K)
    ta, tb = a.replay("r1", probe_p, probe_o, K), b.replay("r1", probe_p, probe_o, K)
    assert ta.drafted.tolist() == tb.drafted.tolist() and ta.accepted.tolist() == tb.accepted.tolist()
    # the stepping reference with the tail learned in end() agrees too
    c = SuffixDrafter(num_speculative_tokens=K, backend="python")

    class _Tail:
        kind, deterministic = "suffix", True

        def begin(self, rid, p):
            c.begin(rid, p)

        def propose(self, rid, h, k):
            return c.propose(rid, h, k)

        def end(self, rid, o):
            c.end(rid, list(o) + t.tail_learned)

    replay_by_stepping(_Tail(), "r0", prompt, out, K)  # type: ignore[arg-type]
    tc = c.replay("r1", probe_p, probe_o, K)
    assert tc.drafted.tolist() == ta.drafted.tolist() and tc.accepted.tolist() == ta.accepted.tolist()


def test_without_server_count_the_tail_is_a_labelled_bound() -> None:
    prompt, out = _cut_request()
    d = SuffixDrafter(num_speculative_tokens=K, backend="python")
    t = d.replay("r0", prompt, out, K)
    assert t.open_end and t.tail_learned == []
    assert t.tail_unknown == t.tail_bound == len(t.final_draft) - int(t.accepted[-1]) + 1 >= 2
    # an output whose last token was the step's correction has no tail
    t2 = d.replay("r1", [1, 2, 3], [7, 8], K)
    assert not t2.open_end and t2.tail_bound == 0


def test_inconsistent_server_count_is_not_learned() -> None:
    prompt, out = _cut_request()
    d = SuffixDrafter(num_speculative_tokens=K, backend="python")
    t = d.replay("r0", prompt, out, K, server=ServerReport(final_accepted=K + 3))
    assert t.open_end and t.tail_learned == [] and t.tail_unknown == t.tail_bound


def test_native_backend_learns_the_same_tail() -> None:
    pytest.importorskip("arctic_inference.suffix_decoding")
    prompt, out = _cut_request()
    ts = []
    for backend in ("python", "native"):
        d = SuffixDrafter(num_speculative_tokens=K, backend=backend)
        d.replay("r0", prompt, out, K, server=ServerReport(final_accepted=3, bonus=40))
        t = d.replay("r1", [30, 31, 11, 12, 13], [14, 15, 16, 17, 18, 19], K)
        ts.append((t.drafted.tolist(), t.accepted.tolist()))
    assert ts[0] == ts[1]


def test_tracking_needs_the_python_trees() -> None:
    with pytest.raises(ValueError, match="python"):
        SuffixDrafter(num_speculative_tokens=K, backend="native", track_unknown_tails=True)


def test_unknown_bonus_is_tracked_and_forgotten_on_eviction() -> None:
    prompt, out = _cut_request()
    d = SuffixDrafter(num_speculative_tokens=K, suffix_decoding_max_cached_requests=1, track_unknown_tails=True)
    t = d.replay("r0", prompt, out, K, server=ServerReport(final_accepted=3))
    assert t.tail_unknown == 1 and d.unknown_tails is not None and d.unknown_tails.total == 1
    d.replay("r1", [5, 6], [7, 8, 9], K)  # evicts r0 (one cached request)
    assert d.unknown_tails.total == 0 and not d.unknown_tails.u


@pytest.mark.parametrize("seed", range(6))
def test_certain_steps_are_the_same_for_every_unknown_token(seed: int) -> None:
    rng = random.Random(seed)
    vocab, depth, n_unknown = 4, 6, 1 + seed % 2
    limits = spec_limits(depth, 1.0, 0.0)
    min_prob = f32(0.1)
    seqs = [[rng.randrange(vocab) for _ in range(rng.randint(3, 14))] for _ in range(6)]
    ours = SuffixTree(depth)
    for i, s in enumerate(seqs):
        ours.extend(i, s)
    open_seqs = rng.sample(range(len(seqs)), n_unknown)
    tails = UnknownTails()
    for i in open_seqs:
        tails.add(ours, i)
    truths = []
    for bs in itertools.product(range(vocab), repeat=n_unknown):
        tree = SuffixTree(depth)
        for i, s in enumerate(seqs):
            tree.extend(i, s + ([bs[open_seqs.index(i)]] if i in open_seqs else []))
        truths.append(tree)
    certain = 0
    trials = 300
    for _ in range(trials):
        context = [rng.randrange(vocab) for _ in range(rng.randint(2, depth))]
        beat = rng.choice([0.0, 0.0, 0.3, 0.5, 1.0, 1.5])
        k = rng.randint(1, 5)
        mine = best_draft(ours.root, context, (), k, limits, min_prob, beat)[1]
        if global_draft_certain(ours.root, context, k, limits, min_prob, beat, tails):
            certain += 1
            for tree in truths:
                assert best_draft(tree.root, context, (), k, limits, min_prob, beat)[1] == mine, (context, beat, k)
    assert certain > trials // 3, f"only {certain} of {trials} steps certain: the check is vacuous"


def test_no_unknown_tokens_means_every_step_is_certain() -> None:
    tree = SuffixTree(6)
    tree.extend(0, [1, 2, 3, 1, 2, 3])
    assert global_draft_certain(tree.root, [1, 2], 3, spec_limits(6, 1.0, 0.0), f32(0.1), 0.0, UnknownTails())


def test_simulate_rows_and_summary_label_the_tail() -> None:
    from specgauge.simulate.replay import AcceptanceSummary, RequestAcceptance

    prompt, out = _cut_request()
    d = SuffixDrafter(num_speculative_tokens=K, backend="python")
    rows = []
    for rid, p, o in (("r0", prompt, out), ("r1", [30, 31, 11, 12, 13], [14, 15, 16, 17, 18, 19]), ("r2", [1, 2], [3, 4])):
        rows.append(RequestAcceptance.from_trace(d.replay(rid, p, o, K), rid, "s", "suffix", K, len(o)))
    assert rows[0].tail_unknown == 3 and rows[0].cache_unknown == 0  # the draft ran 2 tokens past the cut, + 1
    assert rows[1].cache_unknown == 3 and rows[2].cache_unknown == 3 + rows[1].tail_unknown
    s = AcceptanceSummary.of("suffix", K, rows)
    assert s.open_tail_requests == 1 + (rows[1].tail_unknown > 0) and s.requests_after_unknown == 2
    assert "no log holds" in s.notes[-1]
    # evicted requests take their unknown tokens with them
    d1 = SuffixDrafter(num_speculative_tokens=K, suffix_decoding_max_cached_requests=1, backend="python")
    d1.replay("r0", prompt, out, K)
    assert d1.replay("r1", [5, 6], [7, 8, 9], K).cache_unknown == 0
