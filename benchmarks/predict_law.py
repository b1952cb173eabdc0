"""Is the step-cost law's form right for the embedded engine? Per-step truth, in one process, interleaved.

Every (config, concurrency) runs its own in-process ``Engine`` closed loop over the same logged sample
requests; the loops are stepped round-robin, one step each, so whatever else the machine does falls on
all of them alike. Each step is recorded with exactly what it did (decode batch, drafted tokens per
request, context, prefills) and its time: the thread's CPU time (``time.thread_time``, torch on one
thread) and wall time. The law (``specgauge.predict.law``) is fitted on the calibration configs (off,
ngram k=4, suffix k=4, draft model k=2 at concurrency 1 and 4) for both verification shapes, then
predicts every config's total time; printed per cell: predicted / measured total and the implied
speedup over no speculation at the same concurrency (output tokens per second, candidate over
baseline, on the same requests) with its error.

This isolates the law from HTTP and client effects (``benchmarks/predict.py`` measures end to end).
On a busy machine use the CPU-time table: wall time of a long step grows faster than its CPU time when
the scheduler preempts it, which no per-step law can capture.

    python benchmarks/predict_law.py [--requests 24] [--max-tokens 96] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np
import torch

from specgauge.config import SpeculativeConfig
from specgauge.engine.core import Engine
from specgauge.engine.sampling import SamplingParams
from specgauge.models import draft_dir, target_dir
from specgauge.predict.law import CORE, SHAPES, StepTable, drafter_params
from specgauge.predict.lsq import solve
from specgauge.workload.samples import sample_logged_path

NGRAM = {"prompt_lookup_min": 2, "prompt_lookup_max": 5}


def configs() -> dict[str, tuple[dict[str, Any] | None, str | None, int]]:
    d = str(draft_dir())
    out: dict[str, tuple[dict[str, Any] | None, str | None, int]] = {"off": (None, None, 0)}
    for k in (2, 4, 8):
        out[f"ngram-k{k}"] = ({"method": "ngram", "num_speculative_tokens": k, **NGRAM}, "ngram", k)
        out[f"suffix-k{k}"] = ({"method": "suffix", "num_speculative_tokens": k}, "suffix", k)
    for k in (1, 2, 3):
        out[f"draft_model-k{k}"] = ({"model": d, "num_speculative_tokens": k}, "draft_model", k)
    return out


CALIBRATION = ("off", "ngram-k4", "suffix-k4", "draft_model-k2")


class Loop:
    """One closed loop (``concurrency`` requests in flight, the next one added when one finishes)."""

    def __init__(self, spec: dict[str, Any] | None, concurrency: int, items: list[dict[str, Any]], max_tokens: int) -> None:
        self.eng = Engine(target_dir(), SpeculativeConfig.model_validate(spec) if spec else None, max_batch=max(8, concurrency))
        self.items, self.max_tokens = items, max_tokens
        self.ctx: dict[str, int] = {}
        self.nxt = 0
        self.rows: list[tuple[float, ...]] = []
        for _ in range(concurrency):
            self.add()

    def add(self) -> None:
        it = self.items[self.nxt]
        p, r = it["response"]["prompt_token_ids"], it["request"]
        self.eng.add_request(str(self.nxt), p, SamplingParams(temperature=r.get("temperature") or 0.0, top_p=r.get("top_p") or 1.0,
                                                             seed=r.get("seed"), max_tokens=min(r["max_tokens"], self.max_tokens)))
        self.ctx[str(self.nxt)] = len(p)
        self.nxt += 1

    def step(self) -> None:
        before = {rid: self.ctx[rid] for rid in self.eng._running}
        t, w = time.thread_time(), time.perf_counter()
        outs = self.eng.step()
        cpu, wall = time.thread_time() - t, time.perf_counter() - w
        dec = [o for o in outs if o.request_id in before]
        pre = [o for o in outs if o.request_id not in before]
        d = [o.num_drafted for o in dec]
        self.rows.append((len(dec), sum(d), max(d, default=0), sum(before[o.request_id] for o in dec),
                          sum(o.num_prompt_tokens for o in pre), len(pre), cpu, wall, sum(len(o.new_token_ids) for o in outs),
                          sum(len(o.new_token_ids) for o in dec)))
        for o in outs:
            self.ctx[o.request_id] = o.num_prompt_tokens + o.num_output_tokens
            if o.finished and self.nxt < len(self.items):
                self.add()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    items = [json.loads(x) for x in sample_logged_path().read_text(encoding="utf-8").splitlines()][: a.requests]
    cfgs = configs()
    concs = [int(c) for c in a.concurrency.split(",")]
    loops = {(name, c): Loop(spec, c, items, a.max_tokens) for name, (spec, _, _) in cfgs.items() for c in concs}
    t0 = time.monotonic()
    while True:
        live = [lp for lp in loops.values() if lp.eng.has_unfinished()]
        if not live:
            break
        for lp in live:
            lp.step()
    print(f"{sum(len(lp.rows) for lp in loops.values())} steps in {time.monotonic() - t0:.0f} s "
          f"({len(loops)} loops, {a.requests} requests of at most {a.max_tokens} tokens each)")
    names = [*CORE, *(p for m in ("ngram", "suffix", "draft_model") for p in drafter_params(m))]

    def table(key: tuple[str, int]) -> tuple[StepTable, np.ndarray]:
        r = np.asarray(loops[key].rows, dtype=float)
        _, m, k = cfgs[key[0]]
        return StepTable(r[:, 0], r[:, 1], r[:, 2], r[:, 3], r[:, 4], r[:, 5], m, k, r[:, 9]), r

    cal = [(n, c) for n in CALIBRATION for c in concs if c in (1, 4)]
    for col, clock in ((6, "CPU time"), (7, "wall time")):
        for shape in SHAPES:
            X = np.vstack([table(k)[0].features(shape, names) for k in cal])
            y = np.concatenate([table(k)[1][:, col] for k in cal])
            coef = solve(X, y, np.ones(len(y)))
            rmse = float(np.sqrt(np.mean((y - X @ coef) ** 2)))
            print(f"\n== {clock}, {shape}: per-step RMSE {rmse * 1e3:.3f} ms; law (ms): "
                  + ", ".join(f"{n}={v * 1e3:.3g}" for n, v in zip(names, coef) if v > 0))
            errs = []
            for key in sorted(loops):
                if key[0] == "off":
                    continue
                tb, rb = table(("off", key[1]))
                tc, rc = table(key)
                pb, pc = (tb.features(shape, names) @ coef).sum(), (tc.features(shape, names) @ coef).sum()
                tok_b, tok_c = rb[:, 8].sum(), rc[:, 8].sum()  # sampled requests' outputs differ under speculation
                sp_pred = (tok_c / pc) / (tok_b / pb)
                sp_meas = (tok_c / rc[:, col].sum()) / (tok_b / rb[:, col].sum())
                err = sp_pred / sp_meas - 1
                if key not in cal:
                    errs.append(abs(err))
                print(f"  {key[0]:<16}{key[1]:>3}  total pred/meas {pc / rc[:, col].sum():.3f}  speedup predicted {sp_pred:.3f} "
                      f"measured {sp_meas:.3f}  error {100 * err:+.1f}%{'  (calibration cell)' if key in cal else ''}")
            print(f"  cells not calibrated on: median |error| {100 * statistics.median(errs):.1f}%, max {100 * max(errs):.1f}%")


if __name__ == "__main__":
    main()
