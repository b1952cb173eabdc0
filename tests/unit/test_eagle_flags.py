"""Server flags for the hidden-state methods: EAGLE-3 names its head, MTP is the target's own layers."""

from __future__ import annotations

import json
import shlex

from specgauge.recommend.flags import render_flags


def test_eagle3_flags_name_the_head() -> None:
    f = render_flags({"method": "eagle3", "model": "heads/tiny-eagle3", "num_speculative_tokens": 3}, "tiny-target")
    assert json.loads(shlex.split(f.vllm)[-1]) == {"method": "eagle3", "model": "heads/tiny-eagle3", "num_speculative_tokens": 3}
    assert f.sglang is not None and "--speculative-algorithm EAGLE3 --speculative-draft-model-path heads/tiny-eagle3" in f.sglang
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in f.sglang
    assert f.llamacpp is None


def test_mtp_flags_read_the_targets_own_layers() -> None:
    f = render_flags({"method": "mtp", "model": "heads/tiny-mtp", "num_speculative_tokens": 2}, "deepseek-ai/DeepSeek-V3")
    assert f.vllm_speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert json.loads(shlex.split(f.vllm)[-1]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert f.sglang is not None and "--speculative-algorithm EAGLE --speculative-num-steps 2" in f.sglang
    assert "draft-model-path" not in f.sglang and any("MTP" in n for n in f.sglang_notes)
