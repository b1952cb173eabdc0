"""Statistical losslessness of speculative sampling on a tiny vocabulary (as vLLM's rejection-sampler
test does): sequences produced by draft + ``rejection_sample`` follow the target's distribution.

The "models" are Markov chains over V tokens, so exact sequence probabilities are known. Each trial
generates L tokens through repeated speculative steps (k drafts sampled from the draft chain q, one
verification), vectorised over many trials; a chi-square test compares the observed L-token sequences
with the target chain's exact probabilities. A deliberately wrong sampler (resampling from p instead of
the residual max(0, p - q) after a rejection) must fail the same test, which shows the test has power.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from specgauge.engine.sampling import logits_to_probs  # noqa: E402
from specgauge.engine.verify import rejection_sample  # noqa: E402

V, L, N = 4, 3, 40_000


def chi2_pvalue(observed: torch.Tensor, expected_p: torch.Tensor) -> float:
    exp = expected_p * observed.sum()
    stat = ((observed - exp) ** 2 / exp).sum()
    df = observed.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat.double() / 2))


def chains(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits_p = 1.5 * torch.randn(V + 1, V, generator=g, dtype=torch.float64)  # row V = start state
    logits_q = logits_p + 1.5 * torch.randn(V + 1, V, generator=g, dtype=torch.float64)  # a different q
    return logits_p.softmax(-1), logits_q.softmax(-1)


def generate(
    P: torch.Tensor, Q: torch.Tensor | None, k: int, seed: int, sampler: Callable[..., tuple] = rejection_sample
) -> torch.Tensor:  # [N, L]
    """Speculative generation of L tokens per trial. Q=None: a deterministic drafter (always the argmax
    of P's second-best, a poor but fixed guess) with one-hot q."""
    g = torch.Generator().manual_seed(seed)
    seqs = torch.full((N, L + k + 1), -1, dtype=torch.long)
    length = torch.zeros(N, dtype=torch.long)
    last = torch.full((N,), V, dtype=torch.long)  # start state
    while bool((length < L).any()):
        drafts = torch.empty(N, k, dtype=torch.long)
        prev = last
        for i in range(k):
            if Q is None:
                drafts[:, i] = P[prev].argsort(-1, descending=True)[:, 1]
            else:
                drafts[:, i] = torch.multinomial(Q[prev].float(), 1, generator=g)[:, 0]
            prev = drafts[:, i]
        ctx = torch.cat([last[:, None], drafts], 1)  # state before each of the k+1 positions
        p = P[ctx].float()  # [N, k+1, V]
        q = None if Q is None else Q[ctx[:, :k]].float()
        u = torch.rand(N, k, generator=g)
        noise = torch.empty(N, k + 1, V).exponential_(generator=g)
        out, n = sampler(drafts, torch.full((N,), k), p, q, torch.zeros(N, dtype=torch.bool), u, noise)
        for j in range(k + 1):
            take = (j <= n) & (length < L)
            seqs[take, length[take]] = out[take, j]
            last = torch.where(take, out[:, j], last)
            length = length + take.long()
    return seqs[:, :L]


def exact_probs(P: torch.Tensor) -> torch.Tensor:
    probs = []
    for seq in itertools.product(range(V), repeat=L):
        pr, prev = 1.0, V
        for t in seq:
            pr, prev = pr * float(P[prev, t]), t
        probs.append(pr)
    return torch.tensor(probs, dtype=torch.float64)


def histogram(seqs: torch.Tensor) -> torch.Tensor:
    idx = (seqs * torch.tensor([V ** (L - 1 - i) for i in range(L)])).sum(-1)
    return torch.bincount(idx, minlength=V**L).double()


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("probabilistic_draft", [True, False])
def test_speculative_sequences_follow_the_target(k: int, probabilistic_draft: bool) -> None:
    P, Q = chains(seed=10 + k)
    seqs = generate(P, Q if probabilistic_draft else None, k=k, seed=k)
    assert chi2_pvalue(histogram(seqs), exact_probs(P)) > 1e-3


def wrong_sampler(drafts, num_draft, p, q, greedy, u, noise):  # type: ignore[no-untyped-def]
    """Accepts like the real one but resamples from p (not the residual) after a rejection."""
    K = drafts.shape[1]
    out, n = rejection_sample(drafts, num_draft, p, q, greedy, u, noise)
    fresh = (p / noise).argmax(-1).gather(1, n[:, None])[:, 0]
    rejected = n < K
    rows = torch.arange(len(n))
    out[rows[rejected], n[rejected]] = fresh[rejected]
    return out, n


def test_the_chi_square_test_catches_a_wrong_sampler() -> None:
    P, Q = chains(seed=11)
    seqs = generate(P, Q, k=1, seed=1, sampler=wrong_sampler)
    assert chi2_pvalue(histogram(seqs), exact_probs(P)) < 1e-6


def test_top_k_top_p_probs_then_speculation_match_the_truncated_target() -> None:
    """Losslessness holds for the processed distribution: temperature, top-k and top-p are applied
    to the target's logits (and the draft's), and output follows the processed target."""
    P_raw, Q_raw = chains(seed=7)
    def proc(M: torch.Tensor) -> torch.Tensor:
        n = M.shape[0]
        return logits_to_probs(M.log().float(), torch.full((n,), 1.3), torch.full((n,), 3), torch.full((n,), 0.95)).double()
    P, Q = proc(P_raw), proc(Q_raw)
    kept = (P > 0).sum(-1)
    assert bool((kept <= 3).all()) and bool((kept < 3).any())  # top-k and top-p both bit
    seqs = generate(P, Q, k=2, seed=5)
    expected = exact_probs(P)
    obs = histogram(seqs)
    assert float(obs[expected == 0].sum()) == 0.0  # never a token the truncated target excludes
    keep = expected > 0
    assert chi2_pvalue(obs[keep], expected[keep] / expected[keep].sum()) > 1e-3
