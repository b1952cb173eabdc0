"""The shipped hidden-state heads: small, in vLLM's EAGLE-3 checkpoint format, trained (they draft
better than chance), and their replay's first position equals the teacher-forced figure."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from specgauge import models  # noqa: E402
from specgauge.drafters.base import make_drafter, trace_from_matches, trace_from_runs  # noqa: E402

pytestmark = pytest.mark.skipif(not (models.available() and models.heads_available()), reason="shipped heads missing")
HEAD_BYTES = 5 * 1024 * 1024


def test_heads_are_small_and_in_vllms_format() -> None:
    for d in (models.eagle3_dir(), models.mtp_dir()):
        assert 0 < (d / "model.safetensors").stat().st_size <= HEAD_BYTES
    cfg = json.loads((models.eagle3_dir() / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 4]
    sd = load_file(str(models.eagle3_dir() / "model.safetensors"))
    assert {"fc.weight", "d2t", "t2d", "lm_head.weight", "norm.weight", "midlayer.hidden_norm.weight",
            "midlayer.self_attn.q_proj.weight"} <= set(sd)
    assert sd["fc.weight"].shape == (256, 3 * 256) and sd["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * 256
    v = cfg["draft_vocab_size"]
    tgt = torch.arange(v) + sd["d2t"]
    assert bool((tgt[1:] > tgt[:-1]).all()) and int(sd["t2d"].sum()) == v and bool(sd["t2d"][tgt].all())


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_trained_heads_draft_the_sample(kind: str) -> None:
    rows = [json.loads(x) for x in (models.target_dir().parent.parent / "workload/samples/sample_logged.jsonl")
            .read_text(encoding="utf-8").splitlines()]
    rows = [r["response"] for r in rows if r["request"].get("temperature") == 0.0][:6]
    d = make_drafter(kind, model=str(models.eagle3_dir() if kind == "eagle3" else models.mtp_dir()))  # target from config
    drafted = accepted = tf_acc = 0
    for r in rows:
        p, o = r["prompt_token_ids"], r["output_token_ids"][:48]
        runs, tf = d.replay_arrays(p, o, 1)
        t1, f1 = trace_from_runs(runs, 1), trace_from_matches(tf, 1)
        assert t1.accepted.tolist() == f1.accepted.tolist()  # one draft token: the chain is teacher-forced
        drafted += int(t1.drafted.sum())
        accepted += int(t1.accepted.sum())
        tf_acc += int(f1.accepted.sum())
    assert accepted / drafted > 0.1  # a random head drafts a 4096-token vocabulary right ~0 % of the time
