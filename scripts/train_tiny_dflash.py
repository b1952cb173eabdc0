#!/usr/bin/env python
"""Train the tiny DFlash block-parallel head for the shipped tiny target (``src/specgauge/models/tiny-dflash``).

Seeded, CPU, a few minutes on 2 cores; beside ``scripts/train_tiny_heads.py`` (EAGLE-3, MTP), which
``scripts/train_tiny_models.py`` runs after the target. Alone it reads the shipped target.

1. **Data (self-distillation, as DFlash trains)** — the chat requests of the sample-workload generator
   (``--pair-seeds``; seed 0, the shipped sample, is held out), rendered by the target's chat template
   (the ids the server builds), answered by the target itself through the embedded engine, greedy, up
   to ``--max-tokens``. A greedy output token is the target's argmax given the tokens before it, so
   the output is the label at every block position.
2. **Head** — ``--layers`` Qwen3-style DFlash layers shaped like the target (hidden 256), sharing its
   embeddings and lm_head, reading the outputs of target layers ``--target-layers`` (0, 1, 2: the
   residual stream entering layers 1..3) through ``fc``; mask token ``<pad>`` (id 3, never in a prompt
   or an output), its embedding the target's. vLLM's ``DFlashDraftModel`` checkpoint format.
3. **Loss** — per step, for each of ``--batch-size`` outputs, ``--anchors`` random step starts in the
   output; one block of ``b`` positions each (anchor + b - 1 masks, b drawn from 2..``--max-block`` per
   step, so one head serves k = 1..max_block - 1), context = the target's hidden states before the
   anchor; cross-entropy at every mask, position i weighted exp(-(i - 1) / ``--gamma``) (the paper's
   decay: early positions decide acceptance).
4. **Figures** — on held-out requests (the shipped sample's logged greedy outputs), the exact replay
   per k: acceptance rate, mean acceptance length and per-position acceptance; written to the head's
   ``README.md`` and ``training_figures.json``. Weights saved in bfloat16, figures measured on the saved
   files.

Usage::

    nice -n 10 python scripts/train_tiny_dflash.py             # the shipped head
    python scripts/train_tiny_dflash.py --quick --out /tmp/d    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from specgauge.drafters.base import trace_from_runs  # noqa: E402
from specgauge.drafters.heads.dflash import DFlashHead  # noqa: E402
from specgauge.drafters.heads.make import dflash_config, new_head, save_head  # noqa: E402
from specgauge.targets.lean import LeanTarget  # noqa: E402

KS = (1, 2, 3, 4, 5, 6, 7, 8)
MASK_TOKEN = "<pad>"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, default=REPO / "src/specgauge/models/tiny-target")
    p.add_argument("--out", type=Path, default=REPO / "src/specgauge/models", help="writes OUT/tiny-dflash")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pair-seeds", type=str, default="1,2")
    p.add_argument("--per-cell", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=128, help="output length cap of a training answer (tokens)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=512, help="the head's MLP width")
    p.add_argument("--target-layers", type=str, default="0,1,2", help="DFlash target_layer_ids (layer outputs)")
    p.add_argument("--max-block", type=int, default=9, help="largest block trained (k = block - 1 drafts)")
    p.add_argument("--anchors", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--gamma", type=float, default=4.0)
    p.add_argument("--eval-requests", type=int, default=40)
    p.add_argument("--eval-max-tokens", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="smoke run; do not ship its output")
    a = p.parse_args(argv)
    if a.quick:
        a.per_cell, a.steps, a.eval_requests, a.max_tokens = 1, 6, 4, 32
    return a


def self_distilled(target_dir: Path, seeds: list[int], per_cell: int, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's greedy output ids) of the generator's requests at ``seeds``."""
    from specgauge.engine.core import Engine
    from specgauge.engine.sampling import SamplingParams
    from specgauge.workload.loaders import load_workload
    from specgauge.workload.samples.generate import write_sample
    from specgauge.workload.tokenizer import HFTokenizer

    tok = HFTokenizer(target_dir)
    engine = Engine(target_dir, None, max_batch=16, max_model_len=2048)
    prompts: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in seeds:
            path = Path(tmp) / f"seed{s}.jsonl"
            write_sample(path, seed=s, per_cell=per_cell)
            for it in load_workload([path]):
                ids = tok.encode_request(it.request)
                rid = f"s{s}-{it.request.id}"
                prompts[rid] = ids
                engine.add_request(rid, ids, SamplingParams(max_tokens=min(max_tokens, 2048 - len(ids)), temperature=0.0))
    outs: dict[str, list[int]] = {r: [] for r in prompts}
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] += o.new_token_ids
    return [(prompts[r], outs[r]) for r in prompts if len(outs[r]) >= 3]


