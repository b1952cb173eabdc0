"""Workload types: one logged or planned request, and its optional logged response.

These are the shapes every other part of specgauge reads. A loader turns a file line into a
``WorkloadItem``; validation lives here (pydantic), so a malformed field is reported the same way
whatever the file format was.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ApiKind(str, Enum):
    chat = "chat"
    completion = "completion"


class Message(BaseModel):
    """One chat turn, as in the OpenAI chat API. ``content`` may be a string or a list of parts."""

    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The text of this turn; list content contributes its ``text`` parts only."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")


class Request(BaseModel):
    """A request as sent to an OpenAI-compatible server, plus what specgauge needs to group it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    segment: str = "default"
    api: ApiKind
    messages: list[Message] | None = None
    prompt: str | list[int] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    stop: str | list[str] | None = None
    seed: int | None = None
    arrival_time: float | None = Field(default=None, ge=0.0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: every other field of the request body (``model``, ``presence_penalty``…), kept as sent
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("top_k must be -1 (disabled) or >= 1, got 0")
        return v

    @model_validator(mode="after")
    def _body_matches_api(self) -> Request:
        if self.api is ApiKind.chat:
            if not self.messages:
                raise ValueError("a chat request needs a non-empty 'messages' list")
            if self.prompt is not None:
                raise ValueError("a chat request has 'messages', not 'prompt'")
        else:
            if self.prompt is None or (isinstance(self.prompt, (str, list)) and len(self.prompt) == 0):
                raise ValueError("a completion request needs a non-empty 'prompt'")
            if self.messages is not None:
                raise ValueError("a completion request has 'prompt', not 'messages'")
        return self

    def system_text(self) -> str:
        return "\n".join(m.text() for m in self.messages or [] if m.role in ("system", "developer"))

    def prompt_text(self) -> str:
        """All prompt text, turns joined by newlines (token ids are not text: empty for those)."""
        if self.messages is not None:
            return "\n".join(m.text() for m in self.messages)
        return self.prompt if isinstance(self.prompt, str) else ""

    def body(self, model: str | None = None, stream: bool = False) -> dict[str, Any]:
        """The OpenAI request body this request stands for."""
        b: dict[str, Any] = dict(self.extra)
        if model is not None:
            b["model"] = model
        if self.api is ApiKind.chat:
            b["messages"] = [m.model_dump(exclude_none=True) for m in self.messages or []]
        else:
            b["prompt"] = self.prompt
        for k in ("tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k", "stop", "seed"):
            v = getattr(self, k)
            if v is not None:
                b[k] = v
        if stream:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        return b


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")

    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)


class Response(BaseModel):
    """A logged response. Token ids, where the server returned them, are the ground truth."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    output_token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    usage: Usage | None = None
    #: per output position: {token_id: logprob} for the top-N the server returned
    top_logprobs: list[dict[int, float]] | None = None
    timings: dict[str, Any] | None = None
    #: other fields of the server's response (vLLM extras and the like), kept as returned
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("output_token_ids", "prompt_token_ids")
    @classmethod
    def _ids(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(t < 0 for t in v):
            raise ValueError("token ids must be >= 0")
        return v


class WorkloadItem(BaseModel):
    """One request with its optional logged response and where it came from (``FILE:LINE``)."""

    request: Request
    response: Response | None = None
    source: str = ""

    def named_model(self) -> str | None:
        """The model this request was for: its body's ``model``, else the logged response's, else
        ``metadata.model``; None when nothing names one."""
        for v in (self.request.extra.get("model"), self.response.extra.get("model") if self.response else None,
                  self.request.metadata.get("model")):
            if isinstance(v, str) and v.strip():
                return v.strip()
        return None
