"""OpenAI-compatible request bodies (the subset the embedded engine serves, with vLLM's extensions:
``top_k``, ``ignore_eos``, ``stop_token_ids``, ``return_token_ids``, ``stream_options.
continuous_usage_stats``) and the error body. Unknown fields are ignored, as OpenAI's server does.

Ranges as vLLM validates them (``vllm/entrypoints/openai/protocol.py``, ``SamplingParams._verify_args``,
the v1 processor): ``seed`` a signed 64-bit integer (-1: none); ``temperature`` finite in [0, 2];
``top_p`` in (0, 1]; ``top_k`` -1 or 0 (off) or 1..vocab size (the server checks the vocab);
``max_tokens`` >= 1 (and prompt + max_tokens within the model length: the engine checks);
``stop`` without empty strings; ``n`` 1 (the embedded engine serves one choice). Anything outside is
a 400 with ``{"error": {"message", "type", "param", "code"}}`` naming the field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ApiError(Exception):
    """Answered as ``{"error": {...}}`` with ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                413: "RequestTooLargeError", 503: "ServiceUnavailableError"}.get(self.status, "InternalServerError")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.status}}


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    logprobs: Any = None
    return_token_ids: bool = False

    @field_validator("n")
    @classmethod
    def _one(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        if v == "" or (isinstance(v, list) and any(not s for s in v)):
            raise ValueError("stop cannot contain an empty string")
        return v

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: Any) -> Any:
        if v not in (None, 0, False):
            raise ValueError("logprobs are not supported by the embedded engine")
        return v


class ContentPart(BaseModel):
    """One part of a message's content list; only text parts reach the template."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, v: Any) -> Any:
        if v not in (None, False):
            raise ValueError("logprobs are not supported by the embedded engine")
        return v

    def messages_for_template(self) -> list[dict[str, Any]]:
        out = []
        for m in self.messages:
            d = m.model_dump(exclude_none=True)
            if isinstance(m.content, list):  # [{"type": "text", "text": ...}, ...] -> text
                d["content"] = "".join(p.text or "" for p in m.content if p.type == "text")
            out.append(d)
        return out
