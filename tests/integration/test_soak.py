"""Soak (issue 26): ``specgauge canary`` (its own process) in front of two real embedded servers
(``specgauge serve``, the shipped tiny target; the candidate with n-gram drafts) for ~35 s of mixed
traffic: good clients (streamed and not, greedy and sampled), slow clients (idle connections, headers
and bodies trickled byte by byte), clients that disconnect mid-stream, and bad bodies (not JSON,
nested 5,000 deep, out-of-range fields, past the body limit).

Checked: every good request answered in full; every bad one a 4xx JSON error; the proxy's open
descriptors and resident memory bounded while it runs and back near the start after; the records
complete (one ``live`` record per request the proxy routed); both servers' ``/health`` 200 at the end.
No wall-clock assertions: durations only bound how long the test runs."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch")

from specgauge.models import available, target_dir  # noqa: E402
from specgauge.records import ResultsFile  # noqa: E402
from specgauge.servers import ManagedServer, embedded_server, free_port  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="shipped tiny models missing")]

SOAK_S = 30.0
MAX_BODY = 200_000
PROMPTS = ["Summarise: the printer on floor 3 jams every morning.", "Review: def add(a, b): return a - b",
           "Write a one-line status update for the on-call channel."]


def proc_stats(pid: int) -> tuple[int, int]:
    """(open descriptors, resident kB) of a process, from /proc."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return fds, rss


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, subprocess.Popen[bytes], Path]]:
    logs = tmp_path_factory.mktemp("soak")
    base = embedded_server(target_dir(), logs / "baseline.log", max_batch=4)
    cand = embedded_server(target_dir(), logs / "candidate.log", max_batch=4,
                           speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2})
    started: list[ManagedServer] = []
    proxy: subprocess.Popen[bytes] | None = None
    try:
        with ThreadPoolExecutor(2) as ex:
            started += list(ex.map(lambda m: m.start(), (base, cand)))
        port = free_port()
        out = logs / "canary"
        cmd = [sys.executable, "-m", "specgauge", "canary", "--baseline", base.base_url, "--candidate", cand.base_url,
               "--port", str(port), "--steps", "50", "--interval", "5s", "--out-dir", str(out), "--header-timeout", "2s",
               "--body-timeout", "2s", "--max-body-bytes", str(MAX_BODY), "--max-inflight-bytes", str(4 * MAX_BODY),
               "--first-byte-timeout", "20s", "--min-samples", "5"]
        proxy = subprocess.Popen(cmd, stdout=open(logs / "canary.out", "wb"), stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError((logs / "canary.out").read_text()[-2000:])
        yield url, base.base_url, cand.base_url, proxy, out
    finally:
        if proxy is not None and proxy.poll() is None:
            proxy.send_signal(signal.SIGTERM)
            try:
                proxy.wait(20)
            except subprocess.TimeoutExpired:
                proxy.kill()
        for s in (base, cand):
            s.stop()


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.routed = 0  #: requests the proxy read whole and routed (one live record each)
        self.good: list[str] = []  #: problems with good requests ("" = answered in full)
        self.bad: Counter[int] = Counter()
        self.bad_problems: list[str] = []
        self.gone = 0

    def add(self, **kw: Any) -> None:
        with self.lock:
            for k, v in kw.items():
                cur = getattr(self, k)
                if isinstance(cur, list):
                    cur.append(v)
                elif isinstance(cur, Counter):
                    cur[v] += 1
                else:
                    setattr(self, k, cur + v)


def good_client(url: str, stop: threading.Event, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=60) as c:
        while not stop.is_set():
            stream = rng.random() < 0.6
            body = {"model": "tiny-target", "messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "max_tokens": 8,
                    "temperature": rng.choice([0.0, 0.7]), "stream": stream, "user": f"u{rng.randrange(20)}"}
            if stream:
                body["stream_options"] = {"include_usage": True}
            try:
                r = c.post(url + "/v1/chat/completions", json=body)
                ok = r.status_code == 200 and (r.text.rstrip().endswith("data: [DONE]") if stream else bool(r.json()["choices"]))
                tally.add(routed=1, good="" if ok else f"{r.status_code}: {r.text[:200]}")
            except (httpx.HTTPError, ValueError) as e:
                tally.add(routed=1, good=f"{type(e).__name__}: {e}")


def slow_client(port: int, stop: threading.Event) -> None:
    """Idle connections, trickled heads and trickled bodies, 6 at a time; each one is closed by the proxy."""
    heads = [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 400,
             b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b'{"pad": "' + b"b" * 400]
    socks: list[tuple[socket.socket, bytes, int]] = []
    while not stop.is_set():
        while len(socks) < 6:
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            socks.append((s, random.choice(heads), 0))
        keep = []
        for s, data, i in socks:
            try:
                if i < len(data):
                    s.send(data[i:i + 1])
                    i += 1
                if s.recv(65536) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            keep.append((s, data, i))
        socks = keep
        time.sleep(0.05)
    for s, _, _ in socks:
        s.close()


def disconnecting_client(url: str, stop: threading.Event, tally: Tally) -> None:
    while not stop.is_set():
        body = {"model": "tiny-target", "messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": 64,
                "stream": True, "ignore_eos": True}
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
                for _ in r.iter_raw():
                    break  # gone after the first chunk
        except httpx.HTTPError:
            pass
        tally.add(routed=1, gone=1)
        time.sleep(0.2)


BAD_BODIES: list[tuple[bytes, bool]] = [  # (body, reaches the router)
    (b"{not json", True),
    (b'{"model": "tiny-target", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", True),
    (json.dumps({"model": "tiny-target", "messages": [{"role": "user", "content": "x"}], "top_k": 2**70}).encode(), True),
    (json.dumps({"model": "tiny-target", "messages": [{"role": "user", "content": "x"}], "seed": 2**64}).encode(), True),
    (json.dumps({"model": "tiny-target", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).encode(), True),
    (b"\xff\xfe\x00garbage", True),
    (json.dumps({"model": "tiny-target", "pad": "x" * (MAX_BODY + 10)}).encode(), False),
]


def bad_client(url: str, stop: threading.Event, tally: Tally) -> None:
    i = 0
    with httpx.Client(timeout=60) as c:
        while not stop.is_set():
            body, routed = BAD_BODIES[i % len(BAD_BODIES)]
            i += 1
            try:
                r = c.post(url + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
                tally.add(routed=int(routed), bad=r.status_code)
                if not (400 <= r.status_code < 500 and "error" in r.json()):
                    tally.add(bad_problems=f"{r.status_code}: {r.text[:200]}")
            except (httpx.HTTPError, ValueError) as e:
                tally.add(routed=int(routed), bad_problems=f"{type(e).__name__}: {e}")
            time.sleep(0.1)


def test_soak_mixed_clients(stack: tuple[str, str, str, subprocess.Popen[bytes], Path]) -> None:
    url, base_url, cand_url, proxy, out = stack
    port = int(url.rsplit(":", 1)[1])
    fds0, rss0 = proc_stats(proxy.pid)
    stop = threading.Event()
    tally = Tally()
    samples: list[tuple[int, int]] = []
    threads = [threading.Thread(target=good_client, args=(url, stop, tally, i)) for i in range(3)]
    threads += [threading.Thread(target=slow_client, args=(port, stop)),
                threading.Thread(target=disconnecting_client, args=(url, stop, tally)),
                threading.Thread(target=bad_client, args=(url, stop, tally))]
    for t in threads:
        t.start()
    t_end = time.monotonic() + SOAK_S
    while time.monotonic() < t_end:
        samples.append(proc_stats(proxy.pid))
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    time.sleep(3.0)  # the slow connections' timers (2 s) run out
    fds1, rss1 = proc_stats(proxy.pid)

    print(f"soak: {len(tally.good)} good, {sum(tally.bad.values())} bad {dict(tally.bad)}, {tally.gone} gone; proxy fds "
          f"{fds0} -> peak {max(s[0] for s in samples)} -> {fds1}, RSS kB {rss0} -> peak {max(s[1] for s in samples)} -> {rss1}")
    assert tally.good and all(p == "" for p in tally.good), [p for p in tally.good if p][:5]
    assert not tally.bad_problems, tally.bad_problems[:5]
    assert set(tally.bad) <= {400, 404, 408, 413, 422}, tally.bad
    peak_fds, peak_rss = max(s[0] for s in samples), max(s[1] for s in samples)
    # bounded while it ran: 6 slow sockets + ~5 clients + upstream pools, never a growing pile
    assert peak_fds <= fds0 + 80, (fds0, peak_fds)
    assert fds1 <= fds0 + 20, (fds0, fds1)  # the slow and idle connections were closed
    assert peak_rss - rss0 < 150_000, (rss0, peak_rss)  # kB
    assert rss1 - rss0 < 100_000, (rss0, rss1)
    for u in (base_url, cand_url):
        assert httpx.get(u + "/health", timeout=10).status_code == 200
    status = httpx.get(url + "/canary/status", timeout=10).json()
    proxy.send_signal(signal.SIGTERM)
    proxy.wait(30)
    recs = ResultsFile(out / "baseline" / "results.jsonl").existing() + ResultsFile(out / "candidate" / "results.jsonl").existing()
    live = [r for r in recs if r.extra["canary"]["role"] == "live"]
    assert len(live) == tally.routed, (len(live), tally.routed, status["totals"])
    assert sum(r.extra["canary"]["client_gone"] for r in recs) <= tally.gone
    assert (out / "summary.json").exists() and json.loads((out / "summary.json").read_text())
