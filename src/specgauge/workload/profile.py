"""``specgauge profile``: what a workload looks like, per segment and overall.

Streams the workload once, keeping a few numbers per request. Figures that need tokens use the
logged token ids (and ``usage``) when present, else the tokenizer given. Counts made by a tokenizer
are labelled exact only when it is the tokenizer of the model each request names (``model``);
another model's tokenizer, the shipped tiny model's used by default on a user's workload, or a
workload that names no model (nobody can tell) make them approximate, and ``token_counting`` says
which tokenizer counted and why. Empty data gives ``None`` with a reason, never 0.

Tool calls: a logged response calls a tool when it has OpenAI ``tool_calls`` or a text tool call
in its content (hermes ``<tool_call>{…}</tool_call>``, Mistral ``[TOOL_CALLS]``, Llama
``<|python_tag|>``); an opened ``<tool_call>`` counts even when the output was cut before it closed
(the share describes what the model emits, which is what drafters see). ``tools_share`` is the share
of requests *offering* tools; ``tool_call_share`` the share of logged responses *calling* one, and
``tool_call_share_when_offered`` the same among responses to requests that offered tools.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from specgauge.distributions import describe
from specgauge.i18n import en
from specgauge.workload.schema import Response, WorkloadItem
from specgauge.workload.tokenizer import Tokenizer, model_match, reply_text
from specgauge.workload.tokenizer import describe as describe_tokenizer

COPY_NGRAM = 3
#: a single system/user turn this long is treated as retrieved context
CONTEXT_MIN_CHARS = 1500
#: a request is counted Korean with at least this many Hangul characters making this share of its letters
KO_MIN_HANGUL, KO_MIN_SHARE = 20, 0.05
_CONTEXT_FIELDS = ("documents", "context", "contexts", "retrieved", "passages", "retrieved_context")
#: a heading that introduces retrieved text in a system / user turn ("Context:", "## Documents", "참고 문서:")
_CONTEXT_HEADING = re.compile(
    r"(?mi)^[ \t]*(?:#+[ \t]*)?(?:retrieved[ \t]+)?(?:context|contexts|documents|passages|sources|search results|knowledge)"
    r"[ \t]*(?::|$)|^[ \t]*(?:#+[ \t]*)?(?:참고[ \t]*)?(?:문맥|문서|자료|컨텍스트|검색[ \t]*결과)[ \t]*(?::|$)")
_PASSAGE_MARK = re.compile(r"(?m)^\s*(\[\d+\]|<document\b|<doc\b|<context\b|Document \d+|Passage \d+|문서 \d+)")
#: a text tool call in a response's content: hermes / Qwen, Mistral, Llama 3.x
_TEXT_TOOL_CALL = re.compile(r"<tool_call>|\[TOOL_CALLS\]|<\|python_tag\|>")
_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def tool_call_form(resp: Response) -> Literal["openai", "text"] | None:
    """How a logged response calls a tool: OpenAI ``tool_calls``, a text tool call, or not at all."""
    if resp.tool_calls:
        return "openai"
    if resp.text and _TEXT_TOOL_CALL.search(resp.text):
        return "text"
    return None


def openai_tool_calls_parse(calls: list[dict[str, Any]]) -> bool:
    """Every OpenAI tool call has a function name and ``arguments`` that are a JSON object (a string of
    one, as the API returns them, or the object itself)."""
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return False
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return False
        if not isinstance(args, dict):
            return False
    return bool(calls)


def text_tool_call_parses(text: str) -> bool:
    """Every hermes ``<tool_call>…</tool_call>`` in ``text`` closes and holds a JSON object with a name."""
    calls = _HERMES_CALL.findall(text)
    if not calls or text.count("<tool_call>") != len(calls):
        return False
    for body in calls:
        try:
            obj = json.loads(body)
        except ValueError:
            return False
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return False
    return True


def _is_hangul(ch: str) -> bool:
    o = ord(ch)
    return 0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F


def context_chars(turn: str) -> int:
    """Characters of retrieved context in one system / user turn: all of it when it holds two passage
    marks (``[1]``, ``<document>``, ``Passage 2``…) or is very long (``CONTEXT_MIN_CHARS``); else what
    follows a heading that introduces retrieved text (``Context:``, ``## Documents``, ``참고 문서:``) on
    a line of its own or before a colon; else 0."""
    if len(_PASSAGE_MARK.findall(turn)) >= 2 or len(turn) >= CONTEXT_MIN_CHARS:
        return len(turn)
    m = _CONTEXT_HEADING.search(turn)
    return len(turn) - m.start() if m is not None and turn[m.end():].strip() else 0


def dominant_script(hangul: int, letters: int, text: str) -> str:
    """``ko`` / ``en`` / ``other`` for one request's text with ``hangul`` Hangul characters among ``letters``.
    Korean instructions around ASCII code or logs: a modest Hangul share already marks Korean, given enough
    Hangul characters (``KO_MIN_HANGUL``); a short text is Korean when most of its letters are Hangul
    (before, "안녕하세요, 주문 상태 알려줘" — 100 % Hangul, under 20 characters — counted as "other")."""
    if hangul and (hangul >= KO_MIN_HANGUL and hangul >= KO_MIN_SHARE * letters or 2 * hangul >= letters):
        return "ko"
    return "en" if re.search(r"[A-Za-z]", text) else "other"


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
    tool_call_share: float | None = Field(description="share of logged responses that call a tool (OpenAI or text form)")
    tool_call_share_when_offered: float | None = Field(
        default=None, description="share of logged responses to requests offering tools that call one")
    tool_calls_openai: int = Field(default=0, description="responses with OpenAI tool_calls")
    tool_calls_text: int = Field(default=0, description="responses with a text tool call in their content")
    tool_calls_text_parsed: int = Field(
        default=0, description="of the text ones: every <tool_call> closed and held JSON with a name")
    tool_calls_openai_parsed: int = Field(
        default=0, description="of the OpenAI ones: every call named a function with JSON-object arguments")
    context_share: float = Field(description="share of requests carrying retrieved context")
    context_char_share: float | None = Field(description="share of prompt characters in retrieved-context blocks")
    copy_overlap: float | None = Field(
        description=f"share of output tokens inside an output {COPY_NGRAM}-gram already present in the prompt"
    )
    copy_overlap_request_mean: float | None = None
    hangul_share: float | None = Field(description="Hangul characters / letters, prompts and outputs")
    languages: dict[str, int] = Field(description="requests per dominant script: ko / en / other")
    notes: list[str] = Field(default_factory=list)


class TokenCounting(BaseModel):
    """Where the token counts came from and how far to trust them."""

    label: Literal["exact", "approximate"]
    tokenizer: str = Field(description="the tokenizer that counted what the log did not (name and origin)")
    requests_counted_by_tokenizer: int = 0
    #: of those requests: "own" (the tokenizer of the model they name), "other" (another model's), "unknown" (no model named)
    tokenizer_is_models: dict[str, int] = Field(default_factory=dict)
    #: the model names those requests give, with counts
    models: dict[str, int] = Field(default_factory=dict)
    #: re-tokenised prompts whose count differs from the server's ``usage.prompt_tokens`` logged beside
    #: them (a log without the whole prompt, e.g. tool definitions OpenTelemetry does not record)
    prompt_count_mismatch: int = 0
    reason: str


class WorkloadProfile(BaseModel):
    tokenizer: str
    exact_tokens: bool
    token_counting: TokenCounting | None = None
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
        self.offered_resp = 0
        self.offered_calls = 0
        self.calls_openai = 0
        self.calls_text = 0
        self.calls_text_parsed = 0
        self.calls_openai_parsed = 0
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
                ctx_chars += context_chars(m.text())
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
        self.lang[dominant_script(h, letters, text)] += 1
        if resp is not None:
            self.with_resp += 1
            form = tool_call_form(resp)
            if form is not None:
                self.tool_calls += 1
                if form == "openai":
                    self.calls_openai += 1
                    self.calls_openai_parsed += openai_tool_calls_parse(resp.tool_calls or [])
                else:
                    self.calls_text += 1
                    self.calls_text_parsed += text_tool_call_parses(resp.text)
            if req.tools:
                self.offered_resp += 1
                self.offered_calls += form is not None
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
            tool_call_share_when_offered=self.offered_calls / self.offered_resp if self.offered_resp else None,
            tool_calls_openai=self.calls_openai, tool_calls_text=self.calls_text,
            tool_calls_text_parsed=self.calls_text_parsed, tool_calls_openai_parsed=self.calls_openai_parsed,
            context_share=self.context / n if n else math.nan,
            context_char_share=self.context_chars / self.prompt_chars if self.prompt_chars else None,
            copy_overlap=self.copy_cov / self.copy_tot if self.copy_tot else None,
            copy_overlap_request_mean=float(np.mean(self.copy_ratios)) if self.copy_ratios else None,
            hangul_share=self.hangul / self.letters if self.letters else None,
            languages=dict(sorted(self.lang.items())),
            notes=list(notes) if not self.with_resp else [x for x in notes if "response" not in x],
        )


def _token_counting(tokenizer: Tokenizer, counted: int, is_models: Counter[str], models: Counter[str],
                    mismatch: list[tuple[int, int]] | None = None) -> TokenCounting:
    """The label: exact only when nothing was counted by the tokenizer, or every request it counted
    names a model whose tokenizer it is and no re-tokenised prompt disagrees with the server's own
    count logged beside it (``mismatch``: (re-tokenised, logged) pairs)."""
    who = describe_tokenizer(tokenizer)
    mismatch = mismatch or []
    exact = (counted == 0 or (tokenizer.exact and is_models["own"] == counted)) and not mismatch
    if counted == 0:
        reason = en("profile.r.log")
    elif not tokenizer.exact:
        reason = en("profile.r.words", n=counted, who=who)
    elif exact:
        reason = en("profile.r.own", n=counted, who=who, models=", ".join(models))
    else:
        parts = []
        if is_models["other"]:
            other_names = [m for m, _ in models.most_common() if model_match(tokenizer, m) is False]
            others = ", ".join(other_names[:5]) + (f" and {len(other_names) - 5} more" if len(other_names) > 5 else "")
            parts.append(en("profile.r.other", n=is_models["other"], others=others, tok=tokenizer.name))
        if is_models["unknown"]:
            parts.append(en("profile.r.unknown", n=is_models["unknown"], tok=tokenizer.name))
        reason = en("profile.r.mixed", n=counted, who=who, parts="; ".join(parts))
    if mismatch:
        got, logged = max(mismatch, key=lambda m: abs(m[1] - m[0]))
        reason = en("notes.list", a=en("profile.r.prompt_gap", n=len(mismatch), got=got, logged=logged), b=reason)
    return TokenCounting(label="exact" if exact else "approximate", tokenizer=who, requests_counted_by_tokenizer=counted,
                         tokenizer_is_models=dict(sorted(is_models.items())), models=dict(models.most_common(10)),
                         prompt_count_mismatch=len(mismatch), reason=reason)


def profile_workload(items: Iterable[WorkloadItem], tokenizer: Tokenizer, skipped_invalid: int = 0) -> WorkloadProfile:
    overall = _Acc()
    segs: dict[str, _Acc] = {}
    sources: Counter[str] = Counter()
    is_models: Counter[str] = Counter()  # requests counted by the tokenizer: own / other / unknown
    models: Counter[str] = Counter()
    mismatch: list[tuple[int, int]] = []  # (re-tokenised, logged usage.prompt_tokens) where they differ
    counted = 0
    for item in items:
        req, resp = item.request, item.response
        by_tokenizer = False
        if resp is not None and resp.prompt_token_ids is not None:
            prompt_ids = resp.prompt_token_ids
            sources["prompt: log"] += 1
        elif isinstance(req.prompt, list):
            prompt_ids = list(req.prompt)
            sources["prompt: request ids"] += 1
        else:
            prompt_ids = tokenizer.encode_request(req)
            sources["prompt: tokenizer"] += 1
            by_tokenizer = True
            logged = resp.usage.prompt_tokens if resp is not None and resp.usage is not None else None
            if logged is not None and logged != len(prompt_ids):
                mismatch.append((len(prompt_ids), logged))
        output_ids: list[int] | None = None
        out_count: int | None = None
        if resp is not None:
            has_usage = resp.usage is not None and resp.usage.completion_tokens is not None
            if resp.output_token_ids is not None:
                output_ids = resp.output_token_ids
                sources["output: log"] += 1
            elif resp.text or resp.tool_calls:  # copy overlap needs ids even when usage gives the count
                output_ids = tokenizer.encode(reply_text(tokenizer, req, resp.text, resp.tool_calls)[0])
                sources["output: usage" if has_usage else "output: tokenizer"] += 1
                by_tokenizer |= not has_usage
            if has_usage:
                out_count = resp.usage.completion_tokens  # type: ignore[union-attr]
            elif output_ids is not None:
                out_count = len(output_ids)
        if by_tokenizer:
            counted += 1
            model = item.named_model()
            m = model_match(tokenizer, model)
            is_models["unknown" if m is None else "own" if m else "other"] += 1
            if model is not None:
                models[model] += 1
        for acc in (overall, segs.setdefault(req.segment, _Acc())):
            acc.add(item, prompt_ids, output_ids, out_count)
    tc = _token_counting(tokenizer, counted, is_models, models, mismatch)
    notes = []
    if tc.label == "approximate":
        notes.append(en("profile.n.approx", reason=tc.reason))
    if overall.with_resp == 0:
        notes.append(en("profile.n.no_responses"))
    return WorkloadProfile(
        tokenizer=tokenizer.name,
        exact_tokens=tc.label == "exact",
        token_counting=tc,
        token_sources=dict(sources),
        overall=overall.result(notes),
        segments={k: v.result(notes) for k, v in sorted(segs.items())},
        skipped_invalid=skipped_invalid,
    )
