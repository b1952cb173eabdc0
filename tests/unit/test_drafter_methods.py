"""Every drafter the AMD post compares, replayed by ``simulate`` and held to the plain online loop
(``testing/reference_loop.py`` with ``testing/reference_drafts.py``: the target re-run over the whole
history every step, the head drafting from scratch as vLLM 0.32's proposer does) on tiny random models
made by transformers: native MTP of DeepSeek-V3 (MLA + MoE), GLM-4-MoE, Qwen3-Next and MiMo (one layer;
two layers on vLLM's V1 and V2 runners), Gemma 4's assistant, DSpark (both block layouts) and P-EAGLE.
Each head is trained for a few dozen steps on the target's greedy continuations of the test's prompts,
so drafts get accepted; the loop generates, its outputs are logged, and ``simulate --per-request`` and
the replay's per-step counts must equal the loop's, request by request (greedy). The final step is held
to the open-end rule: equal unless every draft matched up to the logged end (then a lower bound)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from specgauge.cli import app  # noqa: E402
from specgauge.drafters.heads import chain  # noqa: E402
from specgauge.drafters.heads.loader import load_head  # noqa: E402
from specgauge.offline.replay import MethodReplay, MethodSpec  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.testing import reference_drafts as rd  # noqa: E402
from specgauge.testing.reference_loop import generate, greedy_outputs, train_briefly  # noqa: E402
from specgauge.testing.tiny_families import make_tiny_family  # noqa: E402

K, MAX_TOKENS = 3, 16


def _prompts(n: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(5)
    return [torch.randint(4, 320, (m,), generator=g).tolist() for m in (5, 8, 11)[:n]]


def _seqs(target: TransformersTarget, prompts: list[list[int]]) -> list[list[int]]:
    return [p + o for p, o in zip(prompts, greedy_outputs(target, prompts, MAX_TOKENS + 2), strict=True)]


def _train(head: Any, levels_of: Any, seqs: list[list[int]], steps: int = 60, lr: float = 1e-2) -> None:
    """A few steps on the replay's own levels (the training-time test of the head's rule)."""
    params = [p for n, p in head.named_parameters() if p.requires_grad and n not in ("embed_tokens.weight",)]
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


def _open_end(steps: list[tuple[int, int]], n_out: int) -> bool:
    emitted = 1 + sum(a + 1 for _, a in steps[:-1])
    return emitted + steps[-1][1] >= n_out


def _check(tmp: Path, target: TransformersTarget, head: Any, draft: Any, method: str, tdir: Path,
           spec_json: dict[str, Any] | None = None) -> int:
    """Generate with the loop, log, simulate, compare; -> accepted tokens in all."""
    prompts = _prompts()
    live = [generate(target, head, p, MAX_TOKENS, K, draft=draft) for p in prompts]
    log = tmp / "log.jsonl"
    with log.open("w", encoding="utf-8") as f:
        for i, (p, r) in enumerate(zip(prompts, live, strict=True)):
            f.write(json.dumps({"request": {"id": f"r{i}", "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0.0},
                                "response": {"prompt_token_ids": p, "output_token_ids": r.output_ids,
                                             "finish_reason": "length"}}) + "\n")
    rows = tmp / "rows.jsonl"
    args = ["simulate", str(log), "--target-model", str(tdir), "--device", "cpu", "-k", str(K),
            "--per-request", str(rows), "--json"]
    args += ["--speculative-config", json.dumps(spec_json)] if spec_json else ["--method", method]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    got = {r["request_id"]: r for r in map(json.loads, rows.read_text().splitlines())}
    spec = MethodSpec.parse(method) if not spec_json else MethodSpec.from_config(
        __import__("specgauge.config", fromlist=["x"]).SpeculativeConfig.model_validate(spec_json))
    spec = spec.model_copy(update={"options": {**spec.options, "target": str(tdir)}})
    replay = MethodReplay(spec, [K])
    for i, (p, r) in enumerate(zip(prompts, live, strict=True)):
        tr = replay.traces(f"r{i}", "log", p, r.output_ids)[K]
        steps = list(zip(tr.drafted.tolist(), tr.accepted.tolist(), strict=True))
        assert len(steps) == len(r.steps) and steps[:-1] == r.steps[:-1], (method, i, steps, r.steps)
        if _open_end(r.steps, len(r.output_ids)):
            assert steps[-1][1] <= r.steps[-1][1]
        else:
            assert steps[-1] == r.steps[-1], (method, i)
        row = got[f"r{i}"]
        assert (row["steps"], row["draft_tokens"], row["accepted_tokens"]) == (
            len(steps), sum(d for d, _ in steps), sum(a for _, a in steps))
    return sum(a for r in live for _, a in r.steps)


@pytest.mark.parametrize("family,n,runner", [
    ("deepseek_v3", 1, "v2"), ("glm4_moe", 1, "v2"), ("qwen3_next", 1, "v2"), ("mimo", 1, "v2"),
    pytest.param("glm4_moe", 2, "v1", marks=pytest.mark.slow), ("glm4_moe", 2, "v2"),
])
def test_native_mtp_equals_the_loop(family: str, n: int, runner: str, tmp_path: Path) -> None:
    tdir = make_tiny_family(family, tmp_path / family, with_mtp=True, num_mtp_layers=n)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(tdir, target)
    for name, p in head.named_parameters():
        p.requires_grad_(name not in ("embed_tokens.weight", "lm_head.weight"))  # the target's, as in vLLM
    seqs = _seqs(target, _prompts())
    train_briefly(head, target, seqs, steps=60, lr=1e-2)
    _save_native(head, tdir)  # the trained MTP layers back into the target's checkpoint, under vLLM's names
    head = load_head(tdir, target)
    multi = runner == "v2" and n > 1
    draft = rd.multi_module_drafts if multi else None
    spec = {"method": "mtp", "model": str(tdir), "num_speculative_tokens": K, "mtp_runner": runner}
    accepted = _check(tmp_path, target, head, draft, f"mtp:{tdir}", tdir, spec_json=spec)
    assert accepted > 0, f"{family}: the trained MTP layer never drafted an accepted token"


def _save_native(head: Any, tdir: Path) -> None:
    """Write a trained native MTP head's tensors over the ones in the target's safetensors (test helper)."""
    from safetensors.torch import load_file, save_file

    from specgauge.drafters.heads.mtp_native import style_of

    style = style_of(head.spec)
    shard = tdir / "model.safetensors"
    sd = load_file(str(shard))
    n_target = head.spec.layer_config.num_hidden_layers
    names = dict(zip(("e_norm", "h_norm", "proj", "o_norm"), style.names, strict=True))
    for i in range(head.n):
        inp = head.inputs[0 if style.shared_inputs else i]
        for mk, ck in names.items():
            sd[style.own_prefix(i, n_target) + ck + ".weight"] = getattr(inp, mk).weight.detach().clone()
    # the block: transformers' own saving turns the fused experts back into the checkpoint's names
    from specgauge.drafters.heads.mtp_native import block_container

    container = block_container(head.spec.layer_config, head.n)
    container.model.layers = head.blocks
    tmp = tdir / ".blocks"
    container.model.embed_tokens = torch.nn.Embedding(1, head.spec.hidden_size)
    container.model.norm = type(head.blocks[0].input_layernorm)(head.spec.hidden_size)
    container.lm_head = torch.nn.Linear(head.spec.hidden_size, 1, bias=False)
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


def test_gemma4_assistant_equals_the_loop(tmp_path: Path) -> None:
    from specgauge.drafters.heads.gemma4_assistant import assistant_levels

    tdir = make_tiny_family("gemma4", tmp_path / "t")
    adir = make_tiny_family("gemma4_assistant", tmp_path / "a", ordered=False)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(adir, target)

    def levels_of(s: list[int], k: int) -> list[Any]:
        tp = target.run(s[:-1], ["final"], kv_layers=head.kv_layer_ids())
        return assistant_levels(head, target.embed, torch.tensor(s[1:]), tp.hidden[:, 0], tp.kv, k)

    _train(head, levels_of, _seqs(target, _prompts()), steps=80)
    head.assistant.save_pretrained(str(adir))  # the trained assistant, as transformers saves it ...
    cfg = json.loads((adir / "config.json").read_text())
    cfg["architectures"] = ["Gemma4AssistantForCausalLM"]  # ... under its class's name
    (adir / "config.json").write_text(json.dumps(cfg))
    head = load_head(adir, target)
    assert _check(tmp_path, target, head, rd.assistant_drafts, f"mtp:{adir}", tdir) > 0


def test_gemma4_assistant_centroid_masked_drafts_equal_the_loop(tmp_path: Path) -> None:
    """use_ordered_embeddings (top-k centroids, then the argmax over their tokens): untrained, so the
    drafts are compared (every first draft of a step), not their acceptance."""
    tdir = make_tiny_family("gemma4", tmp_path / "t")
    adir = make_tiny_family("gemma4_assistant", tmp_path / "a", ordered=True)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = load_head(adir, target)
    assert head.assistant.masked_embedding is not None
    _check(tmp_path, target, head, rd.assistant_drafts, f"mtp:{adir}", tdir)


@pytest.mark.parametrize("sample_from_anchor", [True, False])
def test_dspark_equals_the_loop(sample_from_anchor: bool, tmp_path: Path) -> None:
    from specgauge.drafters.heads.make import dspark_config, new_head, save_head

    tdir = make_tiny_family("qwen3", tmp_path / "t")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = new_head(dspark_config(target, sample_from_anchor=sample_from_anchor, target_layer_ids=[0, 1]), target,
                    seed=0, std=0.1)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    for it, s in enumerate(_seqs(target, _prompts()) * 27):  # 81 steps
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
    hdir = save_head(head, tmp_path / "head", target.num_layers, dtype=torch.float32)
    head = load_head(hdir, target)
    assert _check(tmp_path, target, head, rd.dspark_drafts, f"dspark:{hdir}", tdir) > 0


def test_peagle_equals_the_loop(tmp_path: Path) -> None:
    from specgauge.drafters.heads.make import new_head, save_head, speculators_peagle_config

    tdir = make_tiny_family("qwen3", tmp_path / "t")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    head = new_head(speculators_peagle_config(target, str(tdir), aux_layer_ids=(0, 1, 2)), target, seed=0, std=0.1)
    head.mask_hidden.copy_(torch.randn(head.mask_hidden.shape, generator=torch.Generator().manual_seed(1)) * 0.5)

    def levels_of(s: list[int], k: int) -> list[Any]:
        hid = target.run(s[:-1], head.spec.aux_layer_ids).flat()
        return chain.levels(head, torch.tensor(s[1:]), hid, k, inputs=head.mask_inputs)

    _train(head, levels_of, _seqs(target, _prompts()), steps=80)
    hdir = save_head(head, tmp_path / "head", target.num_layers, dtype=torch.float32)
    head = load_head(hdir, target)
    assert _check(tmp_path, target, head, rd.parallel_drafts, f"peagle:{hdir}", tdir) > 0
    # the same head without the flag is EAGLE-3's chain, as vLLM runs it then
    _check(tmp_path, target, head, None, f"eagle3:{hdir}", tdir)


def test_adaptive_verification_bounds_and_server_lengths() -> None:
    import numpy as np

    from specgauge.drafters.dspark import fewest_steps, trace_at_verified

    run = np.array([0, 2, 0, 0, 3, 0, 0, 0, 1, 0])  # output of 10 tokens
    # from 1: take 2 -> 4; take 3 -> 8; take 1 -> 10: 3 steps (one per token would be 9)
    assert fewest_steps(run, 3) == 3
    assert fewest_steps(run, 1) == 6  # 1->3, 3->4, 4->6, 6->7, 7->8, 8->10
    tr = trace_at_verified(run, [1, 0, 3, 2, 0])  # the server verified these lengths
    assert tr.drafted.tolist() == [1, 0, 3, 2] and tr.accepted.tolist() == [1, 0, 3, 1]  # 1->3->4->8->10
