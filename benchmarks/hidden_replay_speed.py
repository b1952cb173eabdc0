"""The hidden-state replay's speed beside its floor, in one run on one device and dtype.

The replay cannot be faster than one target forward over the same tokens. This prints tokens/s of

* **bare forward** — transformers' own forward over prompt + output (``model(ids, logits_to_keep=1,
  use_cache=False)``: the decoder and one row of logits; the floor);
* **target pass** — the replay's teacher-forced pass (``TransformersTarget.run``: the decoder with hooks
  on the head's layers, no lm_head);
* **head chains** — ``chain.draft_ids`` over the same positions (every chain of k drafts at once, the
  lm_head only where a chain is still alive, as the replay runs it);
* **whole replay** — ``Eagle3Drafter.replay_arrays`` per request (the two above, argmaxes, runs), one
  target pass per request (``replay_batch_tokens=0``);
* **batched replay** — the same replay as ``simulate`` runs it: the requests' target passes run together
  first (``prefetch``: shortest first, right-padded, ``--batch-tokens`` padded tokens per forward), then
  ``replay_arrays`` per request reads them back;

and the ratios, each the median over the repeats of the two sides timed in the same round (repeats
interleaved round-robin): whole replay / bare forward (goal: >= 0.8x on the CPU with a ~100M-parameter
model) and batched replay / whole replay. With a GPU (``--device cuda``; ROCm is cuda too), ``--shape llama3-8b`` runs a Llama-3-8B-shaped
random-weight target in bfloat16 and prints the fraction of the card's bf16 dense peak; without one it
prints "no GPU was available". Weights are random: speed does not depend on them.

    python benchmarks/hidden_replay_speed.py                                  # CPU, ~100M params, float32
    python benchmarks/hidden_replay_speed.py --device cuda --shape llama3-8b  # a GPU
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from specgauge.drafters._hidden import REPLAY_BATCH_TOKENS  # noqa: E402
from specgauge.drafters.base import make_drafter  # noqa: E402
from specgauge.drafters.heads import chain  # noqa: E402
from specgauge.drafters.heads.make import eagle3_config, new_head, save_head  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    # ~110M parameters (Llama-shaped: 12 layers x 768, vocab 32000)
    "small100m": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "num_key_value_heads": 4, "vocab_size": 32000},
    # Llama-3-8B: 32 layers x 4096, GQA 32/8, vocab 128256
    "llama3-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0},
}
#: dense bf16 peak (TFLOP/s) by device-name fragment (vendor data sheets: SXM / OAM parts)
BF16_PEAK = {"H100": 989.0, "H200": 989.0, "B200": 2250.0, "A100": 312.0, "MI300X": 1307.0, "MI325X": 1307.0,
             "MI355X": 2500.0, "L40S": 362.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--shape", default=None, choices=sorted(SHAPES), help="default: small100m on the CPU, llama3-8b on a GPU")
    p.add_argument("--dtype", default=None, help="default: float32 on the CPU, bfloat16 on a GPU")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens per request")
    p.add_argument("--output", type=int, default=256, help="output tokens per request")
    p.add_argument("--spread", type=float, default=0.0,
                   help="lengths drawn uniformly within +-SPREAD x --prompt / --output (0: all alike)")
    p.add_argument("--batch-tokens", type=int, default=REPLAY_BATCH_TOKENS, help="batched replay: padded tokens per forward")
    p.add_argument("--k", type=int, default=5, help="chain length replayed (kmax)")
    p.add_argument("--draft-vocab", type=int, default=32000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    return p.parse_args(argv)


def timed(fns: dict[str, Callable[[], Any]], repeats: int, device: torch.device) -> dict[str, list[float]]:
    """Wall seconds of each of ``fns`` per repeat after one warm-up call each, the repeats interleaved
    (round-robin), so a machine whose load drifts slows every side alike."""
    for fn in fns.values():
        fn()
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            out[name].append(time.perf_counter() - t0)
    return out


def paired(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median over the repeats of time[den] / time[num] in the same round: how many times faster ``num`` is."""
    return statistics.median(d / n for n, d in zip(times[num], times[den], strict=True))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("no GPU was available")
        return {}
    dev = torch.device(a.device)
    shape = a.shape or ("small100m" if dev.type == "cpu" else "llama3-8b")
    dtype = getattr(torch, a.dtype or ("float32" if dev.type == "cpu" else "bfloat16"))
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=8192, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    target = TransformersTarget(model, shape)
    n_params = sum(p.numel() for p in model.parameters())
    body = n_params - 2 * cfg.vocab_size * cfg.hidden_size  # the decoder's matmul weights
    N = cfg.num_hidden_layers
    aux = (2, N // 2, N - 3)
    g = torch.Generator().manual_seed(1)

    def length(n: int) -> int:
        lo, hi = max(1, round(n * (1 - a.spread))), max(1, round(n * (1 + a.spread)))
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    reqs = [(torch.randint(0, cfg.vocab_size, (length(a.prompt),), generator=g).tolist(),
             torch.randint(0, cfg.vocab_size, (length(a.output),), generator=g).tolist()) for _ in range(a.requests)]
    tokens = sum(len(p) + len(o) for p, o in reqs)
    with tempfile.TemporaryDirectory() as tmp:
        head = new_head(eagle3_config(target, draft_vocab_size=min(a.draft_vocab, cfg.vocab_size), aux_layer_ids=aux),
                        target, seed=2, draft_to_target=torch.arange(min(a.draft_vocab, cfg.vocab_size)))
        hdir = save_head(head, Path(tmp) / "head", N, dtype=dtype)
        del head
        drafter = make_drafter("eagle3", model=str(hdir), target_model=target, dtype=dtype, replay_batch_tokens=0)
        batching = make_drafter("eagle3", model=str(hdir), target_model=target, dtype=dtype,
                                replay_batch_tokens=a.batch_tokens)
        ids = [torch.tensor(p + o, device=dev) for p, o in reqs]

        def bare() -> None:
            with torch.inference_mode():
                for x in ids:
                    model(x[None], logits_to_keep=1, use_cache=False)

        def target_pass() -> None:
            for p, o in reqs:
                drafter.target_hidden(p + o)

        hidden = [drafter.target_hidden(p + o) for p, o in reqs]

        def chains() -> None:
            with torch.inference_mode():
                for (p, o), h in zip(reqs, hidden, strict=True):
                    chain.draft_ids(drafter.head, torch.tensor((p + o)[1:], device=dev), h, a.k, start=len(p) - 1)

        def whole() -> None:
            for p, o in reqs:
                drafter.replay_arrays(p, o, a.k)

        def batched() -> None:
            batching.prefetch([])  # a block replaces the one before: nothing from the last round is kept
            batching.prefetch(reqs)  # simulate hands a block of its budget; here all requests are one block
            for p, o in reqs:
                batching.replay_arrays(p, o, a.k)

        times = timed({"bare forward": bare, "target pass": target_pass, "head chains": chains, "whole replay": whole,
                       "batched replay": batched}, a.repeats, dev)
        t = {name: statistics.median(v) for name, v in times.items()}
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{shape}: {n_params / 1e6:.0f}M parameters, {dtype}, {where}; {a.requests} requests x "
          f"{a.prompt}+{a.output} tokens (+-{a.spread:.0%}; {tokens} in all), EAGLE-3 head (aux {aux}, draft vocab {min(a.draft_vocab, cfg.vocab_size)}), k={a.k}")
    for name, s in t.items():
        print(f"  {name:<14} {tokens / s:>12,.0f} tokens/s  ({s:.3f} s)")
    ratio = paired(times, "whole replay", "bare forward")
    gain = paired(times, "batched replay", "whole replay")
    print(f"  whole replay / bare forward: {ratio:.2f}x  (goal >= 0.80x)")
    print(f"  batched replay / bare forward: {paired(times, 'batched replay', 'bare forward'):.2f}x")
    print(f"  batched replay / whole replay: {gain:.2f}x  (--batch-tokens {a.batch_tokens})")
    res: dict[str, Any] = {"shape": shape, "device": where, "tokens_per_s": {k: tokens / s for k, s in t.items()},
                           "ratio": ratio, "batched_gain": gain}
    if dev.type == "cuda":
        flops = 2 * body * tokens / t["target pass"]  # matmul FLOPs of the decoder (attention scores left out)
        peak = next((v for k, v in BF16_PEAK.items() if k in where), None)
        frac = f"{100 * flops / (peak * 1e12):.0f} % of its {peak:.0f} TFLOP/s bf16 peak" if peak else "peak unknown"
        print(f"  target pass: {flops / 1e12:.1f} TFLOP/s, {frac}")
        res["tflops"] = flops / 1e12
    else:
        print("no GPU was available")
    return res


if __name__ == "__main__":
    main()
