"""The built-in sample workload: seeded, realistic serving traffic in five segments, English and Korean.

Segments (one builder module each): ``support_summary`` (ticket thread -> handover summary),
``code_review`` (made-up Python module or diff -> review comments quoting lines), ``rag_answer``
(retrieved policy passages -> cited, quoting answer), ``agent_logs`` (log excerpt -> root cause quoting
log lines) and ``tool_calling`` (agent step with OpenAI ``tools`` -> next tool call or final answer).
The reference answers copy from their prompts the way real answers do — heavily for RAG and code
review, JSON-ish for tool calls, moderately for support summaries — because that copying is what
n-gram / suffix speculation feeds on.

All text is written for specgauge. Everything is drawn from ``random.Random`` seeded by strings, so a
seed gives byte-identical output on every platform and Python >= 3.11. Each request line is an OpenAI
chat request body plus specgauge fields (``id``, ``segment``, ``arrival_time``, ``metadata``); the
reference answers are not in the file (logged responses come from the shipped target model later).

Regenerate the shipped file: ``python -m specgauge.workload.samples.generate [--out P] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from . import _code, _logs, _rag, _structured, _support, _tools
from ._common import Example

GENERATOR = "specgauge-sample-v1"
SEGMENTS = ("support_summary", "code_review", "rag_answer", "agent_logs", "tool_calling")
LANGS = ("en", "ko")
BUILDERS: dict[str, Callable[[random.Random, str], Example]] = {
    "support_summary": _support.build, "code_review": _code.build, "rag_answer": _rag.build,
    "agent_logs": _logs.build, "tool_calling": _tools.build, "json_extract": _structured.build,
}
#: segments shipped apart (``sample_structured.jsonl``): requests with a JSON Schema in ``response_format``
STRUCTURED_SEGMENTS = ("json_extract",)
#: max_tokens a client of each segment would send; the smallest that fits the answer is preferred
MAX_TOKENS: dict[str, tuple[int, ...]] = {
    "support_summary": (192, 256, 320, 384), "code_review": (256, 384, 512),
    "rag_answer": (128, 192, 256, 320), "agent_logs": (320, 384, 512), "tool_calling": (96, 128, 192, 256),
    "json_extract": (128, 192, 256),
}
ARRIVAL_RATE = 4.0  # requests per second, Poisson
GREEDY_SHARE = 0.6  # share of temperature-0 requests in every segment x language cell
MAX_PROMPT_CHARS = 2500
MAX_ANSWER_CHARS = 1200
_MAX_TRIES = 64


def sample_path() -> pathlib.Path:
    """Path of the shipped ``sample.jsonl`` (generated with the default seed and ``per_cell``)."""
    return pathlib.Path(__file__).with_name("sample.jsonl")


def prompt_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> int:
    """Characters of prompt text a server renders: turn contents, tool-call arguments, tool schemas."""
    n = 0
    for m in messages:
        n += len(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            n += len(call["function"]["name"]) + len(call["function"]["arguments"])
    if tools:
        n += len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))
    return n


def build_example(segment: str, lang: str, key: str) -> Example:
    """One example of ``segment`` in ``lang`` from the seed string ``key``, within the size limits.

    A draw that comes out too long is redrawn from ``key/retry-N`` (deterministic)."""
    if segment not in BUILDERS:
        raise ValueError(f"unknown sample segment {segment!r}; choose one of {', '.join(SEGMENTS)}")
    if lang not in LANGS:
        raise ValueError(f"unknown sample language {lang!r}; choose one of {', '.join(LANGS)}")
    for attempt in range(_MAX_TRIES):
        rng = random.Random(key if attempt == 0 else f"{key}/retry-{attempt}")
        ex = BUILDERS[segment](rng, lang)
        if prompt_chars(ex.messages, ex.tools) <= MAX_PROMPT_CHARS and len(ex.answer) <= MAX_ANSWER_CHARS:
            return ex
    raise RuntimeError(f"sample builder {segment}/{lang} exceeded the size limits {_MAX_TRIES} times for {key!r}")


def _estimate_tokens(text: str) -> float:
    """Rough, deliberately high token count (~3 ASCII characters or ~0.8 Hangul syllables per token),
    so a small-vocabulary tokenizer rarely truncates a reference answer at ``max_tokens``."""
    ascii_chars = sum(1 for ch in text if ord(ch) < 128)
    return ascii_chars / 3 + 1.2 * (len(text) - ascii_chars)


def _sampling(rng: random.Random, segment: str, answer: str, greedy: bool) -> dict[str, Any]:
    choices = MAX_TOKENS[segment]
    fits = [c for c in choices if c >= 1.1 * _estimate_tokens(answer)]
    body: dict[str, Any] = {"max_tokens": rng.choice(fits[:2]) if fits else max(choices)}
    if greedy:
        body.update(temperature=0.0, top_p=1.0)
    else:
        body.update(temperature=rng.choice([0.3, 0.5, 0.7, 0.8, 1.0]), top_p=rng.choice([0.9, 0.95, 1.0]))
    body["seed"] = rng.randrange(1, 2**31)
    return body


def generate_pairs(seed: int = 0, per_cell: int = 24) -> Iterator[tuple[dict[str, Any], str]]:
    """Yield (request_line, reference_answer) for every segment x language, ``per_cell`` each.

    Lines come in arrival order: segments interleaved, ``arrival_time`` from a Poisson process of
    ``ARRIVAL_RATE`` requests per second starting at 0."""
    return _pairs(SEGMENTS, seed, per_cell, f"{GENERATOR}/{seed}/arrivals")


def generate_structured_pairs(seed: int = 0, per_cell: int = 12) -> Iterator[tuple[dict[str, Any], str]]:
    """``generate_pairs`` for the structured-output segments (``STRUCTURED_SEGMENTS``: requests with a
    JSON Schema in ``response_format``), the shipped ``sample_structured.jsonl``; their own arrivals."""
    return _pairs(STRUCTURED_SEGMENTS, seed, per_cell, f"{GENERATOR}/{seed}/structured/arrivals")


def _pairs(segments: tuple[str, ...], seed: int, per_cell: int, clock_key: str) -> Iterator[tuple[dict[str, Any], str]]:
    if not isinstance(per_cell, int) or isinstance(per_cell, bool) or per_cell < 1:
        raise ValueError(f"per_cell must be a positive integer, got {per_cell!r}")
    items: list[tuple[dict[str, Any], str]] = []
    for segment in segments:
        for lang in LANGS:
            cell = f"{GENERATOR}/{seed}/{segment}/{lang}"
            greedy = [i < round(GREEDY_SHARE * per_cell) for i in range(per_cell)]
            random.Random(cell).shuffle(greedy)
            for i in range(per_cell):
                ex = build_example(segment, lang, f"{cell}/{i}")
                line: dict[str, Any] = {
                    "id": f"{segment}-{lang}-{i:04d}", "segment": segment, "arrival_time": 0.0,
                    "metadata": {"lang": lang, "generator": GENERATOR}, "messages": ex.messages,
                }
                line.update(_sampling(random.Random(f"{cell}/{i}/sampling"), segment, ex.answer, greedy[i]))
                if ex.tools is not None:
                    line["tools"], line["tool_choice"] = ex.tools, "auto"
                if ex.response_format is not None:
                    line["response_format"] = ex.response_format
                items.append((line, ex.answer))
    return _arrivals(items, clock_key)


def _arrivals(items: list[tuple[dict[str, Any], str]], clock_key: str) -> Iterator[tuple[dict[str, Any], str]]:
    clock = random.Random(clock_key)
    clock.shuffle(items)
    t, last = 0.0, -1.0
    for line, answer in items:
        t += clock.expovariate(ARRIVAL_RATE)
        at = max(round(t, 3), round(last + 0.001, 3))  # strictly increasing after rounding
        line["arrival_time"], last = at, at
        yield line, answer


def dumps_line(line: dict[str, Any]) -> str:
    """One request line as written to the JSONL file (stable key order, UTF-8 text)."""
    return json.dumps(line, ensure_ascii=False)


def write_sample(path: str | pathlib.Path, seed: int = 0, per_cell: int | None = None, structured: bool = False) -> int:
    """Write the request lines (no answers) to ``path``; return how many were written. ``structured``:
    the structured-output sample (``generate_structured_pairs``) instead of the main one; ``per_cell``
    None: the shipped file's (24, structured 12)."""
    path = pathlib.Path(path)
    n = 0
    per_cell = per_cell or (12 if structured else 24)
    pairs = generate_structured_pairs(seed, per_cell) if structured else generate_pairs(seed, per_cell)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for line, _ in pairs:
            fh.write(dumps_line(line) + "\n")
            n += 1
    return n


