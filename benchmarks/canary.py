"""What the canary proxy costs: added TTFT and CPU per streamed chunk, proxied vs direct, one run.

Prints figures, asserts nothing (timing belongs here, not in tests). Three processes: the scripted
streaming server (``loadgen/fakeserver.py``, the upstream for both sides of the canary), the real
``specgauge canary`` proxy in front of it (judging, per-request records, /metrics all on, as in
production), and specgauge's own load generator here.

1. TTFT p50/p99 with ``--concurrency`` (default 32) concurrent streams, direct to the server vs
   through the proxy, in paired rounds (direct, proxied, direct, proxied, ...; the order alternates;
   both sides of a round get the same seeded Poisson arrival times, at the rate that keeps that many
   streams open — a steady state, not 32 requests fired at one instant), each round's difference
   taken, the median over rounds printed. The server waits ``--first-ms`` before its first chunk and
   ``--delay-ms`` between chunks, like a decoding model. Goal: p99 added < 2 ms.
2. The proxy's CPU per 1,000 streamed chunks (its process's user+system time over the proxied
   rounds, from /proc) and, for a fast stream with no delays, chunks per proxy CPU-second.

    python benchmarks/canary.py [--rounds 6] [--requests 96] [--concurrency 32] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specgauge.loadgen.dialects import get_dialect  # noqa: E402
from specgauge.loadgen.runner import Runner, RunnerSettings, new_session  # noqa: E402
from specgauge.records import RequestRecord  # noqa: E402
from specgauge.servers import free_port  # noqa: E402
from specgauge.workload.schema import ApiKind, Request  # noqa: E402

SERVER = textwrap.dedent(
    """
    import sys
    from specgauge.loadgen.fakeserver import FakeServer
    with FakeServer(spec=False, model="fake") as s:
        print(s.port, flush=True)
        sys.stdin.read()
    """
)
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """user + system CPU of a process (and its reaped children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS


def pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def batch(url: str, n: int, conc: int, prompt: str, tokens: int, offsets: list[float] | None = None) -> list[RequestRecord]:
    """``n`` streamed chat requests, at most ``conc`` at once, sent at ``offsets`` (s; all at once when None)."""
    reqs = [Request(id=f"r{i}", api=ApiKind.chat, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
                    extra={"user": f"user-{i}"}) for i in range(n)]
    at = offsets or [0.0] * n
    async with new_session(conc) as s:
        r = Runner(RunnerSettings(url, "fake", None, conc, 120.0), get_dialect("vllm"), s)
        return await r.run([(i, q, at[i]) for i, q in enumerate(reqs)])


def poisson(n: int, rate: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def start_proxy(upstream: str, out: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specgauge", "canary", "--baseline", upstream, "--candidate", upstream, "--port", str(port),
         "--steps", "50,100", "--interval", "1h", "--out-dir", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    said = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        said.append(line)
        if "canary proxy on " in line:
            return proc, line.split("canary proxy on ")[1].split()[0]
        if proc.poll() is not None and not line:
            break
    proc.kill()
    raise SystemExit(f"the canary proxy did not start: {''.join(said)[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=96, help="requests per round and side")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--first-ms", type=int, default=20)
    ap.add_argument("--delay-ms", type=int, default=10)
    ap.add_argument("--fast-tokens", type=int, default=2000, help="tokens per request of the no-delay CPU run")
    args = ap.parse_args()

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert server.stdout is not None
    upstream = f"http://127.0.0.1:{int(server.stdout.readline())}"
    with tempfile.TemporaryDirectory() as tmp:
        proxy, url = start_proxy(upstream, Path(tmp) / "canary")
        try:
            prompt = f"tokens:{args.tokens} per:1 first_ms:{args.first_ms} delay_ms:{args.delay_ms}"
            asyncio.run(batch(upstream, args.concurrency, args.concurrency, prompt, args.tokens))  # warm both paths
            asyncio.run(batch(url, args.concurrency, args.concurrency, prompt, args.tokens))
            stream_s = (args.first_ms + (args.tokens - 1) * args.delay_ms) / 1000.0
            rate = args.concurrency / stream_s  # Little's law: this rate keeps ~concurrency streams open
            rows = []
            proxy_cpu = 0.0
            server_cpu = 0.0
            proxy_chunks = 0
            for k in range(args.rounds):
                order = ("direct", "proxy") if k % 2 == 0 else ("proxy", "direct")
                res: dict[str, list[RequestRecord]] = {}
                for side in order:
                    c0, s0 = cpu_seconds(proxy.pid), cpu_seconds(server.pid)
                    res[side] = asyncio.run(batch(upstream if side == "direct" else url, args.requests, 4 * args.concurrency,
                                                  prompt, args.tokens, poisson(args.requests, rate, seed=k)))
                    if side == "proxy":
                        proxy_cpu += cpu_seconds(proxy.pid) - c0
                        server_cpu += cpu_seconds(server.pid) - s0
                        proxy_chunks += sum(len(r.chunks) for r in res[side] if r.ok)
                bad = {s: sum(not r.ok for r in v) for s, v in res.items()}
                if any(bad.values()):
                    raise SystemExit(f"failed requests in round {k}: {bad}")
                t = {s: [r.ttft_s * 1000 for r in v] for s, v in res.items()}
                rows.append({f"{s}_p{q}": pct(t[s], q) for s in t for q in (50, 99)})
            # a fast stream: how many chunks the proxy forwards (and parses, and records) per CPU-second
            fast = f"tokens:{args.fast_tokens} per:1"
            c0, s0 = cpu_seconds(proxy.pid), cpu_seconds(server.pid)
            w0 = time.perf_counter()
            recs = asyncio.run(batch(url, 8, 8, fast, args.fast_tokens))
            fast_wall = time.perf_counter() - w0
            fast_cpu = cpu_seconds(proxy.pid) - c0
            fast_server_cpu = cpu_seconds(server.pid) - s0
            fast_chunks = sum(len(r.chunks) for r in recs if r.ok)
        finally:
            proxy.terminate()
            proxy.wait(30)
            server.stdin.close()  # type: ignore[union-attr]
            server.wait(10)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print(f"canary proxy overhead: {args.rounds} paired rounds x {args.requests} streamed requests, Poisson arrivals at "
          f"{rate:.0f}/s (~{args.concurrency} streams open), {args.tokens} tokens each (first chunk after {args.first_ms} ms, "
          f"then every {args.delay_ms} ms); medians over rounds")
    print(f"{'':18}{'direct':>10}{'proxied':>10}{'added':>10}")
    for q in (50, 99):
        added = statistics.median(r[f"proxy_p{q}"] - r[f"direct_p{q}"] for r in rows)
        print(f"{'TTFT p' + str(q) + ' (ms)':18}{med(f'direct_p{q}'):>10.2f}{med(f'proxy_p{q}'):>10.2f}{added:>10.2f}")
    per_round = ", ".join(f"{r['proxy_p99'] - r['direct_p99']:.2f}" for r in rows)
    print(f"  per round, added p99 (ms): {per_round}")
    print("  goal: p99 added TTFT < 2 ms at 32 concurrent streams")
    n = max(proxy_chunks, 1)
    print(f"CPU per 1,000 streamed chunks, proxied rounds ({proxy_chunks} chunks): proxy {proxy_cpu / n * 1e6:.1f} ms, "
          f"the upstream server sending them {server_cpu / n * 1e6:.1f} ms (ratio {proxy_cpu / max(server_cpu, 1e-9):.2f})")
    n = max(fast_chunks, 1)
    print(f"fast stream (no delays, 8 x {args.fast_tokens} tokens, {fast_chunks / fast_wall:,.0f} chunks/s): proxy "
          f"{fast_cpu / n * 1e6:.1f} ms CPU per 1,000 chunks ({fast_chunks / max(fast_cpu, 1e-9):,.0f} chunks per CPU-second), "
          f"upstream server {fast_server_cpu / n * 1e6:.1f} ms")
    print("(CPU from /proc at 10 ms resolution; run on a quiet machine: timings on a shared one mostly measure the others)")


if __name__ == "__main__":
    main()
