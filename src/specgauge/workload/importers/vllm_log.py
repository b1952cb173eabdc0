"""vLLM's own request log (``vllm serve --enable-log-requests --enable-log-outputs``), from
``vllm/entrypoints/logger.py``:

- ``Request ID details: prompt: 'TEXT', prompt_token_ids: [..], prompt_embeds shape: None.`` (DEBUG:
  vLLM logs prompts only with ``VLLM_LOGGING_LEVEL=DEBUG``) and ``Received request ID: params:
  SamplingParams(...), lora_request: None.`` (INFO);
- before that split, one INFO line: ``Received request ID: prompt: 'TEXT', params: SamplingParams(...),
  prompt_token_ids: [..], ...``;
- ``Generated response ID: output: 'TEXT', output_token_ids: [..], finish_reason: stop``, or (vLLM
  0.32, ``vllm/entrypoints/serve/utils/request_logger.py``) the ids on a DEBUG line of their own,
  ``Generated response ID details: output_token_ids: [..]``, before ``Generated response ID: output:
  'TEXT', finish_reason: stop``; streamed requests log ``(streaming delta)`` pieces and a ``(streaming
  complete)`` line.

The prompt is the text after the chat template, so each request is a completions request whose
``prompt_token_ids`` and ``output_token_ids`` came from the server: replay is exact. A log written
with ``--max-log-len`` holds cut prompts; nothing in the line says so, so ``simulate``'s figures are
then only as good as the cut. Lines are joined by request id; a request whose output never appears
is kept without a response.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from specgauge.workload.formats import FieldError
from specgauge.workload.importers.common import build_item
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

_DETAILS = re.compile(r"Request (\S+) details: prompt: ")
_RECEIVED = re.compile(r"Received request (\S+): ")
_GENERATED = re.compile(r"Generated response (\S+?)( \(streaming (?:delta|complete)\))?: output: ")
_GENERATED_IDS = re.compile(r"Generated response (\S+?)( \(streaming (?:delta|complete)\))? details: output_token_ids: ")
#: a vLLM log line's prefix: '(APIServer pid=1) INFO 12-04 20:00:00 [logger.py:49] '
LOG_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[")
_SAMPLING = {"temperature": float, "top_p": float, "top_k": int, "seed": int, "max_tokens": int,
             "frequency_penalty": float, "presence_penalty": float, "repetition_penalty": float, "min_p": float}


def _take_literal(s: str, i: int) -> tuple[Any, int]:
    """The Python literal (a str repr, None, or a list of ints) starting at ``s[i]``, and where it ends."""
    if s.startswith("None", i):
        return None, i + 4
    if s[i:i + 1] in ("'", '"'):
        q, j = s[i], i + 1
        while j < len(s):
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == q:
                return ast.literal_eval(s[i:j + 1]), j + 1
            j += 1
        raise FieldError("prompt", "string is not closed (was the line cut?)")
    if s[i:i + 1] == "[":
        j = s.find("]", i)
        if j < 0:
            raise FieldError("token_ids", "list is not closed (was the line cut?)")
        body = s[i + 1:j].strip()
        try:
            return ([int(x) for x in body.split(",")] if body else []), j + 1
        except ValueError:
            raise FieldError("token_ids", f"not a list of token ids: {s[i:j + 1][:60]!r}") from None
    raise FieldError(None, f"unexpected text {s[i:i + 30]!r}")


def _after(s: str, key: str, start: int) -> tuple[Any, int] | None:
    j = s.find(key, start)
    return _take_literal(s, j + len(key)) if j >= 0 else None


def _sampling(s: str) -> dict[str, Any]:
    m = re.search(r"SamplingParams\((.*)\)", s)
    out: dict[str, Any] = {}
    if not m:
        return out
    for key, conv in _SAMPLING.items():
        hit = re.search(rf"\b{key}=([-+\w.]+)", m.group(1))
        if hit and hit.group(1) != "None":
            try:
                out[key] = conv(hit.group(1))
            except ValueError:
                continue
    if out.get("top_k") in (0, -1):  # vLLM's "disabled"
        out.pop("top_k")
    if out.get("max_tokens") is not None and out["max_tokens"] < 1:
        out.pop("max_tokens")
    return out


class _Pending:
    __slots__ = ("first", "prompt", "prompt_ids", "params", "deltas", "delta_ids", "out_ids", "reason")

    def __init__(self, first: str) -> None:
        self.first = first
        self.prompt: str | None = None
        self.prompt_ids: list[int] | None = None
        self.params: dict[str, Any] = {}
        self.deltas: list[str] = []
        self.delta_ids: list[int] | None = []
        self.out_ids: list[int] | None = None  #: from the DEBUG 'details' line that precedes the output line
        self.reason: str | None = None  #: the last streamed delta's finish reason


def _item(rid: str, p: _Pending, out: str | None, out_ids: list[int] | None, reason: str | None) -> WorkloadItem:
    prompt: str | list[int] | None = p.prompt if p.prompt else p.prompt_ids
    if prompt is None:
        raise FieldError("prompt", "no prompt logged for this request (vLLM logs prompts at DEBUG level: "
                                   "run the server with VLLM_LOGGING_LEVEL=DEBUG and --enable-log-requests)")
    meta = {"request_id": rid, "endpoint": "chat" if rid.startswith("chatcmpl") else "completions"}
    return build_item(item_id=rid, prompt=prompt, params=p.params, output_text=out,
                      output_token_ids=out_ids, finish_reason=reason if reason not in (None, "None", "streaming_complete") else None,
                      prompt_token_ids=p.prompt_ids, input_tokens=len(p.prompt_ids) if p.prompt_ids is not None else None,
                      output_tokens=len(out_ids) if out_ids is not None else None, metadata=meta, where_prompt="prompt")


def records(f: WorkloadFile) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    pending: dict[str, _Pending] = {}
    for n, line in f.lines():
        where = f"{f.name}:{n}"
        if isinstance(line, WorkloadError):
            yield where, line
            continue
        try:
            got = _line(line, where, pending)
        except FieldError as e:
            yield where, WorkloadError(where, e.message, e.field)
            continue
        if got is not None:
            yield got
    for rid, p in pending.items():  # requests whose output was not logged
        try:
            yield p.first, _item(rid, p, None, None, None)
        except FieldError as e:
            yield p.first, WorkloadError(p.first, e.message, e.field)


def _line(line: str, where: str, pending: dict[str, _Pending]) -> tuple[str, WorkloadItem] | None:
    m = _DETAILS.search(line)
    if m:
        p = pending.setdefault(m.group(1), _Pending(where))
        p.prompt, end = _take_literal(line, m.end())
        ids = _after(line, "prompt_token_ids: ", end)
        p.prompt_ids = ids[0] if ids else None
        return None
    m = _RECEIVED.search(line)
    if m:
        p = pending.setdefault(m.group(1), _Pending(where))
        rest = m.end()
        if line.startswith("prompt: ", rest):  # the one-line form of older vLLM
            p.prompt, rest = _take_literal(line, rest + len("prompt: "))
            ids = _after(line, "prompt_token_ids: ", rest)
            p.prompt_ids = ids[0] if ids else None
        p.params = _sampling(line)
        return None
    m = _GENERATED_IDS.search(line)
    if m:
        p = pending.get(m.group(1))
        if p is None:
            raise FieldError(None, f"output of request {m.group(1)} whose request line is not in this log")
        p.out_ids = _take_literal(line, m.end())[0]
        return None
    m = _GENERATED.search(line)
    if not m:
        return None
    rid, stream = m.group(1), m.group(2) or ""
    out, end = _take_literal(line, m.end())
    ids_hit = _after(line, "output_token_ids: ", end)
    ids = ids_hit[0] if ids_hit else None
    if ids is None and pending.get(rid) is not None:
        ids, pending[rid].out_ids = pending[rid].out_ids, None
    reason_m = re.search(r"finish_reason: (\S+)\s*$", line)
    p = pending.get(rid)
    if p is None:
        raise FieldError(None, f"output of request {rid} whose request line is not in this log")
    if "delta" in stream:
        if reason_m and reason_m.group(1) != "None":
            p.reason = reason_m.group(1)
        p.deltas.append(out or "")
        p.delta_ids = p.delta_ids + ids if (p.delta_ids is not None and ids is not None) else None
        return None
    if "complete" in stream and ids is None and p.delta_ids and "".join(p.deltas) == (out or ""):
        ids = p.delta_ids  # the deltas' ids make up the whole output
    del pending[rid]
    reason = reason_m.group(1) if reason_m else None
    if reason in (None, "None", "streaming_complete"):
        reason = p.reason
    return p.first, _item(rid, p, out, ids, reason)


def looks_like_log(f: WorkloadFile, head: int = 50) -> bool:
    """Most of the first ``head`` non-blank lines carry vLLM's log prefix (a server log starts with a
    line or two of its own, e.g. 'Triton is installed, but ...')."""
    seen = hits = 0
    for _, line in f.lines():
        if isinstance(line, WorkloadError) or not line.strip():
            continue
        seen += 1
        hits += bool(LOG_LINE.match(line))
        if seen >= head:
            break
    return seen > 0 and hits * 2 > seen
