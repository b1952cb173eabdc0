"""Deterministic cases of ``rejection_sample``: which tokens are accepted, recovered or bonus."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from specgauge.engine.verify import rejection_sample  # noqa: E402

V = 6


def onehot(*ids: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(ids), V).float()


def run(drafts, k, p, greedy, q=None, u=None):  # type: ignore[no-untyped-def]
    B, K = drafts.shape
    u = torch.full((B, K), 0.5) if u is None else u
    return rejection_sample(drafts, k, p, q, greedy, u, torch.ones(B, K + 1, V))


def test_greedy_accepts_matching_prefix_then_corrects() -> None:
    drafts = torch.tensor([[1, 2, 3], [1, 2, 3], [4, 4, 4]])
    p = torch.stack([onehot(1, 2, 5, 0), onehot(1, 2, 3, 5), onehot(0, 1, 1, 1)])
    out, n = run(drafts, torch.tensor([3, 3, 3]), p, torch.tensor([True, True, True]))
    assert n.tolist() == [2, 3, 0]
    assert out.tolist() == [[1, 2, 5, -1], [1, 2, 3, 5], [0, -1, -1, -1]]


def test_short_rows_in_a_padded_batch_get_their_bonus_at_their_own_k() -> None:
    drafts = torch.tensor([[1, 9 % V, 9 % V], [2, 3, 4]])
    p = torch.stack([onehot(1, 4, 0, 0), onehot(2, 3, 4, 5)])
    out, n = run(drafts, torch.tensor([1, 3]), p, torch.tensor([True, True]))
    assert n.tolist() == [1, 3]
    assert out.tolist() == [[1, 4, -1, -1], [2, 3, 4, 5]]


def test_no_drafts_samples_one_token() -> None:
    p = onehot(3)[None]
    out, n = run(torch.zeros(1, 0, dtype=torch.long), torch.tensor([0]), p, torch.tensor([False]))
    assert n.tolist() == [0] and out.tolist() == [[3]]


def test_stochastic_accept_threshold_is_p_over_q() -> None:
    # one-hot q: accept iff u < p(d).  p(d)=0.3
    p = torch.tensor([[[0.3, 0.7, 0, 0, 0, 0], [0, 0, 1.0, 0, 0, 0]]])
    drafts = torch.tensor([[0]])
    _, n_lo = run(drafts, torch.tensor([1]), p, torch.tensor([False]), u=torch.tensor([[0.29]]))
    out_hi, n_hi = run(drafts, torch.tensor([1]), p, torch.tensor([False]), u=torch.tensor([[0.31]]))
    assert n_lo.tolist() == [1] and n_hi.tolist() == [0]
    assert out_hi[0, 0].item() == 1  # the residual max(0, p - q) has all its mass on token 1
    # non-one-hot q with q(d)=0.6: accept iff u < 0.3/0.6
    q = torch.tensor([[[0.6, 0.4, 0, 0, 0, 0]]])
    _, n_a = run(drafts, torch.tensor([1]), p, torch.tensor([False]), q=q, u=torch.tensor([[0.49]]))
    _, n_r = run(drafts, torch.tensor([1]), p, torch.tensor([False]), q=q, u=torch.tensor([[0.51]]))
    assert n_a.tolist() == [1] and n_r.tolist() == [0]


def test_draft_with_zero_target_probability_is_never_accepted() -> None:
    p = torch.tensor([[[0.0, 1.0, 0, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]]])
    _, n = run(torch.tensor([[0]]), torch.tensor([1]), p, torch.tensor([False]), u=torch.tensor([[0.0]]))
    assert n.tolist() == [0]
