"""Scale-out on Ray: replay throughput with 1 and 2 workers, load-generation capacity per worker.

Prints figures and ratios, asserts nothing (timing belongs here, not in tests). Both sides run in one
invocation, alternated, medians of paired runs:

1. replay: ``simulate --ray`` over the sample log copied into ``--files`` files (ids made unique),
   n-gram + suffix (k 1..8), suffix partitioned by segment, on a local Ray cluster of 1 CPU and one of
   2 CPUs (both started here, each run on a warm connection): by default one node each, so both
   sides run the same Ray processes (one raylet, one object store) and only the worker count
   differs; ``--topology nodes``: 1 node × 1 CPU vs 2 nodes × 1 CPU, where the second worker also
   brings a second raylet and object store onto the same 2 cores. Figure: decode
   positions replayed per second (output tokens × (method, k) pairs / wall time), and the 1→2 ratio
   (goal ≥ 1.7 on 2 free cores). The single-process replay of the same files is printed beside them.
2. load generation: ``bench --ray-workers 1`` and ``2`` against the scripted server (its own process,
   2000-token streams, one token per chunk): chunks per CPU-second of each load-generator actor (its
   process CPU time while sending), the capacity of one worker on one core.

The replay needs enough work to amortise Ray Data's fixed start of each run (a few seconds): the
default 8 copies (1920 requests, ~5 M positions) take ~30 s per single-core run on a quiet machine.
The machine's load average is printed before and after: on a shared machine the ratio means little.

    python benchmarks/scale.py [--files 8] [--pairs 2] [--topology cpus|nodes] [--requests 24] [--tokens 2000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SERVER = textwrap.dedent(
    """
    import sys
    from specgauge.testing.fakeserver import FakeServer
    with FakeServer(spec=False) as s:
        print(s.port, flush=True)
        sys.stdin.read()
    """
)


def make_workload(tmp: Path, files: int) -> list[Path]:
    from specgauge.workload.samples import sample_logged_path

    lines = sample_logged_path().read_text().splitlines()
    out = []
    for f in range(files):
        p = tmp / f"log{f}.jsonl"
        with open(p, "w") as fh:
            for line in lines:
                rec = json.loads(line)
                rec["request"]["id"] = f"{rec['request']['id']}~f{f}"
                fh.write(json.dumps(rec) + "\n")
        out.append(p)
    return out


def start_cluster(workers: int, topology: str = "nodes"):
    """A local cluster of ``workers`` CPUs: one node with that many (``cpus``: the same Ray processes,
    one raylet and object store, whatever the count) or that many nodes of 1 CPU (``nodes``: each
    added worker also adds a raylet and an object store, on the same 2 cores, and blocks cross between
    object stores)."""
    from ray.cluster_utils import Cluster

    mem = 150 * 1024 * 1024
    head = workers if topology == "cpus" else 1
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": head, "object_store_memory": mem, "include_dashboard": False})
    for _ in range(workers - head):
        c.add_node(num_cpus=1, object_store_memory=mem)
    return c


def replay_bench(args: argparse.Namespace, tmp: Path) -> None:
    import ray

    from specgauge.api import resolve_tokenizer
    from specgauge.scale.replay import RayReplayConfig, simulate_on_ray
    from specgauge.simulate.run import SimulateConfig, simulate

    paths = make_workload(tmp, args.files)
    tok = resolve_tokenizer(None)
    cfg = SimulateConfig(workload=paths, methods=["ngram", "suffix"], ks=list(range(1, 9)), partition_by="segment")
    t0 = time.perf_counter()
    ref = simulate(cfg, tok)
    single_s = time.perf_counter() - t0
    positions = ref.overall.summaries[0].output_tokens * len(cfg.methods) * len(cfg.ks)
    print(f"replay: {ref.requests_replayed} requests, {positions:,} (position, method, k) replays per run")
    print(f"  single process (no Ray):       {single_s:7.2f} s   {positions / single_s:12,.0f} positions/s")

    clusters = {1: start_cluster(1, args.topology), 2: start_cluster(2, args.topology)}
    times: dict[int, list[float]] = {1: [], 2: []}
    rcfg = RayReplayConfig(block_tokens=1 << 15)
    try:
        for pair in range(args.pairs + 1):  # pair 0 warms each connection's worker processes
            for w in (1, 2) if pair % 2 == 0 else (2, 1):
                ray.init(address=clusters[w].address, log_to_driver=False)
                try:
                    res, rep = simulate_on_ray(cfg, tok, rcfg)
                finally:
                    ray.shutdown()
                if res.model_dump() != ref.model_dump():
                    print(f"  MISMATCH: {w}-worker result differs from the single-process one")
                if pair:
                    times[w].append(rep.seconds)
    finally:
        for c in clusters.values():
            c.shutdown()
    ratios = [a / b for a, b in zip(times[1], times[2])]
    for w in (1, 2):
        m = statistics.median(times[w])
        print(f"  Ray, {w} worker(s) (median of {len(times[w])}): {m:7.2f} s   {positions / m:12,.0f} positions/s   "
              f"({', '.join(f'{t:.2f}' for t in times[w])})")
    print(f"  1 -> 2 workers speed-up, {args.topology} topology (median of paired ratios): {statistics.median(ratios):.2f}x   "
          f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)}; goal >= 1.7 on 2 free cores)")


def load_bench(args: argparse.Namespace, tmp: Path) -> None:
    import ray

    from specgauge.bench import BenchConfig, run_bench

    w = tmp / "load.jsonl"
    w.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"tokens:{args.tokens} per:1", "max_tokens": args.tokens})
                         + "\n" for i in range(args.requests)))
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline())  # type: ignore[union-attr]
    cluster = start_cluster(2)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        print(f"load generation: {args.requests} streams of {args.tokens} tokens (1 per chunk), concurrency {args.concurrency}, scripted server")
        for workers in (1, 2, 1, 2):
            out = tmp / f"load-{workers}-{time.monotonic_ns()}"
            res = run_bench(BenchConfig(base_url=f"http://127.0.0.1:{port}", workload=[w], output_dir=out, ray_workers=workers,
                                        max_concurrency=args.concurrency, progress=False, dialect="vllm"))
            info = json.loads((out / "run.json").read_text())["sessions"][-1]["ray"]["per_worker"]
            recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
            chunks = {i["worker"]: 0 for i in info}
            for r in recs:
                chunks[r["extra"]["loadgen_worker"]] += len(r["chunks"])
            per = [chunks[i["worker"]] / i["cpu_s"] for i in info if i["cpu_s"]]
            total = sum(chunks.values()) / res.summary["duration"]
            print(f"  {workers} worker(s): {total:10,.0f} chunks/s received in all; per worker "
                  f"{', '.join(f'{p:,.0f}' for p in per)} chunks per CPU-second "
                  f"(failed {res.summary['failed']}, duration {res.summary['duration']:.2f} s)")
    finally:
        ray.shutdown()
        cluster.shutdown()
        srv.stdin.close()  # type: ignore[union-attr]
        srv.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8, help="copies of the sample log, one file each")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--topology", choices=("cpus", "nodes"), default="cpus",
                    help="replay cluster: 1 node of 1 vs 2 CPUs (same Ray processes on both sides), or 1 vs 2 nodes of 1 CPU")
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="specgauge-scale-") as d:
        if not args.skip_replay:
            replay_bench(args, Path(d))
        if not args.skip_load:
            load_bench(args, Path(d))
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
