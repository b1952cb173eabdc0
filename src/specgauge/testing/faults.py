"""The scripted server's fault-injecting mode: a speculative server that misbehaves on purpose, the way
production servers were reported to (``docs/field-failures.md``), so each of specgauge's field
detectors can be shown to fire on its fault and to stay quiet on two identical servers.

Faults (``Faults``; all off by default):

* ``corrupt_json_from_k``: on a server whose k is at least this, the first speculative step (one that
  accepted a draft token) that starts inside a tool call's JSON or a JSON answer, at a point outside
  any string, streams a stray ``,`` before its tokens — never valid JSON there (no JSON value, key or
  closing bracket may follow a comma that follows ``{``, ``[``, ``:``, ``,`` or a value's end where
  a comma is already due). MTP at k = 3 broke GLM-5's tool calls this way (vllm-ascend #7580); k = 1
  was fine.
* ``stall_at_brace_s``: the chunk that carries the ``}`` closing a tool call's JSON or a JSON answer
  reaches the client this many seconds late, and so does the rest of that response (vllm #49002:
  DSpark stalled 5–12 s at the closing ``}``). Only that request waits; the engine goes on.
* ``collapse_past_context``: a request whose prompt is longer than this many tokens has every draft
  rejected (the server still emits the same tokens, one per step): acceptance lost past a context
  length (EAGLE-3 on ROCm with one attention backend, DSpark past ~128K).
* ``draft_prefill_s_per_token``: a speculative server's step that prefills prompts takes this much
  longer per prompt token: the drafter's own prefill on the critical path (TTFT worse with EAGLE-3 /
  DFlash, vllm #39790).

Fault mode also gives the scripted server what a field check needs from a real vLLM: output text
(``CharText``: the fault workload's token ids are Unicode code points), token ids for
``return_token_ids``, its speculative config on ``/v1/models`` (bench replays with it), and vLLM's
request queue / prefill time histograms on ``/metrics`` (the TTFT split).

``fault_workload`` writes a small logged workload for it from the built-in sample's reference answers
(valid tool calls, JSON answers, a few plain answers), one token per character.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specgauge.structured import expectation


class Faults(BaseModel):
    """What the server does wrong on purpose (module docstring); nothing by default."""

    corrupt_json_from_k: int | None = Field(default=None, ge=1)
    stall_at_brace_s: float = Field(default=0.0, ge=0)
    collapse_past_context: int | None = Field(default=None, ge=0)
    draft_prefill_s_per_token: float = Field(default=0.0, ge=0)


@dataclass
class _Shape:
    """Where one response's structured text is, by output position (= character, one token each)."""

    insertable: frozenset[int] = frozenset()  #: positions before which a ',' makes the JSON invalid
    closing: frozenset[int] = frozenset()  #: positions of the '}' that closes a tool call's JSON / a JSON answer


def _json_spans(text: str, structured_json: bool) -> list[tuple[int, int]]:
    """[start, end) of each JSON document: the answer itself, or each <tool_call> block's object."""
    if structured_json:
        a, b = text.find("{"), text.rfind("}")
        return [(a, b + 1)] if 0 <= a < b else []
    out, pos = [], 0
    while (s := text.find("<tool_call>", pos)) >= 0:
        e = text.find("</tool_call>", s)
        if e < 0:
            break
        a, b = text.find("{", s, e), text.rfind("}", s, e)
        if 0 <= a < b:
            out.append((a, b + 1))
        pos = e
    return out


def _shape(text: str, structured_json: bool) -> _Shape:
    ins: set[int] = set()
    closing: set[int] = set()
    for a, b in _json_spans(text, structured_json):
        closing.add(b - 1)
        in_str = esc = False
        for p in range(a, b):
            if not in_str:
                ins.add(p)  # before text[p], outside a string: a ',' here breaks the document
            ch = text[p]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
        ins.add(b)  # right after the closing brace: a trailing ',' breaks it too
    return _Shape(frozenset(ins), frozenset(closing))


