"""``specgauge profile``: what a workload looks like, per segment and overall.

Streams the workload once, keeping a few numbers per request. Figures that need tokens use the
logged token ids when present, else the tokenizer given (the result names which, and says when the
approximation was used). Empty data gives ``None`` with a reason, never 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel, Field

from specgauge.stats.distributions import describe
from specgauge.workload.schema import WorkloadItem
from specgauge.workload.tokenizer import Tokenizer

COPY_NGRAM = 3
#: a single system/user turn this long is treated as retrieved context
CONTEXT_MIN_CHARS = 1500
#: a request is counted Korean with at least this many Hangul characters making this share of its letters
KO_MIN_HANGUL, KO_MIN_SHARE = 20, 0.05
_CONTEXT_FIELDS = ("documents", "context", "contexts", "retrieved", "passages", "retrieved_context")
_PASSAGE_MARK = re.compile(r"(?m)^\s*(\[\d+\]|<document\b|<doc\b|<context\b|Document \d+|Passage \d+|문서 \d+)")


def _is_hangul(ch: str) -> bool:
    o = ord(ch)
    return 0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F


class Dist(BaseModel):
    n: int
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    max: float | None = None
    note: str | None = None

    @classmethod
    def of(cls, values: Sequence[float], empty_reason: str) -> Dist:
        d = describe(values, (50.0, 95.0), empty_reason)
        if d.n == 0:
            return cls(n=0, note=empty_reason)
        return cls(n=d.n, mean=d.mean, p50=d.pct(50.0), p95=d.pct(95.0), max=d.max)


class SegmentProfile(BaseModel):
    requests: int
    with_logged_response: int
    prompt_tokens: Dist
    output_tokens: Dist
    max_tokens: Dist
    temperature_mix: dict[str, float] = Field(description="share of requests per temperature band")
    top_p_mix: dict[str, float]
    tools_share: float = Field(description="share of requests that offer tools")
    tool_call_share: float | None = Field(description="share of logged responses that call a tool")
    context_share: float = Field(description="share of requests carrying retrieved context")
    context_char_share: float | None = Field(description="share of prompt characters in retrieved-context blocks")
    copy_overlap: float | None = Field(
        description=f"share of output tokens inside an output {COPY_NGRAM}-gram already present in the prompt"
    )
    copy_overlap_request_mean: float | None = None
    hangul_share: float | None = Field(description="Hangul characters / letters, prompts and outputs")
    languages: dict[str, int] = Field(description="requests per dominant script: ko / en / other")
    notes: list[str] = Field(default_factory=list)


class WorkloadProfile(BaseModel):
    tokenizer: str
    exact_tokens: bool
    token_sources: dict[str, int] = Field(description="where token counts came from: log / tokenizer")
    overall: SegmentProfile
    segments: dict[str, SegmentProfile]
    skipped_invalid: int = 0


def copy_overlap_count(prompt_ids: Sequence[int], output_ids: Sequence[int], n: int = COPY_NGRAM) -> int:
    """Output positions covered by some output n-gram that also occurs in the prompt.

    Any longer shared n-gram is covered by its n-gram windows, so n-grams of exactly ``n`` suffice.
    """
    if len(output_ids) < n or len(prompt_ids) < n:
        return 0
    grams = {tuple(prompt_ids[i : i + n]) for i in range(len(prompt_ids) - n + 1)}
    covered = bytearray(len(output_ids))
    for j in range(len(output_ids) - n + 1):
        if tuple(output_ids[j : j + n]) in grams:
            covered[j : j + n] = b"\x01" * n
    return sum(covered)


def _temp_band(t: float | None) -> str:
    if t is None:
        return "unset"
    if t == 0:
        return "0 (greedy)"
    if t <= 0.5:
        return "(0, 0.5]"
    if t <= 1.0:
        return "(0.5, 1]"
    return "> 1"


class _Acc:
    """Running figures for one segment."""

    def __init__(self) -> None:
        self.n = 0
        self.with_resp = 0
        self.prompt: list[int] = []
        self.output: list[int] = []
        self.max_tokens: list[int] = []
        self.temp: Counter[str] = Counter()
        self.top_p: Counter[str] = Counter()
        self.tools = 0
        self.tool_calls = 0
        self.context = 0
        self.context_chars = 0
        self.prompt_chars = 0
        self.copy_cov = 0
        self.copy_tot = 0
        self.copy_ratios: list[float] = []
        self.hangul = 0
        self.letters = 0
        self.lang: Counter[str] = Counter()

    def add(self, item: WorkloadItem, prompt_ids: list[int], output_ids: list[int] | None, out_count: int | None) -> None:
        req, resp = item.request, item.response
        self.n += 1
        self.prompt.append(len(prompt_ids))
        if req.max_tokens is not None:
            self.max_tokens.append(req.max_tokens)
        self.temp[_temp_band(req.temperature)] += 1
        self.top_p["1 / unset" if req.top_p in (None, 1.0) else "< 1"] += 1
        if req.tools:
            self.tools += 1
        # retrieved context
        ctx_chars = 0
        for k in _CONTEXT_FIELDS:
            v = req.metadata.get(k, req.extra.get(k))
            if v:
                ctx_chars += len(str(v))
        for m in req.messages or []:
            if m.role in ("system", "developer", "user"):
                t = m.text()
                if len(_PASSAGE_MARK.findall(t)) >= 2 or len(t) >= CONTEXT_MIN_CHARS:
                    ctx_chars += len(t)
        ptext = req.prompt_text()
        self.prompt_chars += len(ptext)
        if ctx_chars:
            self.context += 1
            self.context_chars += min(ctx_chars, len(ptext)) if ptext else ctx_chars
        # language
        text = ptext + (resp.text if resp else "")
        h = sum(1 for ch in text if _is_hangul(ch))
        letters = sum(1 for ch in text if ch.isalpha())
        self.hangul += h
        self.letters += letters
        # Korean instructions around ASCII code or logs: a modest Hangul share already marks Korean
        is_ko = h >= KO_MIN_HANGUL and h >= KO_MIN_SHARE * letters
        self.lang["ko" if is_ko else ("en" if re.search(r"[A-Za-z]", text) else "other")] += 1
        if resp is not None:
            self.with_resp += 1
            if resp.tool_calls:
                self.tool_calls += 1
            if out_count is not None:
                self.output.append(out_count)
            if output_ids is not None and output_ids:
                c = copy_overlap_count(prompt_ids, output_ids)
                self.copy_cov += c
                self.copy_tot += len(output_ids)
                self.copy_ratios.append(c / len(output_ids))

    def result(self, notes: list[str]) -> SegmentProfile:
        n = self.n

        def share(c: Counter[str]) -> dict[str, float]:
            return {k: v / n for k, v in sorted(c.items())} if n else {}

        no_resp = "no logged responses" if not self.with_resp else "no output token counts"
        return SegmentProfile(
            requests=n,
            with_logged_response=self.with_resp,
            prompt_tokens=Dist.of(self.prompt, "no requests"),
            output_tokens=Dist.of(self.output, no_resp),
            max_tokens=Dist.of(self.max_tokens, "max_tokens never set"),
            temperature_mix=share(self.temp),
            top_p_mix=share(self.top_p),
            tools_share=self.tools / n if n else math.nan,
            tool_call_share=self.tool_calls / self.with_resp if self.with_resp else None,
            context_share=self.context / n if n else math.nan,
            context_char_share=self.context_chars / self.prompt_chars if self.prompt_chars else None,
            copy_overlap=self.copy_cov / self.copy_tot if self.copy_tot else None,
            copy_overlap_request_mean=float(np.mean(self.copy_ratios)) if self.copy_ratios else None,
            hangul_share=self.hangul / self.letters if self.letters else None,
            languages=dict(sorted(self.lang.items())),
            notes=list(notes) if not self.with_resp else [x for x in notes if "response" not in x],
        )


def profile_workload(items: Iterable[WorkloadItem], tokenizer: Tokenizer, skipped_invalid: int = 0) -> WorkloadProfile:
    overall = _Acc()
    segs: dict[str, _Acc] = {}
    sources: Counter[str] = Counter()
    for item in items:
        req, resp = item.request, item.response
        if resp is not None and resp.prompt_token_ids is not None:
            prompt_ids = resp.prompt_token_ids
            sources["prompt: log"] += 1
        elif isinstance(req.prompt, list):
            prompt_ids = list(req.prompt)
            sources["prompt: request ids"] += 1
        else:
            prompt_ids = tokenizer.encode_request(req)
            sources["prompt: tokenizer"] += 1
        output_ids: list[int] | None = None
        out_count: int | None = None
        if resp is not None:
            if resp.output_token_ids is not None:
                output_ids = resp.output_token_ids
                sources["output: log"] += 1
            elif resp.text:
                output_ids = tokenizer.encode(resp.text)
                sources["output: tokenizer"] += 1
            if resp.usage is not None and resp.usage.completion_tokens is not None:
                out_count = resp.usage.completion_tokens
            elif output_ids is not None:
                out_count = len(output_ids)
        for acc in (overall, segs.setdefault(req.segment, _Acc())):
            acc.add(item, prompt_ids, output_ids, out_count)
    notes = []
    if not tokenizer.exact and (sources["prompt: tokenizer"] or sources["output: tokenizer"]):
        notes.append(f"token counts approximate ({tokenizer.name}); pass --tokenizer DIR for exact counts")
    if overall.with_resp == 0:
        notes.append("no logged responses: output tokens, tool calls and copy overlap need them")
    return WorkloadProfile(
        tokenizer=tokenizer.name,
        exact_tokens=tokenizer.exact or not (sources["prompt: tokenizer"] or sources["output: tokenizer"]),
        token_sources=dict(sources),
        overall=overall.result(notes),
        segments={k: v.result(notes) for k, v in sorted(segs.items())},
        skipped_invalid=skipped_invalid,
    )
