"""Fast drafter replay vs the step-by-step reference (``base.replay_by_stepping``) on a synthetic log.

Prints decode positions per second for both and their ratio, after checking the traces are identical.
The reference is run on every ``--ref-every``-th request (it is slow); the ratio compares rates.

    python benchmarks/replay_drafters.py --tokens 1000000 --k 4
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from specgauge.drafters.base import replay_by_stepping
from specgauge.drafters.ngram import NgramDrafter
from specgauge.drafters.suffix import SuffixDrafter


def synthetic_log(total_tokens: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Requests built from a shared phrase book (so n-grams recur) plus noise tokens."""
    rng = np.random.default_rng(seed)
    vocab = 32000
    phrases = [rng.integers(0, vocab, int(rng.integers(3, 20))).tolist() for _ in range(2000)]
    reqs, n = [], 0
    while n < total_tokens:
        parts: list[int] = []
        want = int(rng.integers(200, 1200))
        while len(parts) < want:
            parts += phrases[int(rng.integers(len(phrases)))] if rng.random() < 0.7 else rng.integers(0, vocab, 3).tolist()
        cut = int(rng.integers(50, len(parts) // 2))
        reqs.append((parts[:cut], parts[cut:]))
        n += len(parts) - cut
    return reqs


def bench(name: str, make, reqs, k: int, ref_every: int) -> None:  # type: ignore[no-untyped-def]
    fast_d, ref_d = make(), make()
    t_fast = t_ref = 0.0
    n_fast = n_ref = 0
    for i, (p, o) in enumerate(reqs):
        t0 = time.perf_counter()
        fast = fast_d.replay(str(i), p, o, k)
        t_fast += time.perf_counter() - t0
        n_fast += len(o)
        if i % ref_every == 0:
            t0 = time.perf_counter()
            ref = replay_by_stepping(ref_d, str(i), p, o, k)
            t_ref += time.perf_counter() - t0
            n_ref += len(o)
            assert np.array_equal(fast.drafted, ref.drafted) and np.array_equal(fast.accepted, ref.accepted), i
    r_fast, r_ref = n_fast / t_fast, n_ref / t_ref
    print(f"{name:7s} fast {r_fast:12,.0f} pos/s ({n_fast:,} positions, {t_fast:.1f} s)   "
          f"reference {r_ref:10,.0f} pos/s ({n_ref:,} positions, {t_ref:.1f} s)   ratio {r_fast / r_ref:6.1f}x   identical")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1_000_000, help="output tokens in the synthetic log")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--ref-every", type=int, default=10, help="run the reference on every n-th request")
    ap.add_argument("--suffix-tokens", type=int, default=0, help="also time suffix replay on this many tokens")
    args = ap.parse_args()
    reqs = synthetic_log(args.tokens)
    bench("ngram", lambda: NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=5), reqs, args.k, args.ref_every)
    if args.suffix_tokens:
        # suffix replay is the reference loop itself (incremental trees); report its rate only
        sreqs = synthetic_log(args.suffix_tokens, seed=1)
        d = SuffixDrafter(num_speculative_tokens=args.k)
        t0, n = time.perf_counter(), 0
        for i, (p, o) in enumerate(sreqs):
            d.replay(str(i), p, o, args.k)
            n += len(o)
        print(f"suffix  replay {n / (time.perf_counter() - t0):12,.0f} pos/s ({n:,} positions)")


if __name__ == "__main__":
    main()
