"""HTTP for the audit: one OpenAI-compatible server (candidate or reference), non-streamed requests.

Knows how to ask for many completions cheaply (the OpenAI ``n`` parameter where the server takes
it) and how to read each completion's tokens (vLLM's / the embedded server's ``return_token_ids``,
else the tokens of ``logprobs``). It keeps no results: the caller stores each answer as it comes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel

from specgauge.audit.prompts import AuditPrompt
from specgauge.errors import UserError
from specgauge.paths import public_url


class AuditError(UserError):
    """A server fault or a setting the audit cannot work with; the message names the side and URL."""


TokenSource = Literal["token_ids", "logprobs"]


class ServerInfo(BaseModel):
    side: str
    base_url: str
    model: str
    supports_n: bool
    token_source: TokenSource


class Completion(BaseModel):
    tokens: list[int | str]
    finish_reason: str | None = None


class SideClient:
    """Requests to one server; ``probe`` first, then ``complete``."""

    def __init__(self, side: str, base_url: str, session: aiohttp.ClientSession, api_key: str | None = None,
                 model: str | None = None, timeout: float = 300.0) -> None:
        self.side, self.base_url = side, base_url.rstrip("/")
        self.session, self.model, self.timeout = session, model, timeout
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.info: ServerInfo | None = None

    def _where(self, path: str) -> str:
        return f"{self.side} server {public_url(self.base_url)}{path}"

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        try:
            async with self.session.request(method, self.base_url + path, headers=self._headers,
                                            data=None if body is None else json.dumps(body),
                                            timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                text = await r.text()
                try:
                    return r.status, json.loads(text)
                except json.JSONDecodeError:
                    return r.status, text
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise AuditError(f"{self._where(path)}: {type(e).__name__}: {e}") from None

    async def _post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        status, data = await self._request("POST", endpoint, body)
        if status != 200 or not isinstance(data, dict):
            raise AuditError(f"{self._where(endpoint)}: HTTP {status}: {_message(data)}")
        return data

    async def probe(self, prompt: AuditPrompt, n: int) -> ServerInfo:
        """Find the model name, whether ``n`` > 1 works, and where the tokens are."""
        if self.model is None:
            status, data = await self._request("GET", "/v1/models")
            try:
                self.model = str(data["data"][0]["id"]) if status == 200 else None
            except (KeyError, IndexError, TypeError):
                self.model = None
            if self.model is None:
                raise AuditError(f"{self._where('/v1/models')}: HTTP {status}: no model listed; pass --model")
        supports_n = False
        if n > 1:
            status, data = await self._request("POST", prompt.endpoint, self._body(prompt, 1, 1.0, 1.0, 2, "token_ids"))
            supports_n = status == 200 and isinstance(data, dict) and len(data.get("choices") or []) == 2
        source: TokenSource | None = None
        for candidate in ("token_ids", "logprobs"):
            status, data = await self._request("POST", prompt.endpoint, self._body(prompt, 2, 1.0, 1.0, 1, candidate))
            if status == 200 and isinstance(data, dict) and data.get("choices") and \
                    _tokens(data["choices"][0], candidate, prompt) is not None:
                source = candidate
                break
        if source is None:
            raise AuditError(f"{self._where(prompt.endpoint)}: the server returns neither token ids "
                             "(return_token_ids) nor logprobs tokens; the audit compares tokens position by position")
        self.info = ServerInfo(side=self.side, base_url=self.base_url, model=self.model, supports_n=supports_n,
                               token_source=source)
        return self.info

    def _body(self, prompt: AuditPrompt, max_tokens: int, temperature: float, top_p: float, n: int,
              source: TokenSource) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, **prompt.body(), "max_tokens": max_tokens,
                                "temperature": temperature, "top_p": top_p}
        if n != 1:
            body["n"] = n
        if source == "token_ids":
            body["return_token_ids"] = True
        else:
            body["logprobs"] = True if prompt.messages is not None else 1
        return body

    async def complete(self, prompt: AuditPrompt, max_tokens: int, temperature: float, top_p: float = 1.0,
                       n: int = 1) -> list[Completion]:
        """``n`` completions (one request; ``n`` must be 1 unless the probe found it supported)."""
        assert self.info is not None, "probe() first"
        body = self._body(prompt, max_tokens, temperature, top_p, n, self.info.token_source)
        data = await self._post(prompt.endpoint, body)
        choices = data.get("choices") or []
        if len(choices) != n:
            raise AuditError(f"{self._where(prompt.endpoint)}: asked for {n} completions, got {len(choices)}")
        out = []
        for c in sorted(choices, key=lambda c: c.get("index", 0)):
            toks = _tokens(c, self.info.token_source, prompt)
            if toks is None:
                raise AuditError(f"{self._where(prompt.endpoint)}: a completion came back without its tokens")
            out.append(Completion(tokens=toks, finish_reason=c.get("finish_reason")))
        return out


def _tokens(choice: dict[str, Any], source: TokenSource, prompt: AuditPrompt) -> list[int | str] | None:
    if source == "token_ids":
        ids = choice.get("token_ids")
        return [int(t) for t in ids] if isinstance(ids, list) else None
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    if prompt.messages is not None:  # chat: {"content": [{"token": ..., "logprob": ...}, ...]}
        content = lp.get("content")
        return [str(t.get("token")) for t in content] if isinstance(content, list) else None
    toks = lp.get("tokens")  # completions: {"tokens": [...], "token_logprobs": [...]}
    return [str(t) for t in toks] if isinstance(toks, list) else None


def _message(data: Any) -> str:
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(data.get("message"), str):
            return data["message"][:300]
    return str(data)[:300]
