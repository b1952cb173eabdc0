"""Offline replay performance: fast paths vs the step-by-step reference, in one run, ratios printed.

1. n-gram and suffix: decode positions per second of each drafter's ``replay`` fast path vs
   ``replay_by_stepping`` (one ``propose`` per step) on a synthetic log with copy structure. The fast
   path runs over the whole log (default ≥ 10 M output tokens); the reference, being slow, runs on a
   prefix of the same requests, and the traces on that prefix must be identical.
2. draft model: one teacher-forced pass (all k at once) vs an autoregressive drafting loop, same
   numbers required.
3. memory: ``specgauge simulate`` on the log file streamed from disk vs on a 10x smaller file:
   peak RSS should stay flat while the input grows.

Usage: python benchmarks/replay.py [--tokens 10000000] [--ref-requests 40] [--k 4] [--skip-memory]
(a quick look at the ngram ratio: --tokens 300000 --skip-memory)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from specgauge.drafters.base import make_drafter, replay_by_stepping


def synthetic_requests(n_tokens: int, seed: int = 0, prompt_len: int = 400, out_len: int = 600):
    """Token sequences with copy structure: outputs quote prompt spans and repeat themselves."""
    rng = np.random.default_rng(seed)
    made = 0
    i = 0
    while made < n_tokens:
        prompt = rng.integers(0, 2000, prompt_len)
        out = []
        while len(out) < out_len:
            r = rng.random()
            if r < 0.5:  # quote the prompt
                s = int(rng.integers(0, prompt_len - 20))
                out.extend(prompt[s : s + int(rng.integers(4, 20))].tolist())
            elif r < 0.7 and len(out) > 30:  # repeat own output
                s = int(rng.integers(0, len(out) - 10))
                out.extend(out[s : s + int(rng.integers(3, 10))])
            else:
                out.extend(rng.integers(0, 2000, int(rng.integers(1, 6))).tolist())
        out = out[:out_len]
        yield f"r{i}", prompt.tolist(), out
        made += len(out)
        i += 1


def bench_model_free(kind: str, reqs: list, k: int, ref_requests: int) -> None:
    fast_d = make_drafter(kind, num_speculative_tokens=k)
    if not hasattr(fast_d, "replay"):
        print(f"{kind}: no fast replay path; skipped")
        return
    t0 = time.perf_counter()
    fast_traces = [fast_d.replay(rid, p, o, k) for rid, p, o in reqs]
    t_fast = time.perf_counter() - t0
    n_fast = sum(len(o) for _, _, o in reqs)
    # the reference is the plain Python drafter stepped once per proposal (for suffix, not the
    # native ArcticInference backend the fast path may use)
    ref_d = make_drafter(kind, num_speculative_tokens=k, **({"backend": "python"} if kind == "suffix" else {}))
    sub = reqs[:ref_requests]
    t0 = time.perf_counter()
    ref_traces = [replay_by_stepping(ref_d, rid, p, o, k) for rid, p, o in sub]
    t_ref = time.perf_counter() - t0
    n_ref = sum(len(o) for _, _, o in sub)
    same = all(
        a.drafted.tolist() == b.drafted.tolist() and a.accepted.tolist() == b.accepted.tolist()
        for a, b in zip(fast_traces[: len(sub)], ref_traces)
    )
    acc = sum(int(t.accepted.sum()) for t in fast_traces)
    drafted = sum(int(t.drafted.sum()) for t in fast_traces)
    fast_rate, ref_rate = n_fast / t_fast, n_ref / t_ref
    print(f"{kind:>6} k={k}: fast {fast_rate:12,.0f} positions/s over {n_fast:,} tokens | "
          f"reference {ref_rate:10,.0f} positions/s over {n_ref:,} | ratio {fast_rate / ref_rate:6.1f}x"
          f"{' (goal >= 50x)' if kind == 'ngram' else ''} | "
          f"identical on the shared prefix: {same} | acceptance {acc / max(drafted, 1):.3f}")


def bench_draft_model(k: int, n_requests: int) -> None:
    from specgauge.drafters.draft_model import DraftModelDrafter
    from specgauge.models import draft_dir
    from specgauge.simulate.run import trace_from_matches

    d = Path(draft_dir())
    if not (d / "config.json").exists():
        print("draft model: shipped draft model missing; skipped")
        return
    model = DraftModelDrafter(d, max_batch=1, max_model_len=2048)
    V = model.vocab_size
    rng = np.random.default_rng(1)
    reqs = []
    for i in range(n_requests):  # outputs from the draft's own greedy chain with deviations: real acceptance
        prompt = rng.integers(0, V, 64).tolist()
        out = []
        hist = list(prompt)
        for j in range(160):
            nxt = int(model.teacher_forced_argmax(hist[:-1], hist[-1:])[0]) if j % 9 else int(rng.integers(0, V))
            out.append(nxt)
            hist.append(nxt)
        reqs.append((f"d{i}", prompt, out))
    t0 = time.perf_counter()
    fast = []
    for _, p, o in reqs:
        match = model.teacher_forced_argmax(p, o) == np.asarray(o)
        fast.append(trace_from_matches(match, k))
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = [replay_by_stepping(DraftModelDrafter(d, max_batch=1, max_model_len=2048), rid, p, o, k) for rid, p, o in reqs]
    t_ref = time.perf_counter() - t0
    same = all(a.drafted.tolist() == b.drafted.tolist() and a.accepted.tolist() == b.accepted.tolist() for a, b in zip(fast, ref))
    n = sum(len(o) for _, _, o in reqs)
    print(f"draft_model k={k}: one teacher-forced pass {n / t_fast:10,.0f} positions/s | autoregressive drafting "
          f"{n / t_ref:8,.0f} positions/s | ratio {t_ref / t_fast:6.1f}x | identical: {same}")


def write_log(path: Path, reqs) -> int:
    n = 0
    with open(path, "w") as f:
        for rid, p, o in reqs:
            f.write(json.dumps({"request": {"id": rid, "prompt": p}, "response": {"prompt_token_ids": p, "output_token_ids": o}}) + "\n")
            n += len(o)
    return n


def peak_rss_of_simulate(log: Path) -> tuple[float, float]:
    code = (
        "import sys;from specgauge.cli import main;sys.argv=['specgauge','simulate',sys.argv[1],'--method','ngram',"
        "'--k','4','--json'];\ntry:\n main()\nexcept SystemExit:\n pass\n"
        # VmHWM, not ru_maxrss: ru_maxrss survives exec and would count this (big) parent at fork time
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0], file=sys.stderr)"
    )
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    return int(r.stderr.strip().splitlines()[-1]) / 1024, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=10_000_000)
    ap.add_argument("--ref-requests", type=int, default=40)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--draft-requests", type=int, default=8)
    ap.add_argument("--skip-memory", action="store_true", help="skip part 3 (simulate's peak RSS on big logs)")
    a = ap.parse_args()
    print(f"generating a synthetic log of {a.tokens:,} output tokens ...")
    reqs = list(synthetic_requests(a.tokens))
    for kind in ("ngram", "suffix"):
        try:
            bench_model_free(kind, reqs, a.k, a.ref_requests)
        except ValueError as e:
            print(f"{kind}: {e}")
    bench_draft_model(a.k, a.draft_requests)
    if a.skip_memory:
        return
    with tempfile.TemporaryDirectory() as d:
        big, small = Path(d) / "big.jsonl", Path(d) / "small.jsonl"
        n_big = write_log(big, reqs)
        n_small = write_log(small, reqs[: max(1, len(reqs) // 10)])
        del reqs
        rss_small, t_small = peak_rss_of_simulate(small)
        rss_big, t_big = peak_rss_of_simulate(big)
        print(f"memory: simulate on {n_small:,} tokens ({small.stat().st_size / 1e6:.0f} MB): peak RSS {rss_small:.0f} MB, {t_small:.0f} s | "
              f"on {n_big:,} tokens ({big.stat().st_size / 1e6:.0f} MB): peak RSS {rss_big:.0f} MB, {t_big:.0f} s | "
              f"RSS ratio {rss_big / rss_small:.2f} for {n_big / n_small:.0f}x the input")


if __name__ == "__main__":
    main()