def structured_sample_path() -> pathlib.Path:
    """Path of the shipped ``sample_structured.jsonl`` (``generate_structured_pairs`` with seed 0, 12 per cell)."""
    return pathlib.Path(__file__).with_name("sample_structured.jsonl")


def render_text(messages: list[dict[str, Any]], answer: str, tools: list[dict[str, Any]] | None = None) -> str:
    """A conversation and its answer as plain text (``System:`` / ``User:`` / ``Assistant:`` / ``Tool:``)."""
    out: list[str] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            out.append(f"System: {m['content']}")
            if tools:
                out.append("Tools:\n" + "\n".join(_tool_line(t) for t in tools))
        elif role == "user":
            out.append(f"User: {m['content']}")
        elif role == "assistant":
            calls = [_tools.format_tool_call(c["function"]["name"], json.loads(c["function"]["arguments"]))
                     for c in m.get("tool_calls") or []]
            out.append("Assistant: " + "\n".join(([m["content"]] if m.get("content") else []) + calls))
        elif role == "tool":
            out.append(f"Tool: {m['content']}")
    out.append(f"Assistant: {answer}")
    return "\n\n".join(out)


def _tool_line(tool: dict[str, Any]) -> str:
    fn = tool["function"]
    params = fn["parameters"]
    args = ", ".join(p + ("" if p in params.get("required", []) else "?") for p in params["properties"])
    return f"- {fn['name']}({args}): {fn['description']}"


