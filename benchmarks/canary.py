"""What the canary proxy costs: added TTFT and CPU per streamed chunk, proxied vs direct, one run.

Prints figures, asserts nothing (timing belongs here, not in tests). Three processes: the scripted
streaming server (``testing/fakeserver.py``, the upstream for both sides of the canary), the real
``specgauge canary`` proxy in front of it (judging, per-request records, /metrics all on, as in
production), and specgauge's own load generator here (on uvloop, as ``bench``).

1. TTFT with ``--concurrency`` (default 32) streams open through the proxy. Every request of a
   round is drawn at random (balanced, seeded) to one of three sides that run *at the same time*:
   ``P`` through the proxy, ``A`` and ``B`` direct to the same server. Each side gets Poisson
   arrivals at the rate that keeps ``--concurrency`` of its streams open (a steady state, not a
   burst), so the server, the client and the two shared cores carry the same load for every side,
   and whatever else runs on the machine meanwhile lands on all three alike. The proxy's own CPU
   slows the client and the server for both sides too, so "added" is what the proxy's hop costs a
   request, not what its CPU costs its neighbours (that is item 2). Percentiles are taken over all
   measured rounds pooled (``--rounds`` x ``--requests`` per side: p99 of 3,072 is about the 31st
   largest; the earlier benchmark's p99 of one round's 96 was the largest but one), with a 95 %
   bootstrap interval (requests resampled: slow requests come in bursts, so the interval is somewhat
   too narrow; the A/A line shows how far two equal samples drift apart).
   added = P - (A and B together); the noise floor is the A/A difference B - A, two direct samples
   of the same size measured the same way. The server waits ``--first-ms`` before its first chunk
   and ``--delay-ms`` between chunks, like a decoding model. Goal: p99 added < 2 ms.
2. The proxy's CPU per 1,000 streamed chunks (its threads' on-CPU time, ns resolution from
   ``/proc/PID/task/*/schedstat``, over the measured rounds, divided by the proxied chunks) and,
   for a fast stream with no delays, chunks per proxy CPU-second.

    python benchmarks/canary.py [--rounds 12] [--requests 256] [--concurrency 32] [--tokens 32]
    python benchmarks/canary.py --profile /tmp/proxy.prof   # the proxy under cProfile (pstats file)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specgauge.loadgen.dialects import get_dialect  # noqa: E402
from specgauge.loadgen.runner import Runner, RunnerSettings, new_session, run_async  # noqa: E402
from specgauge.servers import free_port  # noqa: E402
from specgauge.workload.schema import ApiKind, Request  # noqa: E402

SERVER = textwrap.dedent(
    """
    import sys
    from specgauge.testing.fakeserver import FakeServer
    with FakeServer(spec=False, model="fake") as s:
        print(s.port, flush=True)
        sys.stdin.read()
    """
)
SIDES = ("A", "B", "P")  #: direct, direct (the A/A control), through the proxy


def cpu_seconds(pid: int) -> float:
    """On-CPU time of all of a process's threads (ns resolution; /proc/PID/task/*/schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total / 1e9


def pct(vals: Sequence[float], q: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def boot_diff(x: Sequence[float], y: Sequence[float], q: float, n: int = 2000, seed: int = 1) -> tuple[float, float]:
    """95 % bootstrap interval of pct(x, q) - pct(y, q) (requests resampled, each side on its own)."""
    rng = np.random.default_rng(seed)
    xa, ya = np.asarray(x), np.asarray(y)
    out = []
    for _ in range(0, n, 250):
        xs = np.percentile(xa[rng.integers(0, len(xa), (250, len(xa)))], q, axis=1)
        ys = np.percentile(ya[rng.integers(0, len(ya), (250, len(ya)))], q, axis=1)
        out.append(xs - ys)
    d = np.concatenate(out)
    return float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))


def poisson(n: int, rate: float, rng: random.Random) -> list[float]:
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def requests(n: int, prompt: str, tokens: int, tag: str) -> list[Request]:
    return [Request(id=f"{tag}{i}", api=ApiKind.chat, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
                    extra={"user": f"user-{tag}{i}"}) for i in range(n)]


