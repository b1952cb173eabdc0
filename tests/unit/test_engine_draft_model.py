"""The draft-model drafter: batched greedy drafting with its rollback cache equals teacher forcing,
and a vocabulary mismatch is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from specgauge.drafters.base import make_drafter  # noqa: E402
from specgauge.drafters.draft_model import DraftModelDrafter, VocabMismatchError  # noqa: E402
from specgauge.testing.engine import make_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("d") / "draft", seed=4)


def greedy_continuation(d: DraftModelDrafter, hist: list[int], k: int) -> list[int]:
    seq = list(hist)
    for _ in range(k):
        seq.append(int(d.teacher_forced_argmax(seq[:1], seq[1:] + [0])[-1]))
    return seq[len(hist):]


def test_batched_proposals_with_rollback_match_teacher_forcing(draft_dir: Path) -> None:
    d = make_drafter("draft_model", model=draft_dir, max_batch=3, max_model_len=128, dtype="float64")
    assert isinstance(d, DraftModelDrafter)
    g = torch.Generator().manual_seed(0)
    hists = {f"r{i}": torch.randint(0, 320, (4 + 9 * i,), generator=g).tolist() for i in range(3)}
    for rid, h in hists.items():
        d.begin(rid, h)
    for step in range(4):
        ids = list(hists)
        ks = [1 + (step + i) % 4 for i in range(3)]
        got = d.propose_batch(ids, [hists[r] for r in ids], ks)
        for rid, k, prop in zip(ids, ks, got, strict=True):
            assert prop == greedy_continuation(d, hists[rid], k), (step, rid)
            # pretend the target accepted a prefix and then corrected: history diverges from the cache
            keep = step % (k + 1)
            hists[rid] = hists[rid] + prop[:keep] + [int(torch.randint(0, 320, (1,), generator=g))]
    for rid in hists:
        d.end(rid, [])
    assert sorted(d._free) == [0, 1, 2]


def test_teacher_forced_outputs(draft_dir: Path) -> None:
    d = DraftModelDrafter(draft_dir, dtype="float64")
    prompt, out = [5, 6, 7], [8, 9, 10, 11]
    am = d.teacher_forced_argmax(prompt, out)
    lp = d.teacher_forced_logprobs(prompt, out)
    assert am.shape == (4,) and lp.shape == (4, 320)
    np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0, rtol=1e-5)
    assert (lp.argmax(-1) == am).all()
    with pytest.raises(KeyError):
        d.propose("never-begun", prompt, 2)


def test_vocab_mismatch_is_a_clear_error(draft_dir: Path) -> None:
    with pytest.raises(VocabMismatchError, match="vocab_size 320 but the target has 1000"):
        DraftModelDrafter(draft_dir, target_vocab_size=1000)
