"""The shipped DFlash head: small, in vLLM's / z-lab's DFlash checkpoint format, trained (it drafts the
held-out sample far better than chance), and its replayed per-position acceptance falls along the block."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from specgauge import models  # noqa: E402
from specgauge.drafters.base import make_drafter, trace_from_runs  # noqa: E402

pytestmark = pytest.mark.skipif(not (models.available() and models.dflash_available()), reason="shipped DFlash head missing")
HEAD_BYTES = 4 * 1024 * 1024


def test_the_head_is_small_and_in_vllms_dflash_format() -> None:
    d = models.dflash_dir()
    assert 0 < (d / "model.safetensors").stat().st_size <= HEAD_BYTES
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"]["target_layer_ids"] == [0, 1, 2] and cfg["dflash_config"]["mask_token_id"] == 3
    assert cfg["target_model"] == "tiny-target" and cfg["num_target_layers"] == 4
    sd = load_file(str(d / "model.safetensors"))
    assert sd["fc.weight"].shape == (256, 3 * 256) and "layers.0.self_attn.q_norm.weight" in sd
    assert not any("embed" in n or "lm_head" in n for n in sd)


def test_the_trained_head_drafts_the_sample_and_acceptance_falls_along_the_block() -> None:
    rows = [json.loads(x) for x in models.target_dir().parent.parent.joinpath("workload/samples/sample_logged.jsonl")
            .read_text(encoding="utf-8").splitlines()]
    rows = [r["response"] for r in rows if r["request"].get("temperature") == 0.0][:8]
    d = make_drafter("dflash", model=str(models.dflash_dir()))  # the target from the head's config
    k = 6
    steps, per_pos = 0, np.zeros(k)
    for r in rows:
        tr = trace_from_runs(d.runs_at(r["prompt_token_ids"], r["output_token_ids"][:48], k), k)
        steps += len(tr.drafted)
        per_pos += (tr.accepted[:, None] > np.arange(k)[None, :]).sum(0)
    rate = per_pos / steps
    assert rate[0] > 0.08  # shipped head: 12 % here (19 % over the 40 held-out requests); a random head ~0.02 % (1 in 4096)
    assert rate[-1] < rate[0] / 2  # the block's later positions collapse
