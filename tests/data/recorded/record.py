"""Record a real server's streamed responses and /metrics for replay in unit tests.

    python tests/data/recorded/record.py BASE_URL MODEL OUT.json [--dialect vllm|llamacpp|sglang] [--n 4]

Writes {"server": …, "request_bodies": […], "responses": [{"chunks": [raw SSE text per read]}],
"metrics_before": …, "metrics_after": …, "get": {path: json}}: the bytes exactly as they arrived
(split per socket read), so the replay exercises the same parser path on the same framing.
Requests are sent one at a time so nothing else moves the counters between the two snapshots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import aiohttp

from specgauge.loadgen.dialects import get_dialect

PROMPTS = [
    "one two three four five one two three four five one two three",
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return",
    "hello world hello world hello world hello world hello",
]


async def record(base: str, model: str, dialect: str, n: int, max_tokens: int) -> dict:
    d = get_dialect(dialect)
    out: dict = {"server": dialect, "request_bodies": [], "responses": [], "get": {}}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for p in d.identity_paths():
            async with s.get(base + p) as r:
                if r.status == 200:
                    out["get"][p] = await r.json(content_type=None)
        async with s.get(base + "/metrics") as r:
            out["metrics_before"] = await r.text()
        for i in range(n):
            body = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens, "temperature": 0.0,
                    "stream": True, "stream_options": {"include_usage": True}}
            for k, v in d.body_extras().items():
                body[k] = {**body.get(k, {}), **v} if isinstance(v, dict) else v
            out["request_bodies"].append(body)
            chunks: list[str] = []
            async with s.post(base + "/v1/completions", json=body) as r:
                async for piece in r.content.iter_any():
                    chunks.append(piece.decode())
            out["responses"].append({"chunks": chunks})
        async with s.get(base + "/metrics") as r:
            out["metrics_after"] = await r.text()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base_url")
    ap.add_argument("model")
    ap.add_argument("out", type=Path)
    ap.add_argument("--dialect", default="vllm")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=24)
    a = ap.parse_args()
    data = asyncio.run(record(a.base_url.rstrip("/"), a.model, a.dialect, a.n, a.max_tokens))
    a.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {a.out}: {len(data['responses'])} responses")


if __name__ == "__main__":
    main()
