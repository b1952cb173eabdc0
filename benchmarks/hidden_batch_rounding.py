"""How far batched target passes are from one request per pass, beside how far the live loop already is.

On a tiny random model of every family (``testing/tiny_families.py``, float32, CPU, 1 thread), seven
sequences of unequal length run through ``Target.passes`` three ways:

* **one per pass** — ``Target.run`` per sequence (what the replay does with ``--replay-batch-tokens 0``);
* **batched** — all in right-padded forwards within ``--budget`` padded tokens (the replay's batching);
* **prefixes** — every third prefix of a sequence run on its own, compared with the full pass's rows:
  what a live server's step-by-step passes (and ``testing/reference_loop.py``) see of the same positions.

It prints, per family, the largest |hidden state| (for scale), the largest |difference| of the hidden states (the layers a head reads and the
final norm), how many sequences differ at all, and how many of the target's greedy tokens (argmax of
lm_head over the final-norm rows) change. Batching changes rounding, not math: its differences are of
the size the prefix passes already show, which the replay's exact label covers (docs/hidden-states.md).

    python benchmarks/hidden_batch_rounding.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.testing.tiny_families import _BUILDERS, VOCAB, make_tiny_family  # noqa: E402

LENGTHS = (21, 24, 27, 23, 25, 70, 8)


def greedy(t: TransformersTarget, final: torch.Tensor) -> torch.Tensor:
    return (final @ t.lm_head_weight().T).argmax(-1)


def family(name: str, budget: int) -> str:
    g = torch.Generator().manual_seed(5)
    with tempfile.TemporaryDirectory() as d:
        t = TransformersTarget.open(make_tiny_family(name, Path(d) / name), "cpu", "float32")
        ids = (1, t.num_layers, "final")
        seqs = [torch.randint(4, VOCAB, (n,), generator=g).tolist() for n in LENGTHS]
        one = [t.run(s, ids).hidden for s in seqs]
        bat = [p.hidden for p in t.passes(seqs, ids, token_budget=budget)]
        b_max = max(float((a - b).abs().max()) for a, b in zip(one, bat, strict=True))
        b_seqs = sum(not torch.equal(a, b) for a, b in zip(one, bat, strict=True))
        b_flips = sum(int((greedy(t, a[:, -1]) != greedy(t, b[:, -1])).sum()) for a, b in zip(one, bat, strict=True))
        p_max, p_flips = 0.0, 0
        for s, full in zip(seqs, one, strict=True):
            for m in range(5, len(s), 3):
                pre = t.run(s[:m], ids).hidden
                p_max = max(p_max, float((pre - full[:m]).abs().max()))
                p_flips += int((greedy(t, pre[:, -1]) != greedy(t, full[:m, -1])).sum())
    scale = max(float(h.abs().max()) for h in one)
    return f"{name:<12} {scale:>7.1f} {b_max:>10.2e} {b_seqs:>4}/{len(seqs)} {b_flips:>6}    {p_max:>10.2e} {p_flips:>6}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=int, default=8192, help="padded tokens per batched forward")
    p.add_argument("--families", default=",".join(_BUILDERS), help="comma-separated")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"float32, CPU, 1 thread; {len(LENGTHS)} sequences of {', '.join(map(str, LENGTHS))} tokens; budget {a.budget}")
    print(f"{'':<12} {'':>7} {'batched':>10} {'':>6} {'':>6}    {'prefixes':>10}")
    print(f"{'family':<12} {'max|h|':>7} {'max|diff|':>10} {'seqs':>6} {'argmax':>6}    {'max|diff|':>10} {'argmax':>6}")
    for name in a.families.split(","):
        print(family(name, a.budget), flush=True)


if __name__ == "__main__":
    main()
