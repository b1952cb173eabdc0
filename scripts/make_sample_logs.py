"""Fill the built-in sample workload's logged responses from the shipped tiny target model.

Each request is run through the embedded engine (target only: speculation changes no output) at the
request's own temperature, top_p, top_k, seed and max_tokens, with the prompt rendered by the
target's chat template (``specgauge.workload.tokenizer.HFTokenizer``, the same ids the server
builds). Written as ``{"request": <the sample line>, "response": {...}}`` pairs with token ids, so
offline replay is exact and live runs can be compared on the same data.

Usage: python scripts/make_sample_logs.py [--out src/specgauge/workload/samples/sample_logged.jsonl]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from specgauge.engine.core import Engine
from specgauge.engine.sampling import SamplingParams
from specgauge.models import target_dir
from specgauge.workload.loaders import load_workload
from specgauge.workload.samples import sample_path
from specgauge.workload.tokenizer import HFTokenizer

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "src" / "specgauge" / "workload" / "samples" / "sample_logged.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tdir = target_dir()
    tok = HFTokenizer(tdir)
    items = load_workload([sample_path()])
    raw = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(raw) == len(items)
    engine = Engine(tdir, None, max_batch=a.max_batch, max_model_len=2048)
    prompts: dict[str, list[int]] = {}
    for it in items:
        r = it.request
        ids = tok.encode_request(r)
        prompts[r.id] = ids
        engine.add_request(
            r.id, ids,
            SamplingParams(
                max_tokens=r.max_tokens or 256,
                temperature=1.0 if r.temperature is None else r.temperature,
                top_p=r.top_p or 1.0,
                top_k=max(0, r.top_k or 0),
                seed=r.seed,
            ),
        )
    outs: dict[str, list[int]] = {r: [] for r in prompts}
    reasons: dict[str, str | None] = {}
    t0 = time.perf_counter()
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] += o.new_token_ids
            if o.finished:
                reasons[o.request_id] = o.finish_reason
                print(f"\r{len(reasons)}/{len(prompts)} done, {sum(map(len, outs.values()))} tokens, "
                      f"{time.perf_counter() - t0:.0f} s", end="", flush=True)
    print()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        for line, it in zip(raw, items, strict=True):
            rid = it.request.id
            ids = outs[rid]
            text = tok.decode([t for t in ids if t not in engine.eos])
            resp = {
                "text": text, "output_token_ids": ids, "prompt_token_ids": prompts[rid], "finish_reason": reasons[rid],
                "usage": {"prompt_tokens": len(prompts[rid]), "completion_tokens": len(ids),
                          "total_tokens": len(prompts[rid]) + len(ids)},
            }
            f.write(json.dumps({"request": line, "response": resp}, ensure_ascii=False) + "\n")
    print(f"wrote {a.out} ({a.out.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
