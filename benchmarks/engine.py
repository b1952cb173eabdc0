"""Embedded engine benchmark: both sides in one run, ratios printed (no asserts).

1. Batch 1, greedy: tokens/s of the engine (no speculation, draft model, ngram) vs HF transformers'
   ``generate`` (plain, ``assistant_model=``, ``prompt_lookup_num_tokens=``) on the same models and
   prompts. Goal: engine / HF >= 1.5x.
2. Measured speedup over no speculation next to the theory (1 - a^(k+1)) / ((1 - a)(k c + 1)), with a
   the measured acceptance rate and c the measured cost of one draft forward relative to one target
   verification forward. Goal: >= 80 % of the theory.
3. Throughput vs batch size with and without speculation, and the crossover batch size.

    python benchmarks/engine.py [--target DIR] [--draft DIR] [--k 4] [--max-tokens 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from specgauge.config import SpeculativeConfig
from specgauge.drafters.base import drafter_kinds
from specgauge.engine.core import Engine
from specgauge.engine.sampling import SamplingParams

MODELS = Path(__file__).resolve().parent.parent / "src" / "specgauge" / "models"
PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "import json\n\ndef load(path):\n    with open(path) as f:\n",
    "Summarise the following text: The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "다음 문장을 영어로 번역하세요: 오늘 날씨가 좋습니다.",
]


def run_engine(eng: Engine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, int, dict[str, float]]:
    """Seconds, output tokens, and summed draft / verify seconds + spec counts."""
    for i, p in enumerate(prompts):
        eng.add_request(f"b{i}-{time.monotonic_ns()}", p, params)
    n_tok = 0
    agg = {"draft_s": 0.0, "verify_s": 0.0, "steps": 0, "drafted": 0, "accepted": 0, "drafts": 0}
    t0 = time.perf_counter()
    while eng.has_unfinished():
        outs = eng.step()
        tm = eng.last_timing
        if tm.num_decode:
            agg["draft_s"] += tm.draft_s
            agg["verify_s"] += tm.verify_s
            agg["steps"] += 1
        for o in outs:
            n_tok += len(o.new_token_ids)
            agg["drafted"] += o.num_drafted
            agg["accepted"] += o.num_accepted
            agg["drafts"] += o.num_drafted > 0
    return time.perf_counter() - t0, n_tok, agg


def hf_tps(target: object, tok: object, prompts: list[str], max_tokens: int, **kw: object) -> float:
    n, t = 0, 0.0
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids  # type: ignore[operator]
        t0 = time.perf_counter()
        out = target.generate(ids, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False, **kw)  # type: ignore[attr-defined]
        t += time.perf_counter() - t0
        n += out.shape[1] - ids.shape[1]
    return n / t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, default=MODELS / "tiny-target")
    ap.add_argument("--draft", type=Path, default=MODELS / "tiny-draft")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,2,4,8,16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(a.target))
    prompts = [tok(p).input_ids for p in PROMPTS]
    params = SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=True)
    configs: dict[str, SpeculativeConfig | None] = {
        "none": None, "draft_model": SpeculativeConfig(model=str(a.draft), num_speculative_tokens=a.k)}
    if "ngram" in drafter_kinds():
        configs["ngram"] = SpeculativeConfig(method="ngram", num_speculative_tokens=a.k, prompt_lookup_max=4,
                                             prompt_lookup_min=2)
    engines = {name: Engine(a.target, cfg, max_batch=16, max_model_len=1024) for name, cfg in configs.items()}

    print(f"== batch 1, greedy, {a.max_tokens} tokens x {len(prompts)} prompts, k={a.k}, threads={a.threads}")
    tps: dict[str, float] = {}
    aggs = {}
    for name, eng in engines.items():
        run_engine(eng, prompts[:1], params.model_copy(update={"max_tokens": 8}))  # warm-up
        secs, n, agg = 0.0, 0, {"draft_s": 0.0, "verify_s": 0.0, "steps": 0, "drafted": 0, "accepted": 0, "drafts": 0}
        for p in prompts:
            s, m, g = run_engine(eng, [p], params)
            secs, n = secs + s, n + m
            agg = {key: agg[key] + g[key] for key in agg}
        tps[name], aggs[name] = n / secs, agg
    hf = AutoModelForCausalLM.from_pretrained(str(a.target), dtype=torch.float32).eval()
    hf_draft = AutoModelForCausalLM.from_pretrained(str(a.draft), dtype=torch.float32).eval()
    hf_tps(hf, tok, PROMPTS[:1], 8)
    hf_res = {"none": hf_tps(hf, tok, PROMPTS, a.max_tokens),
              "draft_model": hf_tps(hf, tok, PROMPTS, a.max_tokens, assistant_model=hf_draft,
                                    num_assistant_tokens=a.k, num_assistant_tokens_schedule="constant"),
              "ngram": hf_tps(hf, tok, PROMPTS, a.max_tokens, prompt_lookup_num_tokens=a.k)}
    print(f"{'method':<12} {'engine tok/s':>12} {'HF tok/s':>10} {'engine/HF':>10}")
    for name in hf_res:
        e = tps.get(name)
        print(f"{name:<12} {e if e else float('nan'):>12.1f} {hf_res[name]:>10.1f} "
              f"{(e / hf_res[name]) if e else float('nan'):>9.2f}x" + ("" if e else "  (drafter not registered)"))

    print("\n== measured speedup vs theory (1 - a^(k+1)) / ((1 - a)(k c + 1))")
    base_steps_s = aggs["none"]["verify_s"] / max(1, aggs["none"]["steps"])  # one plain decode step
    for name in [n for n in engines if n != "none"]:
        g = aggs[name]
        alpha = g["accepted"] / g["drafted"] if g["drafted"] else float("nan")
        # c: one draft forward (per drafted token) relative to one plain target decode step
        c = (g["draft_s"] / max(1, g["drafted"])) / base_steps_s
        k = a.k
        theory = (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1)) if alpha < 1 else (k + 1) / (k * c + 1)
        measured = tps[name] / tps["none"]
        print(f"{name:<12} alpha={alpha:.3f} c={c:.3f} measured={measured:.2f}x theory={theory:.2f}x "
              f"-> {measured / theory:.0%} of theory")

    print("\n== throughput (tok/s) vs batch size")
    batches = [int(b) for b in a.batches.split(",")]
    print(f"{'batch':>5} " + " ".join(f"{n:>12}" for n in engines))
    rows = {}
    for b in batches:
        batch_prompts = [prompts[i % len(prompts)] for i in range(b)]
        row = {}
        for name, eng in engines.items():
            s, n, _ = run_engine(eng, batch_prompts, params)
            row[name] = n / s
        rows[b] = row
        print(f"{b:>5} " + " ".join(f"{row[n]:>12.1f}" for n in engines))
    for name in [n for n in engines if n != "none"]:
        cross = next((b for b in batches if rows[b][name] < rows[b]["none"]), None)
        print(f"{name}: speculation " + (f"stops paying at batch {cross}" if cross else "pays at every batch measured"))


if __name__ == "__main__":
    main()