def start_proxy(upstream: str, out: Path, profile: str | None = None) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen(
        [sys.executable, *prof, "-m", "specgauge", "canary", "--baseline", upstream, "--candidate", upstream, "--port", str(port),
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


async def measure(args: argparse.Namespace, upstream: str, url: str, proxy_pid: int, server_pid: int) -> dict[str, Any]:
    prompt = f"tokens:{args.tokens} per:1 first_ms:{args.first_ms} delay_ms:{args.delay_ms}"
    stream_s = (args.first_ms + args.tokens * args.delay_ms) / 1000.0  # the server sleeps delay_ms before every chunk
    rate = args.concurrency / stream_s  # Little's law: this rate keeps ~concurrency streams of a side open
    conc = 4 * args.concurrency  # a cap that a Poisson burst never reaches
    base = {"A": upstream, "B": upstream, "P": url}
    sessions = {s: new_session(conc) for s in SIDES}
    try:
        runners = {s: Runner(RunnerSettings(base[s], "fake", None, conc, 120.0), get_dialect("vllm"), sessions[s]) for s in SIDES}
        ttft: dict[str, list[float]] = {s: [] for s in SIDES}
        rounds: list[dict[str, float]] = []
        proxy_cpu = server_cpu = 0.0
        chunks = {s: 0 for s in SIDES}
        for k in range(args.rounds + 1):  # round 0 warms every pool (client sessions, the proxy's upstream pool)
            rng = random.Random(args.seed * 1000 + k)
            n = args.requests if k else args.concurrency
            sides = [s for s in SIDES for _ in range(n)]
            rng.shuffle(sides)
            at = poisson(len(sides), len(SIDES) * rate, rng)
            plans: dict[str, list[tuple[int, Request, float]]] = {s: [] for s in SIDES}
            reqs = {s: iter(requests(n, prompt, args.tokens, f"{s}{k}-")) for s in SIDES}
            for side, t in zip(sides, at):
                plans[side].append((len(plans[side]), next(reqs[side]), t))
            c0, s0 = cpu_seconds(proxy_pid), cpu_seconds(server_pid)
            res = await asyncio.gather(*(runners[s].run(plans[s]) for s in SIDES))
            c1, s1 = cpu_seconds(proxy_pid), cpu_seconds(server_pid)
            by = dict(zip(SIDES, res))
            bad = {s: sum(not r.ok for r in v) for s, v in by.items()}
            if any(bad.values()):
                raise SystemExit(f"failed requests in round {k}: {bad}")
            if k == 0:
                continue
            proxy_cpu += c1 - c0
            server_cpu += s1 - s0
            for s in SIDES:
                chunks[s] += sum(len(r.chunks) for r in by[s])
                ttft[s] += [r.ttft_s * 1000 for r in by[s]]  # type: ignore[operator]
            t = {s: [r.ttft_s * 1000 for r in by[s]] for s in SIDES}
            rounds.append({"added_p99": pct(t["P"], 99) - pct(t["A"] + t["B"], 99), "aa_p99": pct(t["B"], 99) - pct(t["A"], 99)})
        # a fast stream: how many chunks the proxy forwards (and parses, and records) per CPU-second
        fast = f"tokens:{args.fast_tokens} per:1"
        c0, s0 = cpu_seconds(proxy_pid), cpu_seconds(server_pid)
        w0 = time.perf_counter()
        recs = await runners["P"].run([(i, r, 0.0) for i, r in enumerate(requests(8, fast, args.fast_tokens, "fast"))])
        fast_wall = time.perf_counter() - w0
        fast_cpu = cpu_seconds(proxy_pid) - c0
        fast_server_cpu = cpu_seconds(server_pid) - s0
        fast_chunks = sum(len(r.chunks) for r in recs if r.ok)
    finally:
        for sess in sessions.values():
            await sess.close()
    return {"rate": rate, "ttft": ttft, "rounds": rounds, "proxy_cpu": proxy_cpu, "server_cpu": server_cpu, "chunks": chunks,
            "fast_wall": fast_wall, "fast_cpu": fast_cpu, "fast_server_cpu": fast_server_cpu, "fast_chunks": fast_chunks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--requests", type=int, default=256, help="requests per round and side")
    ap.add_argument("--concurrency", type=int, default=32, help="streams open per side (through the proxy, and each direct side)")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--first-ms", type=int, default=20)
    ap.add_argument("--delay-ms", type=int, default=10)
    ap.add_argument("--fast-tokens", type=int, default=2000, help="tokens per request of the no-delay CPU run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", metavar="PATH", help="run the proxy under cProfile, stats written to PATH at its exit")
    args = ap.parse_args()

    load0 = os.getloadavg()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert server.stdout is not None
    upstream = f"http://127.0.0.1:{int(server.stdout.readline())}"
    with tempfile.TemporaryDirectory() as tmp:
        proxy, url = start_proxy(upstream, Path(tmp) / "canary", args.profile)
        try:
            m = run_async(measure(args, upstream, url, proxy.pid, server.pid))
        finally:
            proxy.terminate()
            proxy.wait(30)
            server.stdin.close()  # type: ignore[union-attr]
            server.wait(10)

    t = m["ttft"]
    direct = t["A"] + t["B"]
    n = len(t["P"])
    print(f"canary proxy overhead: {args.rounds} rounds x {args.requests} streamed requests per side, sides interleaved at random "
          f"in one schedule (P proxied, A and B direct), Poisson arrivals at {m['rate']:.0f}/s per side (~{args.concurrency} "
          f"streams open per side, ~{len(SIDES) * args.concurrency} in all), {args.tokens} tokens each (first chunk after "
          f"{args.first_ms + args.delay_ms} ms, then every {args.delay_ms} ms); load average {load0[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"{'TTFT (ms)':12}{'direct A':>10}{'direct B':>10}{'proxied':>10}{'added P-AB':>12}  {'95% CI':>16}{'A/A B-A':>10}  {'95% CI':>16}")
    for q in (50, 90, 99):
        added = pct(t["P"], q) - pct(direct, q)
        aa = pct(t["B"], q) - pct(t["A"], q)
        lo, hi = boot_diff(t["P"], direct, q)
        alo, ahi = boot_diff(t["B"], t["A"], q)
        print(f"{'p' + str(q):12}{pct(t['A'], q):>10.2f}{pct(t['B'], q):>10.2f}{pct(t['P'], q):>10.2f}{added:>12.2f}  "
              f"{f'[{lo:.2f}, {hi:.2f}]':>16}{aa:>10.2f}  {f'[{alo:.2f}, {ahi:.2f}]':>16}")
    print(f"  pooled over {n} requests per side; per round (p99 of {args.requests}), added: "
          + ", ".join(f"{r['added_p99']:.2f}" for r in m["rounds"]) + "; A/A: " + ", ".join(f"{r['aa_p99']:.2f}" for r in m["rounds"]))
    added99 = pct(t["P"], 99) - pct(direct, 99)
    print(f"  goal: p99 added TTFT < 2 ms at {args.concurrency} concurrent streams: {'met' if added99 < 2 else 'NOT met'} "
          f"({added99:.2f} ms)")
    pc = max(m["chunks"]["P"], 1)
    allc = max(sum(m["chunks"].values()), 1)
    print(f"CPU per 1,000 streamed chunks, measured rounds ({m['chunks']['P']} proxied chunks): proxy {m['proxy_cpu'] / pc * 1e6:.1f} ms; "
          f"the upstream server {m['server_cpu'] / allc * 1e6:.1f} ms per 1,000 chunks it sent ({allc} to all sides)")
    fc = max(m["fast_chunks"], 1)
    print(f"fast stream (no delays, 8 x {args.fast_tokens} tokens, {m['fast_chunks'] / m['fast_wall']:,.0f} chunks/s): proxy "
          f"{m['fast_cpu'] / fc * 1e6:.1f} ms CPU per 1,000 chunks ({m['fast_chunks'] / max(m['fast_cpu'], 1e-9):,.0f} chunks per "
          f"CPU-second), upstream server {m['fast_server_cpu'] / fc * 1e6:.1f} ms")
    print("(run on a quiet machine: the three processes share its cores with whatever else runs)")


if __name__ == "__main__":
    main()
