"""What taking the proxy's own token ids out of a stream costs (``canary/token_ids.py``), per streamed
chunk, beside the parse the proxy does on every chunk anyway (``observe.Capture.feed``), one process,
no I/O. The chunks are a real vLLM 0.32 stream (``tests/data/recorded/vllm_0.32.0_ngram.json``) with
3 token ids put where vLLM writes them when asked. Prints figures, asserts nothing.

    python benchmarks/canary_token_ids.py [--repeat 400]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specgauge.canary.observe import Capture  # noqa: E402
from specgauge.canary.token_ids import Absent, StreamStripper  # noqa: E402
from specgauge.loadgen.dialects import get_dialect  # noqa: E402


def per_chunk_us(fn: Callable[[], None], n_chunks: int, repeat: int) -> float:
    """Best of 5 runs of ``repeat`` calls, in µs per chunk."""
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, time.perf_counter() - t)
    return best / (repeat * n_chunks) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=400)
    a = ap.parse_args()
    rec = json.loads((ROOT / "tests/data/recorded/vllm_0.32.0_ngram.json").read_text(encoding="utf-8"))
    chunks = [c.replace('"token_ids":null', '"token_ids":[1234,5678,9101]').encode() for c in rec["responses"][0]["chunks"]]
    dialect = get_dialect("vllm")

    def capture() -> None:
        cap = Capture(dialect, time.perf_counter())
        for c in chunks:
            cap.feed(c)

    def strip(absent: Absent) -> Callable[[], None]:
        def run() -> None:
            s = StreamStripper(absent)
            for c in chunks:
                s.feed(c)
        return run

    cap = per_chunk_us(capture, len(chunks), a.repeat)
    print(f"{len(chunks)} chunks of a recorded vLLM stream, best of 5 x {a.repeat}")
    print(f"{'per chunk':<44} {'µs':>8} {'x capture':>10}")
    print(f"{'the proxy parses it for the record (always)':<44} {cap:>8.2f} {1.0:>10.2f}")
    for absent, what in ((Absent.null, "ids -> null (vLLM)"), (Absent.drop, "ids dropped (embedded engine)")):
        us = per_chunk_us(strip(absent), len(chunks), a.repeat)
        print(f"{'stripped, ' + what:<44} {us:>8.2f} {us / cap:>10.2f}")


if __name__ == "__main__":
    main()