def held_out(n: int, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """The first ``n`` greedy requests of the shipped sample with the target's logged outputs."""
    from specgauge.workload.samples import sample_logged_path

    rows = [json.loads(line) for line in sample_logged_path().read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["request"].get("temperature") == 0.0][:n]
    return [(r["response"]["prompt_token_ids"], r["response"]["output_token_ids"][:max_tokens]) for r in rows]


def features(target: Any, pairs: list[tuple[list[int], list[int]]], layers: tuple[int, ...]) -> list[tuple[torch.Tensor, ...]]:
    """Per pair: (token ids [T+1], the target's hidden states at positions 0..T-1 [T, *] bf16, prompt length)."""
    out = []
    for p, o in pairs:
        seq = torch.tensor(p + o)
        T = len(seq) - 1
        hid = target.run(seq[:-1].tolist(), layers).flat()
        out.append((seq, hid.clone().to(torch.bfloat16), torch.tensor(len(p))))
    return out


def block_loss(head: DFlashHead, seq: torch.Tensor, hid: torch.Tensor, P: int, k: int, n_anchors: int,
               gen: random.Random, gamma: float) -> torch.Tensor:
    """Weighted cross-entropy of k-mask blocks at random anchors of one output (anchors P..len - 2)."""
    T = hid.shape[0]
    starts = list(range(P, len(seq) - 1))
    a = torch.tensor(sorted(gen.sample(starts, min(n_anchors, len(starts)))))
    ctx = head.context(hid.float(), torch.arange(T))
    logits = head.block(seq[a], a, k, ctx, torch.arange(T)[None, :] < a[:, None])  # [B, k, V]
    tgt_pos = a[:, None] + torch.arange(1, k + 1)  # the token each mask drafts
    labels = torch.where(tgt_pos < len(seq), seq[tgt_pos.clamp(max=len(seq) - 1)], torch.full_like(tgt_pos, -100))
    w = torch.exp(-torch.arange(k, dtype=torch.float32) / gamma)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="none")
    ce = ce.view(-1, k) * w
    valid = (labels != -100).float() * w
    return ce.sum() / valid.sum().clamp(min=1e-6)


def train(head: DFlashHead, data: list[tuple[torch.Tensor, ...]], args: argparse.Namespace) -> list[list[float]]:
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = random.Random(args.seed)
    curve = []
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        k = gen.randint(1, args.max_block - 1)
        loss = sum(block_loss(head, seq, hid, int(P), k, args.anchors, gen, args.gamma)
                   for seq, hid, P in (data[gen.randrange(len(data))] for _ in range(args.batch_size))) / args.batch_size
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 10 == 0 or step == args.steps:
            value = loss.item()
            curve.append([step, k, round(value, 4)])
            print(f"[dflash] step {step}/{args.steps} k {k} loss {value:.4f}", flush=True)
    return curve


