"""Fast drafter replay vs the step-by-step reference (``base.replay_by_stepping``) on a synthetic log.

Prints decode positions per second for both and their ratio, after checking the traces are identical.

* ngram (stateless): the reference runs on every ``--ref-every``-th request (it is slow).
* suffix (stateful: the global tree learns every earlier output, so a replay must see all requests
  in order): each fast backend (``python``; ``native`` = arctic-inference's C++ cache, when
  installed) replays the whole ``--suffix-tokens`` log; the reference (``replay_by_stepping`` over
  the pure-Python drafter) replays its first ``--suffix-ref-tokens`` output tokens, and every
  backend's traces on that prefix must equal the reference's. ``--suffix-baseline FILE`` also times
  an older single-file ``suffix.py`` whose imports still resolve on the prefix, with its ``replay``,
  for a before/after in the same run; since the drafter is a package (``drafters/suffix/``), time a
  before/after by running this script from each checkout (``PYTHONPATH=OLD/src`` and ``NEW/src``).

    python benchmarks/replay_drafters.py --tokens 1000000 --k 4 --suffix-tokens 1000000
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specgauge.drafters.suffix.native import native_available
from specgauge.drafters.base import ReplayTrace, replay_by_stepping
from specgauge.drafters.ngram import NgramDrafter
from specgauge.drafters.suffix import SuffixDrafter

Log = list[tuple[list[int], list[int]]]


def synthetic_log(total_tokens: int, seed: int = 0) -> Log:
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


def run_log(replay: Callable[[str, list[int], list[int]], ReplayTrace], reqs: Log) -> tuple[float, int, list[ReplayTrace]]:
    """Replay every request in order; (seconds, output positions, traces)."""
    traces = []
    n = 0
    t0 = time.perf_counter()
    for i, (p, o) in enumerate(reqs):
        traces.append(replay(str(i), p, o))
        n += len(o)
    return time.perf_counter() - t0, n, traces


def same(a: list[ReplayTrace], b: list[ReplayTrace]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x.drafted, y.drafted) and np.array_equal(x.accepted, y.accepted) for x, y in zip(a, b, strict=True)
    )


def load_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("suffix_baseline", path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules["suffix_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


def bench_suffix(reqs: Log, k: int, ref_tokens: int, baseline: str | None) -> None:
    prefix: Log = []
    n = 0
    for p, o in reqs:
        if n >= ref_tokens:
            break
        prefix.append((p, o))
        n += len(o)
    ref_d = SuffixDrafter(num_speculative_tokens=k, backend="python")
    t_ref, n_ref, ref = run_log(lambda r, p, o: replay_by_stepping(ref_d, r, p, o, k), prefix)
    r_ref = n_ref / t_ref
    acc = sum(int(t.accepted.sum()) for t in ref) / max(sum(int(t.drafted.sum()) for t in ref), 1)
    print(f"suffix  k={k} reference (replay_by_stepping, python) {r_ref:10,.0f} pos/s "
          f"({n_ref:,} positions, {t_ref:.1f} s, acceptance {acc:.3f})")
    if baseline:
        old = load_module(baseline).SuffixDrafter(num_speculative_tokens=k)
        t_old, n_old, old_traces = run_log(lambda r, p, o: old.replay(r, p, o, k), prefix)
        print(f"suffix  baseline {baseline}: {n_old / t_old:10,.0f} pos/s ({n_old:,} positions, {t_old:.1f} s)   "
              f"identical to the reference: {same(old_traces, ref)}")
    backends = ["python"] + (["native"] if native_available() else [])
    if not native_available():
        print("suffix  native backend: not installed (pip install '.[suffix]' as scripts/test.sh does); skipped")
    for backend in backends:
        d = SuffixDrafter(num_speculative_tokens=k, backend=backend)
        t, n_fast, traces = run_log(lambda r, p, o: d.replay(r, p, o, k), reqs)
        ok = same(traces[: len(prefix)], ref)
        assert ok, f"suffix {backend}: traces differ from the reference"
        rate = n_fast / t
        print(f"suffix  fast {backend:6s} {rate:12,.0f} pos/s ({n_fast:,} positions, {t:.1f} s)   "
              f"ratio vs reference {rate / r_ref:7.1f}x   identical on the first {len(prefix)} requests: {ok}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=1_000_000, help="output tokens in the synthetic log (ngram; 0: skip)")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--ref-every", type=int, default=10, help="ngram: run the reference on every n-th request")
    ap.add_argument("--suffix-tokens", type=int, default=0, help="suffix: output tokens in its log (0: skip)")
    ap.add_argument("--suffix-ref-tokens", type=int, default=30_000, help="suffix: reference on this log prefix")
    ap.add_argument("--suffix-baseline", default=None, help="suffix: an older suffix.py to time on the prefix")
    args = ap.parse_args()
    if args.tokens:
        reqs = synthetic_log(args.tokens)
        bench("ngram", lambda: NgramDrafter(prompt_lookup_min=2, prompt_lookup_max=5), reqs, args.k, args.ref_every)
    if args.suffix_tokens:
        bench_suffix(synthetic_log(args.suffix_tokens, seed=1), args.k, args.suffix_ref_tokens, args.suffix_baseline)


if __name__ == "__main__":
    main()