@dataclass
class FaultHooks:
    """What the scripted server calls in fault mode (``ScriptedServer(..., faults=...)``)."""

    faults: Faults
    k: int
    spec: dict[str, Any] | None
    queue: list[float] = field(default_factory=lambda: [0.0, 0])  #: Σ seconds waiting, requests
    prefill: list[float] = field(default_factory=lambda: [0.0, 0])  #: Σ seconds of the prefill step, requests
    _shapes: dict[str, _Shape] = field(default_factory=dict)
    _corrupted: set[str] = field(default_factory=set)
    _delay: dict[str, float] = field(default_factory=dict)

    def start(self, rid: str, output: Sequence[int], body: dict[str, Any]) -> None:
        """A request was admitted: where its structured text is."""
        exp = expectation(body)
        if exp is not None:
            self._shapes[rid] = _shape(CharText.text(output), exp.json_schema is not None)

    def accepted(self, prompt_len: int, drafted: int, accepted: int) -> tuple[int, int]:
        """The step's (drafted, accepted): every draft rejected past ``collapse_past_context``."""
        limit = self.faults.collapse_past_context
        return (drafted, 0) if limit is not None and prompt_len > limit else (drafted, accepted)

    def step_extra_s(self, admitted_prompt_tokens: int) -> float:
        """Extra time of a step that prefills this many prompt tokens (the drafter's prefill)."""
        return self.faults.draft_prefill_s_per_token * admitted_prompt_tokens if self.k else 0.0

    def on_step(self, start: float, dur: float, arrivals: Sequence[float]) -> None:
        """A step that started at ``start``, took ``dur`` and prefilled requests that arrived at ``arrivals``."""
        for at in arrivals:
            self.queue[0] += max(0.0, start - at)
            self.queue[1] += 1
            self.prefill[0] += dur
            self.prefill[1] += 1

    def chunk(self, rid: str, first: int, toks: Sequence[int]) -> tuple[str, float]:
        """(text, delay in seconds) of the chunk carrying output positions first..first+len(toks)-1."""
        text = CharText.text(toks)
        shape = self._shapes.get(rid)
        if shape is None:
            return text, self._delay.get(rid, 0.0)
        f = self.faults
        if (f.corrupt_json_from_k is not None and self.k >= f.corrupt_json_from_k and len(toks) >= 2
                and rid not in self._corrupted and first in shape.insertable):
            self._corrupted.add(rid)
            text = "," + text
        if f.stall_at_brace_s and any(p in shape.closing for p in range(first, first + len(toks))):
            self._delay[rid] = self._delay.get(rid, 0.0) + f.stall_at_brace_s
        return text, self._delay.get(rid, 0.0)

    def end(self, rid: str) -> None:
        self._shapes.pop(rid, None)
        self._delay.pop(rid, None)
        self._corrupted.discard(rid)

    @staticmethod
    def finish_reason(done: bool) -> str | None:
        """The fault workload's answers end where they end (``max_tokens`` leaves room): "stop"."""
        return "stop" if done else None

    def card(self) -> dict[str, Any]:
        """What ``/v1/models`` adds to the model card: the speculative config, as the embedded server states it."""
        return {"speculative_config": self.spec} if self.spec else {}

    def histograms(self) -> dict[str, tuple[float, int]]:
        """vLLM's request queue / prefill time histograms (sum, count), for ``/metrics``."""
        return {"request_queue_time_seconds": (self.queue[0], int(self.queue[1])),
                "request_prefill_time_seconds": (self.prefill[0], int(self.prefill[1]))}


class CharText:
    """The fault workload's tokenizer: one token per character, the id its code point."""

    @staticmethod
    def ids(text: str) -> list[int]:
        return [ord(c) for c in text]

    @staticmethod
    def text(ids: Sequence[int]) -> str:
        return "".join(chr(int(i)) for i in ids)


def _prompt_text(line: dict[str, Any]) -> str:
    parts = [f"{m['role']}: {m.get('content') or ''}" for m in line.get("messages") or []]
    for m in line.get("messages") or []:
        parts += [json.dumps(c, ensure_ascii=False) for c in m.get("tool_calls") or []]
    if line.get("tools"):
        parts.append(json.dumps(line["tools"], ensure_ascii=False))
    return "\n".join(parts)


def fault_workload(out_dir: Path, tool_calls: int = 16, plain: int = 8, json_answers: int = 24) -> tuple[Path, Path]:
    """(requests file, logged file) of a small workload for fault mode, from the built-in sample's
    reference answers: ``tool_calls`` agent steps whose answer is a valid <tool_call>, ``plain`` that
    answer in text, ``json_answers`` JSON-Schema extractions. One token per character; ``max_tokens``
    fits each answer (a cut answer would be broken JSON on every server alike)."""
    from specgauge.workload.samples import generate_pairs, generate_structured_pairs

    picked: list[tuple[dict[str, Any], str]] = []
    n_call = n_plain = 0
    for line, answer in generate_pairs():
        if line["segment"] != "tool_calling":
            continue
        is_call = answer.startswith("<tool_call>")
        if is_call and n_call < tool_calls:
            n_call += 1
        elif not is_call and n_plain < plain:
            n_plain += 1
        else:
            continue
        picked.append((line, answer))
    picked += list(generate_structured_pairs())[:json_answers]
    out_dir.mkdir(parents=True, exist_ok=True)
    req_path, log_path = out_dir / "fault_requests.jsonl", out_dir / "fault_logged.jsonl"
    with req_path.open("w", encoding="utf-8") as rq, log_path.open("w", encoding="utf-8") as lg:
        for line, answer in picked:
            line = {**line, "max_tokens": len(answer) + 8}
            rq.write(json.dumps(line, ensure_ascii=False) + "\n")
            resp = {"text": answer, "output_token_ids": CharText.ids(answer), "prompt_token_ids": CharText.ids(_prompt_text(line)),
                    "finish_reason": "length"}
            lg.write(json.dumps({"request": line, "response": resp}, ensure_ascii=False) + "\n")
    return req_path, log_path
