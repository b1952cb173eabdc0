"""What a bench run asks the server besides its requests: ``/v1/models``, the identity paths of its
dialect, ``/metrics`` snapshots (``metrics_scrape``), and the KV-cache usage sampled during the run.

Every probe answers "nothing" (None, with why for ``/metrics``) instead of raising when the server does
not have a path or cannot be reached: the run decides what that means.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specgauge.loadgen.dialects import Dialect
from specgauge.loadgen.metrics_scrape import MetricsParseError, Snapshot
from specgauge.loadgen.runner import new_session
from specgauge.paths import public_url
from specgauge.records import KvSample

PROBE_TIMEOUT_S = 10.0


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header of ``--api-key`` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass
class ServerProbe:
    """The server's non-request paths, over one aiohttp session."""

    session: aiohttp.ClientSession
    base_url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)

    async def get_json_status(self, path: str) -> tuple[Any, int | None]:
        """The JSON at ``path`` and the HTTP status (None, None when unreachable or not JSON)."""
        try:
            async with self.session.get(self.base_url + path, headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as r:
                if r.status != 200:
                    return None, r.status
                return await r.json(content_type=None), r.status
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None, None

    async def get_json(self, path: str) -> Any:
        return (await self.get_json_status(path))[0]

    async def scrape(self) -> tuple[Snapshot | None, str | None]:
        """One ``/metrics`` snapshot, or None and why."""
        try:
            async with self.session.get(self.base_url + "/metrics", headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as r:
                if r.status != 200:
                    return None, f"/metrics answered HTTP {r.status}"
                text = await r.text()
            return Snapshot.parse(text, time.time()), None
        except MetricsParseError as e:
            return None, str(e)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return None, f"/metrics unreachable: {type(e).__name__}"

    async def identity(self, dialect: Dialect) -> dict[str, Any]:
        """The server's public URL and whatever its dialect's identity paths answer (version, models…)."""
        out: dict[str, Any] = {"base_url": public_url(self.base_url)}
        for p in dialect.identity_paths():
            v = await self.get_json(p)
            if v is not None:
                out[p] = v
        return out


async def unreachable(base_url: str, headers: dict[str, str]) -> tuple[str, str] | None:
    """Why nothing answers at ``base_url`` (("refused", "") or ("other", the error)), or None when
    something does (any HTTP status: what it means is the run's to decide). One GET of ``/v1/models``
    on a session of its own; a timeout is not "unreachable" (a busy server may be slow to answer)."""
    async with new_session(1) as session:
        try:
            async with session.get(base_url + "/v1/models", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)):
                return None
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, ConnectionRefusedError):
                return "refused", ""
            return "other", str(e.os_error) or type(e.os_error).__name__
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None


async def sample_kv(base_url: str, headers: dict[str, str], dialect: Dialect, interval: float, out: list[KvSample]) -> None:
    """KV-cache usage from /metrics every ``interval`` s during the run (the after-run snapshot sees
    an idle server), until cancelled, on a connection of its own: the run's pool holds
    ``max_concurrency`` connections, all busy streaming, and a scrape queued there waited for a
    stream to end (real vLLM, 4 streams: 2 samples in a 2.0 s run at ``--memory-interval 0.05``, 39 now)."""
    t0 = time.perf_counter()
    async with new_session(1) as session:
        probe = ServerProbe(session, base_url, headers)
        while True:
            await asyncio.sleep(interval)
            snap, _ = await probe.scrape()
            if snap is not None:
                m = dialect.memory(snap)
                if "kv_cache_usage" in m:
                    out.append(KvSample(t=time.perf_counter() - t0, kv_cache_usage=m["kv_cache_usage"]))
