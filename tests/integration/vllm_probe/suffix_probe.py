"""Drive arctic_inference's SuffixDecodingCache as vLLM 0.32's SuffixDecodingProposer does; print drafts.

Runs inside the vLLM venv (scripts/install_vllm_cpu.sh). Input on stdin:
{"scenarios": [{"config": {"max_tree_depth": 24, "max_cached_requests": 10000, "max_spec_factor": 1.0,
                           "min_token_prob": 0.1},
                "ops": [{"op": "start", "rid": "a", "prompt": [...]},
                        {"op": "spec", "rid": "a", "new": [...], "history_len": L, "max_spec": n},
                        {"op": "stop", "rid": "a", "new": [...]}, ...]}, ...]}
Output: {"drafts": [[[...], ...] per scenario]} — one token list per "spec" op, in order.

"start": as SuffixDecodingProposer.propose does for a request it has not seen (evict a cached response
under the same id, start_request). Per "spec": add_active_response(new sampled ids), speculate on the
last max_tree_depth history tokens (an int32 ndarray slice, as vLLM passes) with max_spec tokens.
"""

import json
import sys

import numpy as np
from arctic_inference.suffix_decoding import SuffixDecodingCache


def run(scenario: dict) -> list[list[int]]:
    cfg = scenario["config"]
    cache = SuffixDecodingCache(max_tree_depth=cfg["max_tree_depth"], max_cached_requests=cfg["max_cached_requests"])
    history: dict[str, list[int]] = {}
    prompts: dict[str, list[int]] = {}
    drafts = []
    for op in scenario["ops"]:
        rid = op["rid"]
        if op["op"] == "start":
            # vLLM starts a request lazily at its first propose; the op order puts "start" there
            prompts[rid] = list(op["prompt"])
            history[rid] = list(op["prompt"])
            if rid in cache.cached_requests:
                cache.evict_cached_response(rid)
            cache.start_request(rid, np.asarray(prompts[rid], dtype=np.int32))
        elif op["op"] == "spec":
            mml = op.get("mml")
            history[rid].extend(op["new"])
            if mml is not None and len(history[rid]) >= mml:
                # SuffixDecodingProposer skips a request at max_model_len before adding its tokens
                drafts.append([])
                continue
            cache.add_active_response(rid, op["new"])
            toks = np.asarray(history[rid], dtype=np.int32)
            n = len(toks)
            start = max(0, n - cfg["max_tree_depth"])
            draft = cache.speculate(
                rid,
                toks[start:n],
                max_spec_tokens=op["max_spec"],
                max_spec_factor=cfg["max_spec_factor"],
                min_token_prob=cfg["min_token_prob"],
            )
            drafts.append([int(t) for t in draft.token_ids])
        elif op["op"] == "stop":
            # the final step's tokens reach the trees through one last propose, unless at max_model_len
            mml = op.get("mml")
            at_limit = mml is not None and len(history[rid]) + len(op["new"]) >= mml
            if op["new"] and not at_limit:
                cache.add_active_response(rid, op["new"])
            cache.stop_request(rid)
        else:
            raise ValueError(f"unknown op {op['op']!r}")
    return drafts


def main() -> None:
    scenarios = json.load(sys.stdin)["scenarios"]
    json.dump({"drafts": [run(s) for s in scenarios]}, sys.stdout)


if __name__ == "__main__":
    main()
