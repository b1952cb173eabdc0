"""Run vLLM's own NgramProposer over cases read as JSON on stdin; print proposals as JSON.

Runs inside the vLLM venv (scripts/install_vllm_cpu.sh), not in specgauge's. Input:
{"cases": [{"tokens": [...], "min_n": 2, "max_n": 4, "k": 3, "max_model_len": 64}, ...]}
Output: {"vllm_version": "...", "proposals": [[...], ...]}

The proposer is built without a VllmConfig (its __init__ only copies four config values and
allocates buffers), then its real ``propose`` -> ``batch_propose`` -> numba kernel path runs.
"""

import json
import sys

import numpy as np
import vllm
from vllm.v1.spec_decode.ngram_proposer import NgramProposer


def make_proposer(min_n: int, max_n: int, k: int, max_model_len: int) -> NgramProposer:
    p = object.__new__(NgramProposer)
    p.min_n, p.max_n, p.k, p.max_model_len = min_n, max_n, k, max_model_len
    p.valid_ngram_draft = np.zeros((1, k), dtype=np.int32)
    p.valid_ngram_num_drafts = np.zeros(1, dtype=np.int32)
    p.num_tokens_threshold = 8192
    p.num_numba_thread_available = 1
    return p


def main() -> None:
    cases = json.load(sys.stdin)["cases"]
    out = []
    for c in cases:
        tokens = np.asarray(c["tokens"], dtype=np.int32)
        p = make_proposer(c["min_n"], c["max_n"], c["k"], c["max_model_len"])
        buf = np.zeros((1, max(1, len(tokens))), dtype=np.int32)
        buf[0, : len(tokens)] = tokens
        # one sampled token marks the request as decoding (an empty list skips it, as after a prefill chunk)
        draft = p.propose(c["k"], [[1]], np.array([len(tokens)], dtype=np.int32), buf)[0]
        out.append([int(t) for t in draft])
    json.dump({"vllm_version": vllm.__version__, "proposals": out}, sys.stdout)


if __name__ == "__main__":
    main()