def evaluate(head_dir: Path, target_dir: Path, evals: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """The exact replay per k on held-out outputs: acceptance, MAL, per-position acceptance."""
    from specgauge.drafters.base import make_drafter

    rows: dict[int, dict[str, Any]] = {}
    for k in KS:
        d = make_drafter("dflash", model=str(head_dir), target=str(target_dir))
        drafts = accepted = 0
        per_pos = np.zeros(k, dtype=np.int64)
        for p, o in evals:
            tr = trace_from_runs(d.runs_at(p, o, k), k)
            drafts += len(tr.drafted)
            accepted += int(tr.accepted.sum())
            per_pos += (tr.accepted[:, None] > np.arange(k)[None, :]).sum(0)
        rows[k] = {"acceptance_rate": round(accepted / max(drafts * k, 1), 4),
                   "mean_acceptance_length": round(1 + accepted / max(drafts, 1), 3),
                   "per_position": [round(float(x) / max(drafts, 1), 4) for x in per_pos]}
    return {"requests": len(evals), "output_tokens": sum(len(o) for _, o in evals), "per_k": rows}


def write_readme(out: Path, figs: dict[str, Any]) -> None:
    ev = figs["eval"]
    lines = ["# tiny-dflash: a DFlash block-parallel head for specgauge's tiny target", "",
             "Made by `scripts/train_tiny_dflash.py` (seeded, CPU, self-distilled on the target's greedy outputs); "
             "figures measured on the saved bfloat16 files.",
             "Checkpoint format: vLLM's / z-lab's DFlash (`DFlashDraftModel`, model_type qwen3, `layers.*`, `fc`, "
             "`hidden_norm`, `dflash_config.{mask_token_id,target_layer_ids}`); embeddings and lm_head are the target's.",
             f"Layers {figs['layers']}; target_layer_ids {figs['target_layer_ids']}; mask token id {figs['mask_token_id']}; "
             f"parameters {figs['params']:,}; bytes on disk {figs['bytes']:,}; {figs['steps']} steps on "
             f"{figs['train_sequences']} outputs, final loss {figs['curve'][-1][2]}.", "",
             f"Held-out replay ({ev['requests']} greedy requests of the shipped sample, {ev['output_tokens']} output "
             "tokens), exact at each k (the block is non-causal, so each k is its own forward):", "",
             "| k | acceptance | mean acceptance length | per-position acceptance |", "|---|---|---|---|"]
    for k, r in ev["per_k"].items():
        pos = ", ".join(f"{x:.0%}" for x in r["per_position"])
        lines.append(f"| {k} | {r['acceptance_rate']:.1%} | {r['mean_acceptance_length']:.2f} | {pos} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    seeds = [int(s) for s in args.pair_seeds.split(",")]
    if 0 in seeds:
        raise SystemExit("--pair-seeds must not contain the held-out seed 0")
    mask_id = AutoTokenizer.from_pretrained(str(args.target)).convert_tokens_to_ids(MASK_TOKEN)
    target = LeanTarget.open(args.target)
    pairs = self_distilled(args.target, seeds, args.per_cell, args.max_tokens)
    print(f"[data] {len(pairs)} greedy outputs, {sum(len(o) for _, o in pairs):,} tokens ({time.time() - t0:.0f} s)", flush=True)
    c = dflash_config(target, num_layers=args.layers, intermediate_size=args.intermediate,
                      target_layer_ids=[int(i) for i in args.target_layers.split(",")], mask_token_id=mask_id,
                      block_size=args.max_block)
    head = new_head(c, target, seed=args.seed)
    data = features(target, pairs, head.spec.aux_layer_ids)
    curve = train(head, data, args)
    out = save_head(head.eval(), args.out / "tiny-dflash", target.num_layers, target_model="tiny-target",
                    num_target_layers=target.num_layers,
                    _name_or_path="specgauge/tiny-dflash")
    figs: dict[str, Any] = {
        "command": "python scripts/train_tiny_dflash.py " + " ".join(argv or sys.argv[1:]), "seed": args.seed,
        "pair_seeds": args.pair_seeds, "per_cell": args.per_cell, "train_sequences": len(pairs), "steps": args.steps,
        "layers": args.layers, "target_layer_ids": list(head.target_layer_ids), "mask_token_id": mask_id,
        "max_block": args.max_block, "gamma": args.gamma, "params": sum(p.numel() for p in head.parameters()),
        "bytes": (out / "model.safetensors").stat().st_size, "curve": curve,
        "eval": evaluate(out, args.target, held_out(args.eval_requests, args.eval_max_tokens)),
        "train_seconds": round(time.time() - t0),
    }
    (out / "training_figures.json").write_text(json.dumps(figs, indent=2) + "\n")
    write_readme(out, figs)
    print(f"[dflash] saved {out} ({figs['bytes']:,} bytes); eval {json.dumps(figs['eval']['per_k'])}", flush=True)
    print(f"[done] {time.time() - t0:.0f} s", flush=True)
    return figs


if __name__ == "__main__":
    main()
