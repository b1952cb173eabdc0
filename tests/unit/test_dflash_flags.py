"""Server flags for DFlash: vLLM 0.32's method name and its head, SGLang's DFLASH algorithm with its block
(the anchor and K masks), and llama.cpp, which has no block-parallel drafter, says so instead of a flag."""

from __future__ import annotations

import json
import shlex

from specgauge.recommend.flags import render_flags


def test_dflash_flags_name_the_head_and_the_block() -> None:
    spec = {"method": "dflash", "model": "heads/tiny-dflash", "num_speculative_tokens": 4}
    f = render_flags(spec, "tiny-target")
    assert json.loads(shlex.split(f.vllm)[-1]) == spec and f.vllm_speculative_config == spec
    assert f.sglang is not None
    args = shlex.split(f.sglang)
    assert args[args.index("--speculative-algorithm") + 1] == "DFLASH"
    assert args[args.index("--speculative-draft-model-path") + 1] == "heads/tiny-dflash"
    assert args[args.index("--speculative-num-draft-tokens") + 1] == "5"  # block = anchor + 4 masks
    assert "--speculative-eagle-topk" not in args and "--speculative-num-steps" not in args
    assert f.llamacpp is None and len(f.llamacpp_notes) == 1 and "dflash" in f.llamacpp_notes[0]
