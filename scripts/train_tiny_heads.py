#!/usr/bin/env python
"""Train the tiny hidden-state draft heads for the shipped tiny target: an EAGLE-3 head and an MTP head.

Seeded, CPU, a few minutes on 2 cores. ``scripts/train_tiny_models.py`` runs it after training the
target; alone it reads the shipped target.

1. **Data** — chat requests of the sample-workload generator (``--pair-seeds``; seed 0, the shipped
   sample, is held out) rendered through the target's chat template, followed by their reference
   answers (the target's own training corpus); labels are the target's argmax at every position
   (distillation: what greedy acceptance rewards). Each training window is the last ``--window``
   tokens of prompt + answer.
2. **Heads** — one decoder layer each, shaped like the target (hidden 256), sharing its embeddings:
   EAGLE-3 reads the target's residual streams entering layers 1, 2 and 4 (the last layer's output;
   vLLM's default ids for 4 layers, (2, 2, 1), would give two states) through ``fc`` and predicts
   over a draft vocabulary of the ``--draft-vocab`` ids the target emits most (``d2t``/``t2d``);
   MTP (DeepSeek-V3 layout) reads the final-norm hidden state and shares the target's lm_head.
3. **Loss** — cross-entropy to the target's argmax at every position, over ``--ttt-levels`` levels of
   EAGLE-3's training-time test (level s feeds the head its own hidden states from level s-1; the
   same computation the replay runs), level s weighted 0.8^s.
4. **Figures** — on held-out requests (the shipped sample's logged greedy outputs), the exact replay's
   acceptance per k beside the teacher-forced accuracy; written to each head's ``README.md`` and
   ``training_figures.json``. Weights saved in bfloat16, figures measured on the saved files.

Usage::

    nice -n 10 python scripts/train_tiny_heads.py             # the shipped heads
    python scripts/train_tiny_heads.py --quick --out /tmp/h    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from specgauge.drafters.base import trace_from_matches, trace_from_runs  # noqa: E402
from specgauge.drafters.heads.chain import levels  # noqa: E402
from specgauge.drafters.heads.loader import HeadModule  # noqa: E402
from specgauge.drafters.heads.make import eagle3_config, mtp_config, new_head, save_head  # noqa: E402
from specgauge.targets.lean import LeanTarget  # noqa: E402

AUX_LAYERS = (1, 2, 4)
KS = (1, 2, 3, 4, 5)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, default=REPO / "src/specgauge/models/tiny-target")
    p.add_argument("--out", type=Path, default=REPO / "src/specgauge/models", help="writes OUT/tiny-eagle3, OUT/tiny-mtp")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pair-seeds", type=str, default="1,2")
    p.add_argument("--per-cell", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=192, help="answer length cap (tokens) of a training document")
    p.add_argument("--window", type=int, default=192)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--intermediate", type=int, default=512, help="the head's MLP width")
    p.add_argument("--ttt-levels", type=int, default=3)
    p.add_argument("--draft-vocab", type=int, default=2048)
    p.add_argument("--eval-requests", type=int, default=40)
    p.add_argument("--eval-max-tokens", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="smoke run; do not ship its output")
    a = p.parse_args(argv)
    if a.quick:
        a.per_cell, a.steps, a.eval_requests = 2, 4, 6
    return a


def documents(tok: Any, seeds: list[int], per_cell: int, max_answer: int) -> list[list[int]]:
    """prompt ids + reference answer ids (+ <|im_end|> for chats) of the generator's requests."""
    from specgauge.workload.samples.generate import generate_pairs

    out = []
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for s in seeds:
        for request, answer in generate_pairs(s, per_cell):
            body = request.get("body", request)
            if body.get("messages"):
                text = tok.apply_chat_template(body["messages"], tools=body.get("tools"), add_generation_prompt=True,
                                               tokenize=False)
                tail = [end]
            else:
                text, tail = body["prompt"], []
            ids = tok(text, add_special_tokens=False)["input_ids"]
            ans = tok(answer, add_special_tokens=False)["input_ids"][:max_answer] + tail
            out.append(list(ids)[-(2048 - len(ans)):] + ans)
    return out


