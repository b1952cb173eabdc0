"""The proxy's parts that are not HTTP handling: an upstream, one routed request and its attempt
(``Exchange``), a body's inspection (JSON object, greedy, pairing key), and what the proxy needs from
its host. Kept apart from ``proxy`` so the handler module stays about the flow of bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import orjson
from aiohttp import web

from specgauge.canary.intake import split_credentials
from specgauge.canary.observe import Role, Side, is_greedy, pairing_key
from specgauge.loadgen.dialects import Dialect
from specgauge.records import FailureKind, RequestRecord

def client_error(status: int | None) -> bool:
    """A 4xx that says the request itself is wrong (not 408/429, which are the server's state)."""
    return status is not None and 400 <= status < 500 and status not in (408, 429)


class ProxyHost(Protocol):
    """What the proxy needs from the service that owns the weights and the windows."""

    def live_weight(self) -> float: ...
    def mirror_weight(self) -> float: ...
    def record(self, side: Side, role: Role, rec: RequestRecord, *, counted: bool, pair_key: str | None,
               client_gone: bool, client_error: bool) -> None: ...
    def status(self) -> dict[str, Any]: ...


@dataclass
class Upstream:
    side: Side
    base_url: str  #: may carry user:password; never logged (``config.public_url``)
    session: aiohttp.ClientSession
    dialect: Dialect
    url: str = field(init=False)  #: base_url without credentials: what requests are sent to
    basic_auth: str | None = field(init=False)  #: the URL's credentials as an Authorization value

    def __post_init__(self) -> None:
        self.url, self.basic_auth = split_credentials(self.base_url)

    def headers(self, client: dict[str, str]) -> dict[str, str]:
        """The client's headers for this upstream: its URL credentials only when the client brings none."""
        if self.basic_auth is None or any(k.lower() == "authorization" for k in client):
            return client
        return {**client, "Authorization": self.basic_auth}


@dataclass(slots=True)
class RoutedRequest:
    seq: int
    rid: str
    path_qs: str
    body: bytes
    obj: dict[str, Any] | None
    headers: dict[str, str]
    stream: bool
    point: float
    keyed: bool
    greedy: bool
    weight: float = 0.0  #: the live weight when it was routed
    mirror_weight: float = 0.0
    pair_key: str | None = None  #: for greedy pairing (body hash in live mode, id when mirrored)
    mirrored: bool = False


@dataclass(slots=True)
class Opened:
    resp: aiohttp.ClientResponse
    stream: bool = False
    first: bytes = b""
    first_t: float = 0.0  #: perf_counter() when the first bytes came in
    parsed: bool = True  #: False: ``first`` is still to be fed to the capture (after it was forwarded)
    raw: bytes = b""
    failure: tuple[FailureKind, str] | None = None
    asked: bool = False  #: the proxy added ``return_token_ids``: the client gets the body without the ids


@dataclass(slots=True)
class Pending:
    """A candidate attempt that failed before its first byte: recorded once the baseline answered."""

    rec: RequestRecord
    status: int | None


class RelayedResponse(web.StreamResponse):
    """A streamed response whose headers leave with the first chunk (one send instead of two: the
    proxy only prepares a response once that chunk is in hand). A no-op on aiohttp without the knob."""

    _send_headers_immediately = False


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, else None: orjson (a few µs), the standard library for what orjson
    refuses (NaN). It only routes and pairs; the upstream gets the body's bytes as received. Nesting
    past orjson's limit (1,024) is not parsed at all (the standard library would recurse into a
    RecursionError)."""
    if not body:
        return None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        if "recursion" in str(e).lower():
            return None
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError):
            return None
    return obj if isinstance(obj, dict) else None


def inspect_body(body: bytes) -> tuple[dict[str, Any] | None, bool, str | None]:
    """(JSON object or None, greedy, greedy pairing key) of a body: the CPU work on one request."""
    obj = json_object(body)
    greedy = is_greedy(obj)
    return obj, greedy, ("body:" + pairing_key(obj) if greedy and obj is not None else None)


def short_text(raw: bytes) -> str:
    return raw[:200].decode("utf-8", "replace").strip()