def corpus_texts(seed: int, n: int) -> Iterator[str]:
    """``n`` training documents: rendered conversations (prompt text + reference answer), cycling over
    segments and languages. Seed strings differ from the sample's, so the sample is not memorised."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    for k in range(n):
        segment, lang = SEGMENTS[k % len(SEGMENTS)], LANGS[(k // len(SEGMENTS)) % len(LANGS)]
        ex = build_example(segment, lang, f"specgauge-corpus-v1/{seed}/{k}")
        yield render_text(ex.messages, ex.answer, ex.tools)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specgauge.workload.samples.generate",
                                 description="Regenerate specgauge's built-in sample workload (request JSONL).")
    ap.add_argument("--out", type=pathlib.Path, default=sample_path(), help="output file (default: the shipped sample.jsonl)")
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default 0, the shipped file)")
    ap.add_argument("--per-cell", type=int, default=None,
                    help="requests per segment x language (default 24 -> 240; with --structured 12 -> 24)")
    ap.add_argument("--structured", action="store_true",
                    help="write the structured-output sample (response_format JSON Schemas; default --out "
                         "sample_structured.jsonl, 12 per cell -> 24) instead")
    args = ap.parse_args(argv)
    if args.structured:
        if args.out == sample_path():
            args.out = structured_sample_path()
    if args.per_cell is not None and args.per_cell < 1:
        ap.error(f"--per-cell must be >= 1, got {args.per_cell}")
    if not args.out.parent.is_dir():
        ap.error(f"--out: directory {args.out.parent} does not exist")
    n = write_sample(args.out, seed=args.seed, per_cell=args.per_cell, structured=args.structured)
    print(f"wrote {n} requests to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
