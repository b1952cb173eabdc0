"""Write examples/chat.jsonl: a small chat log as a gateway records it, for the README's recipes.

Two requests per segment x language of the built-in sample (support summaries, code review, RAG
answers, agent logs, tool-calling steps; English and Korean: 20 requests), ``max_tokens`` capped at
64 so that the recipes run in seconds, each sent to a running server and written as
``{"request": <the body sent, plus metadata.segment>, "response": <the server's chat.completion>}``:
text only, no token ids (what most logs hold), the model named as the server names it.

Usage: specgauge serve --port 8000 &   python scripts/make_example_chat_log.py --base-url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path

from specgauge.workload.samples import sample_path

OUT = Path(__file__).resolve().parents[1] / "examples" / "chat.jsonl"
PER_CELL = 2
MAX_TOKENS = 64
BODY_FIELDS = ("messages", "tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop")


def chosen(lines: list[dict]) -> list[dict]:
    """The first ``PER_CELL`` requests of every segment x language, in the sample's arrival order."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for line in lines:
        cell = (line["segment"], line["metadata"]["lang"])
        if seen.get(cell, 0) < PER_CELL:
            seen[cell] = seen.get(cell, 0) + 1
            out.append(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    with urllib.request.urlopen(f"{a.base_url}/v1/models") as r:
        model = json.load(r)["data"][0]["id"]
    lines = [json.loads(s) for s in sample_path().read_text(encoding="utf-8").splitlines() if s.strip()]
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with a.out.open("w", encoding="utf-8", newline="\n") as fh:
        for line in chosen(lines):
            body = {"model": model, **{k: line[k] for k in BODY_FIELDS if k in line}}
            body["max_tokens"] = min(body.get("max_tokens") or MAX_TOKENS, MAX_TOKENS)
            req = urllib.request.Request(f"{a.base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                resp = json.load(r)
            logged = {**body, "metadata": {"segment": line["segment"]}}
            fh.write(json.dumps({"request": logged, "response": resp}, ensure_ascii=False) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