def held_out(n: int, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """The first ``n`` greedy requests of the shipped sample with the target's logged outputs."""
    from specgauge.workload.samples import sample_logged_path

    rows = [json.loads(line) for line in sample_logged_path().read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r["request"].get("temperature") == 0.0][:n]
    return [(r["response"]["prompt_token_ids"], r["response"]["output_token_ids"][:max_tokens]) for r in rows]


def windows(target: Any, seqs: list[list[int]], layers: tuple[Any, ...], window: int) -> list[tuple[torch.Tensor, ...]]:
    """Per sequence: (next tokens [W], target hidden [W, *], labels [W]) for the last W draft positions.
    Labels: the target's argmax at p+1 (the token the head at p should draft)."""
    out = []
    for seq in seqs:
        T = len(seq) - 1
        if T < 3:
            continue
        with torch.inference_mode():
            m = target.model  # the lean model: logits and hidden states from one pass
            logits, hid = m.forward_flat_hidden(torch.tensor(seq[:-1]), [0], [0], [T], m.new_cache(1, T), layers)
        lab = logits.argmax(-1)  # [T]: target's prediction of t[p+1]; the head at p predicts t[p+2]
        s = max(0, T - 1 - window)
        e = T - 1
        out.append((torch.tensor(seq[s + 1 : e + 1]), hid[s:e].clone().to(torch.bfloat16), lab[s + 1 : e + 1].clone()))
    return out


def train(head: HeadModule, data: list[tuple[torch.Tensor, ...]], args: argparse.Namespace, to_draft: torch.Tensor | None) -> list[list[float]]:
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = random.Random(args.seed)
    curve = []
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / 20) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = torch.zeros(())
        for _ in range(args.batch_size):
            tokens, hid, lab = data[gen.randrange(len(data))]
            y = lab if to_draft is None else to_draft[lab]  # -100: outside the draft vocabulary
            for s, lg in enumerate(levels(head, tokens, hid.float(), args.ttt_levels)):
                if s >= len(y) - 1:
                    break
                loss_sum = loss_sum + 0.8**s * F.cross_entropy(lg[s:], y[s:], ignore_index=-100)
        loss = loss_sum / args.batch_size
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 10 == 0 or step == args.steps:
            curve.append([step, round(loss.item(), 4)])
            print(f"[{head.method}] step {step}/{args.steps} loss {loss.item():.4f}", flush=True)
    return curve


