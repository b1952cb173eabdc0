"""The DFlash block-parallel drafter: its engine proposer equals its batched replay at every step start,
its blocks depend on k (so it offers no whole-output replay), its checkpoint is vLLM's / z-lab's
format, and a broken head fails with one line naming the place. A random head on the shipped tiny
target (seconds); the shipped trained head is ``test_dflash_shipped.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from safetensors.torch import load_file  # noqa: E402

from specgauge import models  # noqa: E402
from specgauge.drafters.base import is_stateful, make_drafter, offers_whole_output, trace_from_runs  # noqa: E402
from specgauge.drafters.heads.config import HeadLoadError  # noqa: E402
from specgauge.drafters.heads.loader import load_head  # noqa: E402
from specgauge.drafters.heads.make import dflash_config, new_head, save_head  # noqa: E402
from specgauge.targets.lean import LeanTarget  # noqa: E402
from specgauge.offline.replay import MethodReplay, MethodSpec, ReplayError  # noqa: E402

pytestmark = pytest.mark.skipif(not models.available(), reason="shipped tiny target missing")


@pytest.fixture(scope="module")
def target():  # type: ignore[no-untyped-def]
    return LeanTarget.open(models.target_dir())


@pytest.fixture(scope="module")
def head_dir(tmp_path_factory: pytest.TempPathFactory, target) -> Path:  # type: ignore[no-untyped-def]
    """A random 2-layer head (non-trivial norms), saved in float32 so the loaded head is the same head."""
    c = dflash_config(target, num_layers=2, intermediate_size=128, target_layer_ids=[0, 1, 2], mask_token_id=3)
    head = new_head(c, target, seed=5)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    return save_head(head, tmp_path_factory.mktemp("dflash") / "head", target.num_layers, dtype=torch.float32,
                     target_model=str(models.target_dir()), num_target_layers=4)


def _sample(n: int = 3, max_out: int = 24) -> list[tuple[list[int], list[int]]]:
    from specgauge.workload.samples import sample_logged_path

    rows = [json.loads(x) for x in sample_logged_path().read_text(encoding="utf-8").splitlines()][:n]
    return [(r["response"]["prompt_token_ids"], r["response"]["output_token_ids"][:max_out]) for r in rows]


def test_the_engine_proposer_drafts_what_the_replay_drafts_at_every_step_start(head_dir: Path, target) -> None:  # type: ignore[no-untyped-def]
    k = 4
    d = make_drafter("dflash", model=str(head_dir), target_model=target)
    for i, (p, o) in enumerate(_sample()):
        want = d.block_drafts(p, o, k)
        seq = p + o
        hid = target.run(seq[:-1], d.hidden_layers).flat()
        rid = f"r{i}"
        d.begin(rid, p)
        d.observe_hidden(rid, hid[: len(p)])  # the prefill: every prompt position
        for j in range(1, len(o)):
            if j > 1:  # one more verified position per step (accepted none), as the engine feeds it
                d.observe_hidden(rid, hid[len(p) + j - 2 : len(p) + j - 1])
            got = d.propose(rid, seq[: len(p) + j], k)
            assert got == want[j].tolist(), (i, j)
        d.end(rid, o)


def test_the_block_depends_on_k_so_each_k_is_its_own_replay(head_dir: Path, target) -> None:  # type: ignore[no-untyped-def]
    assert not offers_whole_output("dflash") and not is_stateful("dflash")
    d = make_drafter("dflash", model=str(head_dir), target_model=target)
    p, o = _sample(1, 40)[0]
    assert d.block_drafts(p, o, 2).shape == (len(o), 2)
    # non-causal: the later masks of a longer block change the earlier drafts' logits (a random head's
    # top token rarely moves, so compare the logits); a causal block's first two do not move at all
    head = d.head
    with torch.inference_mode():
        seq = p + o
        hid = d._target_pass(seq)
        ctx = head.context(hid, torch.arange(hid.shape[0]))
        a = torch.arange(len(p), len(p) + 8)
        mask = torch.arange(hid.shape[0])[None, :] < a[:, None]
        anchors = torch.tensor(seq)[a]
        short, long = head.block(anchors, a, 2, ctx, mask), head.block(anchors, a, 6, ctx, mask)
        assert (short - long[:, :2]).abs().max().item() > 1e-3
        head.causal = True
        try:
            cs, cl = head.block(anchors, a, 2, ctx, mask), head.block(anchors, a, 6, ctx, mask)
        finally:
            head.causal = False
        assert torch.allclose(cs, cl[:, :2], atol=1e-5)
    mr = MethodReplay(MethodSpec.parse(f"dflash:{head_dir}"), [2, 6], target=str(models.target_dir()))
    tr = mr.traces("r", "test", p, o)
    for k in (2, 6):
        want = trace_from_runs(d.runs_at(p, o, k), k)
        assert tr[k].drafted.tolist() == want.drafted.tolist() and tr[k].accepted.tolist() == want.accepted.tolist()


def test_runs_count_the_leading_drafts_the_output_continues_with(head_dir: Path, target) -> None:  # type: ignore[no-untyped-def]
    d = make_drafter("dflash", model=str(head_dir), target_model=target)
    p, o = _sample(1, 30)[0]
    k = 3
    drafts, runs = d.block_drafts(p, o, k), d.runs_at(p, o, k)
    # an output that continues with the block's own drafts at step 5 accepts all of them there
    forced = o[:5] + drafts[5].tolist() + o[5 + k:]
    assert d.runs_at(p, forced, k)[5] == k
    for j in range(1, len(o)):
        a = 0
        while a < k and j + a < len(o) and drafts[j, a] == o[j + a]:
            a += 1
        assert runs[j] == a


def test_the_checkpoint_is_vllms_dflash_format_and_round_trips(head_dir: Path, target) -> None:  # type: ignore[no-untyped-def]
    cfg = json.loads((head_dir / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"] == {"mask_token_id": 3, "target_layer_ids": [0, 1, 2], "block_size": 8}
    assert cfg["is_causal"] is False and cfg["num_target_layers"] == 4
    sd = load_file(str(head_dir / "model.safetensors"))
    assert {"fc.weight", "hidden_norm.weight", "norm.weight", "layers.1.self_attn.q_norm.weight",
            "layers.0.self_attn.k_proj.weight", "layers.0.mlp.gate_proj.weight", "layers.0.input_layernorm.weight"} <= set(sd)
    assert not any("embed" in n or "lm_head" in n for n in sd)  # shared with the target, as vLLM shares them
    assert sd["fc.weight"].shape == (256, 3 * 256)
    h = load_head(head_dir, target)
    assert h.spec.aux_layer_ids == (1, 2, 3)  # vLLM reads DFlash layer i's output as auxiliary layer i + 1
    # a checkpoint whose names carry vLLM's "model." prefix loads to the same head
    from safetensors.torch import save_file

    other = head_dir.parent / "prefixed"
    other.mkdir(exist_ok=True)
    save_file({f"model.{n}": t for n, t in sd.items()}, str(other / "model.safetensors"))
    (other / "config.json").write_text(json.dumps(cfg))
    h2 = load_head(other, target)
    for (n, a), (_, b) in zip(h.state_dict().items(), h2.state_dict().items(), strict=True):
        assert torch.equal(a, b), n


def _broken(head_dir: Path, tmp_path: Path, **changes: object) -> Path:
    out = tmp_path / "broken"
    out.mkdir()
    cfg = json.loads((head_dir / "config.json").read_text())
    for k, v in changes.items():
        if k == "dflash_config":
            cfg["dflash_config"] = {**cfg["dflash_config"], **v}  # type: ignore[dict-item]
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))
    (out / "model.safetensors").write_bytes((head_dir / "model.safetensors").read_bytes())
    return out


@pytest.mark.parametrize(("changes", "needle"), [
    ({"architectures": ["DFlash2DraftModel"]}, "DFlash2"),
    ({"dflash_config": {"target_layer_ids": [0, 1, 7]}}, "7 is not a layer of the target"),
    ({"dflash_config": {"mask_token_id": 99999}}, "mask_token_id 99999"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding-window"),
    ({"vocab_size": 1000}, "vocab_size 1000"),
])
def test_a_broken_head_fails_with_the_reason(head_dir: Path, tmp_path: Path, target, changes: dict, needle: str) -> None:  # type: ignore[no-untyped-def]
    bad = _broken(head_dir, tmp_path, **changes)
    with pytest.raises(HeadLoadError, match=needle) as e:
        load_head(bad, target)
    assert str(bad) in str(e.value) and "\n" not in str(e.value)


def test_simulate_names_the_method_when_the_head_is_unusable(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ReplayError, match=r"--method dflash:.*'LlamaForCausalLM'.* is no head this tool reads"):
        MethodReplay(MethodSpec.parse(f"dflash:{tmp_path}"), [2], target=str(models.target_dir()))
    with pytest.raises(ReplayError, match="no such directory"):
        MethodSpec.parse("dflash:/no/such/head")


def test_a_sequence_past_the_model_length_is_refused(head_dir: Path, target) -> None:  # type: ignore[no-untyped-def]
    d = make_drafter("dflash", model=str(head_dir), target_model=target, max_model_len=16, num_speculative_tokens=2)
    d.begin("r", list(range(10, 26)))
    d.observe_hidden("r", torch.zeros(16, 3 * 256))
    with pytest.raises(ValueError, match="longer than max_model_len"):
        d.propose("r", list(range(10, 27)), 4)
    assert np.array_equal(d.runs_at([5], [7], 2), [0])  # one output token: no decode step
