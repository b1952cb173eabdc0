"""Embedded engine benchmark: both sides in one run, paired rounds, medians and ratios printed (no asserts).

Prompts: the shipped sample workload's greedy requests, one per segment, as token ids (the chat
template already applied when the sample was logged); both sides get the same ids.

1. Batch 1, greedy: tokens/s of the engine vs HF transformers' ``generate`` on the same models:
   no speculation vs plain ``generate``; draft model vs assisted generation (``assistant_model=``,
   k constant and no confidence cut-off, so both sides draft the same k greedy tokens per step);
   ngram vs prompt lookup (``prompt_lookup_num_tokens=k``). Each round runs both sides over all
   prompts, alternating which goes first; the table shows medians over rounds and the median of the
   per-round ratios. Goal: engine / HF >= 1.5x in every row.
2. Measured speedup over no speculation next to the theory (1 - a^(k+1)) / ((1 - a)(k c + 1)), with a
   the measured acceptance rate and c the measured cost of one draft forward relative to one plain
   target decode step.
3. Throughput vs batch size, flattened vs padded verification on the same engine: tokens through the
   target per verification forward (flat: sum of 1 + k_b; padded: B (K + 1) with K the longest
   proposal), verification ms per step and tok/s. The flat forward's cost follows the tokens actually
   drafted; the padded one's follows the longest proposal.

    python benchmarks/engine.py [--k 4] [--max-tokens 64] [--rounds 5] [--batches 1,2,4,8,16] [--threads 1]

Timing is wall-clock on whatever else the machine is doing; pairing and medians keep the ratios
meaningful on a busy machine, the absolute numbers are not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import drafter_kinds
from specgauge.engine.core import Engine
from specgauge.engine.sampling import SamplingParams

MODELS = Path(__file__).resolve().parent.parent / "src" / "specgauge" / "models"
SAMPLE = Path(__file__).resolve().parent.parent / "src" / "specgauge" / "workload" / "samples" / "sample_logged.jsonl"
AGG_KEYS = ("draft_s", "verify_s", "steps", "drafted", "accepted", "drafts", "fwd_tokens")


def sample_prompts(n_segments: int = 5) -> list[list[int]]:
    """The prompt ids of the first greedy request of each segment in the shipped logged sample."""
    seen: set[str] = set()
    out = []
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        req = row["request"]
        if req.get("temperature") == 0.0 and req.get("segment") not in seen:
            seen.add(req.get("segment"))
            out.append(row["response"]["prompt_token_ids"])
    return out[:n_segments]


def run_engine(eng: Engine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int, dict[str, float]]:
    """Seconds, output tokens, and summed draft / verify seconds, spec counts, target tokens per step."""
    for i, p in enumerate(prompts):
        eng.add_request(f"b{i}-{time.monotonic_ns()}", p, params)
    n_tok = 0
    agg = dict.fromkeys(AGG_KEYS, 0.0)
    t0 = time.perf_counter()
    while eng.has_unfinished():
        outs = eng.step()
        tm = eng.last_timing
        if tm.num_decode:
            agg["draft_s"] += tm.draft_s
            agg["verify_s"] += tm.verify_s
            agg["steps"] += 1
            agg["fwd_tokens"] += tm.verify_tokens
        for o in outs:
            n_tok += len(o.new_token_ids)
            agg["drafted"] += o.num_drafted
            agg["accepted"] += o.num_accepted
            agg["drafts"] += o.num_drafted > 0
    return time.perf_counter() - t0, n_tok, agg


def run_hf(model: Any, prompts: list[list[int]], max_tokens: int, **kw: Any) -> tuple[float, int]:
    secs, n = 0.0, 0
    for p in prompts:
        ids = torch.tensor([p])
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                             min_new_tokens=max_tokens, do_sample=False, **kw)
        secs += time.perf_counter() - t0
        n += out.shape[1] - ids.shape[1]
    return secs, n


def median_ratio(xs: list[float], ys: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(xs, ys, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, default=MODELS / "tiny-target")
    ap.add_argument("--draft", type=Path, default=MODELS / "tiny-draft")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--batch-rounds", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    prompts = sample_prompts()
    params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=True)
    configs: dict[str, SpeculativeConfig | None] = {
        "none": None, "draft_model": SpeculativeConfig(model=str(a.draft), num_speculative_tokens=a.k)}
    if "ngram" in drafter_kinds():
        configs["ngram"] = SpeculativeConfig(method="ngram", num_speculative_tokens=a.k, prompt_lookup_max=4,
                                             prompt_lookup_min=2)
    engines = {name: Engine(a.target, cfg, max_batch=16, max_model_len=2048) for name, cfg in configs.items()}
    hf = AutoModelForCausalLM.from_pretrained(str(a.target), dtype=torch.float32).eval()
    hf_draft = AutoModelForCausalLM.from_pretrained(str(a.draft), dtype=torch.float32).eval()
    hf_kw: dict[str, dict[str, Any]] = {
        "none": {},
        "draft_model": {"assistant_model": hf_draft, "num_assistant_tokens": a.k,
                        "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0},
        "ngram": {"prompt_lookup_num_tokens": a.k, "max_matching_ngram_size": 4},
    }
    hf_what = {"none": "generate", "draft_model": "assisted generation", "ngram": "prompt lookup"}

    print(f"== batch 1, greedy, {a.max_tokens} tokens x {len(prompts)} sample prompts "
          f"({min(map(len, prompts))}-{max(map(len, prompts))} prompt tokens), k={a.k}, threads={a.threads}, "
          f"{a.rounds} paired rounds")
    tps: dict[str, list[float]] = {}
    hf_tps: dict[str, list[float]] = {}
    aggs: dict[str, dict[str, float]] = {}
    for name, eng in engines.items():
        run_engine(eng, prompts[:1], params.model_copy(update={"max_tokens": 8}))  # warm-up
        run_hf(hf, prompts[:1], 8, **hf_kw[name])
        tps[name], hf_tps[name] = [], []
        agg = dict.fromkeys(AGG_KEYS, 0.0)
        for r in range(a.rounds):
            sides = ["engine", "hf"] if r % 2 == 0 else ["hf", "engine"]
            for side in sides:
                if side == "engine":
                    secs, n, g = run_engine(eng, prompts, params)
                    tps[name].append(n / secs)
                    agg = {key: agg[key] + g[key] for key in AGG_KEYS}
                else:
                    secs, n = run_hf(hf, prompts, a.max_tokens, **hf_kw[name])
                    hf_tps[name].append(n / secs)
        aggs[name] = agg
    print(f"{'method':<12} {'engine tok/s':>12} {'HF tok/s':>10} {'engine/HF':>10}  HF side")
    for name in engines:
        print(f"{name:<12} {statistics.median(tps[name]):>12.1f} {statistics.median(hf_tps[name]):>10.1f} "
              f"{median_ratio(tps[name], hf_tps[name]):>9.2f}x  {hf_what[name]}  (goal >= 1.5x; per-round ratios "
              + ", ".join(f"{x / y:.2f}" for x, y in zip(tps[name], hf_tps[name], strict=True)) + ")")

    print("\n== measured speedup vs theory (1 - a^(k+1)) / ((1 - a)(k c + 1))")
    base_step_s = aggs["none"]["verify_s"] / max(1, aggs["none"]["steps"])  # one plain decode step
    for name in [n for n in engines if n != "none"]:
        g = aggs[name]
        alpha = g["accepted"] / g["drafted"] if g["drafted"] else float("nan")
        c = (g["draft_s"] / max(1, g["drafted"])) / base_step_s  # one draft token's cost / one plain step
        k = a.k
        theory = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1)) if alpha < 1 else (k + 1) / (k * c + 1)
        measured = median_ratio(tps[name], tps["none"])
        print(f"{name:<12} alpha={alpha:.3f} c={c:.3f} measured={measured:.2f}x theory={theory:.2f}x "
              f"-> {measured / theory:.0%} of theory")

    batches = [int(b) for b in a.batches.split(",")]
    print(f"\n== throughput vs batch size: flattened vs padded verification, same engine, {a.batch_rounds} paired "
          "rounds (medians)")
    print(f"{'method':<12} {'batch':>5} | {'tok/fwd flat':>12} {'padded':>7} | {'verify ms/step flat':>19} "
          f"{'padded':>7} {'ratio':>6} | {'tok/s flat':>10} {'padded':>8}")
    rows: dict[str, dict[int, float]] = {name: {} for name in engines}
    for name, eng in engines.items():
        for b in batches:
            batch_prompts = [prompts[i % len(prompts)] for i in range(b)]
            res: dict[str, list[tuple[float, float, float]]] = {"flat": [], "padded": []}
            layouts = ["flat", "padded"] if name != "none" else ["flat"]
            for r in range(a.batch_rounds):
                for layout in layouts if r % 2 == 0 else layouts[::-1]:
                    eng.verify_layout = layout
                    s, n, g = run_engine(eng, batch_prompts, params)
                    steps = max(1, g["steps"])
                    res[layout].append((g["fwd_tokens"] / steps, 1e3 * g["verify_s"] / steps, n / s))
            eng.verify_layout = "flat"
            med = {lay: [statistics.median(x[j] for x in v) for j in range(3)] for lay, v in res.items() if v}
            f = med["flat"]
            p = med.get("padded", [float("nan")] * 3)
            rows[name][b] = f[2]
            print(f"{name:<12} {b:>5} | {f[0]:>12.1f} {p[0]:>7.1f} | {f[1]:>19.2f} {p[1]:>7.2f} "
                  f"{p[1] / f[1]:>5.2f}x | {f[2]:>10.1f} {p[2]:>8.1f}")
    for name in [n for n in engines if n != "none"]:
        cross = next((b for b in batches if rows[name][b] < rows["none"][b]), None)
        print(f"{name}: speculation (flat) " + (f"stops paying at batch {cross}" if cross else
                                                "pays at every batch measured"))


if __name__ == "__main__":
    main()