def evaluate(kind: str, head_dir: Path, target_dir: Path, evals: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    from specgauge.drafters.base import make_drafter

    d = make_drafter(kind, model=str(head_dir), target=str(target_dir))
    rows: dict[int, dict[str, float]] = {}
    acc = {k: [0, 0, 0, 0] for k in KS}  # drafted, accepted (replay); drafted, accepted (teacher-forced)
    for p, o in evals:
        runs, tf = d.replay_arrays(p, o, max(KS))
        for k in KS:
            r, t = trace_from_runs(runs, k), trace_from_matches(tf, k)
            acc[k][0] += int(r.drafted.sum())
            acc[k][1] += int(r.accepted.sum())
            acc[k][2] += int(t.drafted.sum())
            acc[k][3] += int(t.accepted.sum())
    for k, (dr, ac, tdr, tac) in acc.items():
        rows[k] = {"replayed_acceptance": round(ac / max(dr, 1), 4), "teacher_forced_acceptance": round(tac / max(tdr, 1), 4)}
    return {"requests": len(evals), "output_tokens": sum(len(o) for _, o in evals), "per_k": rows}


def write_readme(out: Path, kind: str, figs: dict[str, Any]) -> None:
    title = {"eagle3": "EAGLE-3 head", "mtp": "MTP head"}[kind]
    lines = [f"# tiny-{kind}: the {title} of specgauge's tiny target", "",
             "Made by `scripts/train_tiny_heads.py` (seeded, CPU); figures measured on the saved bfloat16 files.",
             "Checkpoint format: " + ("vLLM's EAGLE-3 (`LlamaForCausalLMEagle3`, `midlayer.*`, `fc`, `d2t`/`t2d`, "
                                      "`eagle_config.eagle_aux_hidden_state_layer_ids`)." if kind == "eagle3" else
                                      "a DeepSeek-V3 MTP layer (`model.layers.4.{enorm,hnorm,eh_proj,shared_head}`) "
                                      "on a Llama block; embeddings and lm_head are the target's."),
             f"Parameters (own): {figs['params']:,}; bytes on disk: {figs['bytes']:,}; steps {figs['steps']}, "
             f"final loss {figs['curve'][-1][1]}.", "",
             f"Held-out acceptance ({figs['eval']['requests']} greedy requests of the shipped sample, "
             f"{figs['eval']['output_tokens']} output tokens): the exact replay (the chain as vLLM runs it) beside the "
             "teacher-forced figure training tools print (every draft position fed the target's hidden state):", "",
             "| k | replayed acceptance | teacher-forced (optimistic) |", "|---|---|---|"]
    for k, r in figs["eval"]["per_k"].items():
        lines.append(f"| {k} | {r['replayed_acceptance']:.1%} | {r['teacher_forced_acceptance']:.1%} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from transformers import AutoTokenizer

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(args.target))
    target = LeanTarget.open(args.target)
    targs = target.config
    seeds = [int(s) for s in args.pair_seeds.split(",")]
    if 0 in seeds:
        raise SystemExit("--pair-seeds must not contain the held-out seed 0")
    seqs = documents(tok, seeds, args.per_cell, args.max_tokens)
    print(f"[data] {len(seqs)} sequences, {sum(map(len, seqs)):,} tokens ({time.time() - t0:.0f} s)", flush=True)
    evals = held_out(args.eval_requests, args.eval_max_tokens)
    # the EAGLE-3 draft vocabulary: the ids most frequent in the training documents (ties by id), in increasing order
    counts = np.bincount(np.concatenate([np.asarray(o, dtype=np.int64) for o in seqs] + [np.arange(targs.vocab_size)]),
                         minlength=targs.vocab_size) - 1
    order = sorted(range(targs.vocab_size), key=lambda i: (-counts[i], i))[: args.draft_vocab]
    d2t_ids = torch.tensor(sorted(order))
    to_draft = torch.full((targs.vocab_size,), -100, dtype=torch.long)
    to_draft[d2t_ids] = torch.arange(len(d2t_ids))
    figures: dict[str, Any] = {}
    shared = windows(target, seqs, (*AUX_LAYERS, "final"), args.window)  # one target pass for both heads
    H = targs.hidden_size
    cols = {"eagle3": slice(0, len(AUX_LAYERS) * H), "mtp": slice(len(AUX_LAYERS) * H, (len(AUX_LAYERS) + 1) * H)}
    for kind in ("eagle3", "mtp"):
        c = (eagle3_config(target, draft_vocab_size=args.draft_vocab, aux_layer_ids=AUX_LAYERS,
                           intermediate_size=args.intermediate) if kind == "eagle3" else
             mtp_config(target, intermediate_size=args.intermediate))
        head = new_head(c, target, seed=args.seed, draft_to_target=d2t_ids if kind == "eagle3" else None)
        data = [(t, h[:, cols[kind]], y) for t, h, y in shared]
        curve = train(head, data, args, to_draft if kind == "eagle3" else None)
        out = save_head(head.eval(), args.out / f"tiny-{kind}", target.num_layers, target_model="tiny-target",
                        _name_or_path=f"specgauge/tiny-{kind}")
        own = sum(p.numel() for p in head.parameters() if p.requires_grad)
        figs = {"command": "python scripts/train_tiny_heads.py " + " ".join(argv or sys.argv[1:]), "seed": args.seed,
                "pair_seeds": args.pair_seeds, "per_cell": args.per_cell, "train_sequences": len(seqs),
                "steps": args.steps, "ttt_levels": args.ttt_levels, "params": own,
                "bytes": (out / "model.safetensors").stat().st_size, "curve": curve,
                "aux_layer_ids": list(head.spec.aux_layer_ids), "draft_vocab_size": head.spec.draft_vocab_size,
                "eval": evaluate(kind, out, args.target, evals)}
        (out / "training_figures.json").write_text(json.dumps(figs, indent=2) + "\n")
        write_readme(out, kind, figs)
        figures[kind] = figs
        print(f"[{kind}] saved {out} ({figs['bytes']:,} bytes); eval {figs['eval']['per_k']}", flush=True)
    print(f"[done] {time.time() - t0:.0f} s", flush=True)
    return figures


if __name__ == "__main__":
    main()
