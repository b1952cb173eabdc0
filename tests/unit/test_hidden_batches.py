"""The offline replay hands a hidden-state head the block of requests it is about to replay
(``offline.replay.prefetched`` -> ``MethodReplay.prefetch`` -> ``HiddenFeed.prefetch``), so their target
passes run together: on the shipped EAGLE-3 head and its tiny target (transformers, real forwards),
blocks keep the requests' order and the token budget, every pass of a block runs before its first
request is replayed and none while it is, a block replaces the one before, an unreadable record still
fails where an unblocked loop meets it (after the requests before it), and a request the replay refuses
fails naming itself, as without batching. (That batched figures equal unbatched ones and the reference
loop: tests/unit/test_hidden_replay_families.py, tests/unit/test_drafter_methods.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from specgauge import models  # noqa: E402
from specgauge.drafters._hidden import REPLAY_BATCH_TOKENS, default_batch_tokens, pass_block  # noqa: E402
from specgauge.offline.replay import MethodReplay, MethodSpec, ReplayError, prefetched  # noqa: E402
from tests._target_batches import forward_rows  # noqa: E402

pytestmark = pytest.mark.skipif(not (models.available() and models.heads_available()), reason="shipped heads missing")

Req = tuple[list[int], list[int]]


def _runner(budget: int) -> MethodReplay:
    spec = MethodSpec.parse(f"eagle3:{models.eagle3_dir()}")
    return MethodReplay(spec, [3], replay_batch_tokens=budget)


def _requests(lengths: list[tuple[int, int]], seed: int = 3) -> list[Req]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(4, 4096, (p,), generator=g).tolist(), torch.randint(4, 4096, (o,), generator=g).tolist())
            for p, o in lengths]


def _spy_blocks(runner: MethodReplay, events: list[object]) -> None:
    """Record each block handed to the drafter (then hand it on to the real ``prefetch``)."""
    real = runner.model.prefetch

    def spy(reqs: list[Req]) -> None:
        events.append(("block", [len(p) + len(o) for p, o in reqs]))
        real(reqs)

    runner.model.prefetch = spy


def test_blocks_keep_order_and_budget_and_run_before_their_requests() -> None:
    runner = _runner(40)
    assert runner.block_tokens == 40
    reqs = _requests([(5, 10), (8, 12), (6, 6), (30, 20), (4, 4), (3, 3)])  # tokens 15 20 12 50 8 6
    items: list[Req | None] = [reqs[0], None, *reqs[1:]]  # None: a record with nothing to replay (0 tokens)
    events: list[object] = []
    _spy_blocks(runner, events)
    order = []
    with forward_rows() as rows:
        for x in prefetched(items, lambda x: x, [runner]):
            events.append("replay")
            order.append(x)
            if x is not None:
                n = len(rows)
                runner.traces("r", "log", *x)
                assert len(rows) == n  # its pass ran with its block: no forward while it is replayed
    assert order == items
    # 15+0+20 <= 40, +12 > 40 | 12 | 50 alone (over the budget) | 8+6
    assert events == [("block", [15, 20]), "replay", "replay", "replay", ("block", [12]), "replay",
                      ("block", [50]), "replay", ("block", [8, 6]), "replay", "replay"]
    assert rows == [2, 1, 1, 2]  # one forward per block (each fits the padded budget: 2 x 20 <= 40, 2 x 8)


def test_a_block_replaces_the_one_before() -> None:
    runner = _runner(8192)
    a, b = _requests([(5, 5), (6, 6)]), _requests([(7, 7)], seed=4)
    d = runner.model
    ids, extra = d._pass_layers()
    block = pass_block(d.target, ids + extra, ())
    runner.prefetch(a)
    assert len(block.passes) == 2
    runner.prefetch(b)
    assert [len(s) for s in block.passes] == [13]  # prompt + output less the last token


def test_off_means_one_request_per_forward() -> None:
    runner = _runner(0)
    assert runner.block_tokens == 0
    reqs = _requests([(5, 5), (6, 6)])
    with forward_rows() as rows:
        for x in prefetched(reqs, lambda x: x, [runner]):
            runner.traces("r", "log", *x)
    assert rows == [1, 1]


def test_an_unreadable_record_fails_after_the_requests_before_it() -> None:
    runner = _runner(8192)
    reqs = _requests([(5, 5), (6, 6), (7, 7)])

    def stream() -> Iterator[Req]:
        yield reqs[0]
        yield reqs[1]
        raise ValueError("line 3: not JSON")

    seen = []
    with pytest.raises(ValueError, match="line 3"):
        for x in prefetched(stream(), lambda x: x, [runner]):
            seen.append(x)
    assert seen == reqs[:2]


def test_a_request_the_replay_refuses_fails_naming_itself_as_without_batching() -> None:
    runner = _runner(8192)
    good, bad = _requests([(5, 5), (6, 6)])
    bad = (bad[0], [*bad[1][:3], 10**6])  # an id outside the target's vocabulary
    done = []
    with pytest.raises(ReplayError, match=r"request r1: .*token id 1000000 outside the target's vocabulary"):
        for i, x in enumerate(prefetched([good, bad], lambda x: x, [runner])):
            runner.traces(f"r{i}", "log", *x)
            done.append(i)
    assert done == [0]


def test_the_default_batches_on_a_gpu_only() -> None:
    """On the CPU batching measured no faster (docs/hidden-states.md): one request per pass there; on
    a GPU (a torch.device, no card needed) a block of REPLAY_BATCH_TOKENS."""
    assert default_batch_tokens(torch.device("cpu")) == 0
    assert default_batch_tokens(torch.device("cuda", 0)) == REPLAY_BATCH_TOKENS > 0
    spec = MethodSpec.parse(f"eagle3:{models.eagle3_dir()}")
    assert MethodReplay(spec, [3]).block_tokens == 0  # the shipped target opens on the CPU
