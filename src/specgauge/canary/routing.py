"""Sticky, consistently hashed routing: which side serves a request at a given weight.

Each session key (the ``X-Session-Id`` header, else the body's ``user``) hashes to a fixed point
u in [0, 1) (keyed BLAKE2b, 64 bits, salted by ``--hash-seed``); the candidate serves it when
u < weight/100. The candidate's share of sessions is therefore the weight (within binomial
error), and because the threshold only moves up while the weight grows, a session that reached the
candidate stays there: {u < w₁} ⊂ {u < w₂} for w₁ < w₂. Requests without a key get a point of their
own (from a per-proxy request counter), so they split by the weight but are not sticky.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from typing import Any

_SCALE = float(2**64)


def bucket(key: str, salt: str = "") -> float:
    """The key's fixed point in [0, 1)."""
    h = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=salt.encode("utf-8")[:64])
    return int.from_bytes(h.digest(), "big") / _SCALE


def to_candidate(u: float, weight: float) -> bool:
    """True when a request at point ``u`` goes to the candidate at ``weight`` percent."""
    return u * 100.0 < weight


def session_key(headers: Mapping[str, str], body: Mapping[str, Any] | None, header: str) -> str | None:
    """The header's value, else the body's ``user``; None without either."""
    v = headers.get(header)
    if v:
        return v
    if body is not None:
        u = body.get("user")
        if isinstance(u, str) and u:
            return u
    return None


class Router:
    """Points for keyed and unkeyed requests; the weight is passed in per request."""

    def __init__(self, salt: str = "") -> None:
        self.salt = salt
        self._unkeyed = itertools.count()

    def point(self, key: str | None) -> tuple[float, bool]:
        """(u, keyed): the session's point, or a fresh one per unkeyed request."""
        if key is None:
            return bucket(f"\x00request-{next(self._unkeyed)}", self.salt), False
        return bucket(key, self.salt), True
