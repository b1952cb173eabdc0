"""Sticky consistent-hash routing: the candidate's share matches the weight within binomial error,
a session never leaves the candidate while the weight grows, the session key's sources, and the
config's step / duration parsing."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from specgauge.canary.config import CanaryConfig, parse_duration, parse_steps, public_url
from specgauge.canary.routing import Router, bucket, session_key, to_candidate
from specgauge.config import ConfigError

STEPS = [1.0, 5.0, 25.0, 50.0, 100.0]
SESSIONS = [f"user-{i}" for i in range(20_000)]


def test_share_matches_weight_within_binomial_error() -> None:
    r = Router("rollout-7")
    points = [r.point(s)[0] for s in SESSIONS]
    n = len(points)
    for w in STEPS + [0.5, 12.5, 99.0]:
        k = sum(to_candidate(u, w) for u in points)
        p = w / 100.0
        # a two-sided exact binomial test at 1e-4: a biased hash (or an off-by-one in the threshold) fails
        assert stats.binomtest(k, n, p).pvalue > 1e-4 or p in (0.0, 1.0), (w, k / n)
        assert abs(k / n - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_points_are_uniform() -> None:
    points = [bucket(s, "seed") for s in SESSIONS]
    assert stats.kstest(points, "uniform").pvalue > 1e-4
    assert all(0.0 <= u < 1.0 for u in points)


def test_sessions_never_switch_back_while_the_weight_grows() -> None:
    r = Router("s")
    sides: dict[str, list[bool]] = {s: [] for s in SESSIONS[:5000]}
    for w in STEPS:
        for s in sides:
            sides[s].append(to_candidate(r.point(s)[0], w))  # the same session asks again at each step
    for s, seq in sides.items():
        first = seq.index(True) if True in seq else len(seq)
        assert all(seq[first:]), (s, seq)  # once on the candidate, always on the candidate
        assert seq[-1]  # at 100 % everyone is on the candidate
    assert sum(seq[0] for seq in sides.values()) < sum(seq[2] for seq in sides.values())


def test_salt_reshuffles_and_unkeyed_requests_split_without_stickiness() -> None:
    a = {s for s in SESSIONS if to_candidate(bucket(s, "a"), 10)}
    b = {s for s in SESSIONS if to_candidate(bucket(s, "b"), 10)}
    assert len(a & b) < 0.2 * len(a)  # a new --hash-seed picks other users (independent: ~10 % overlap)
    r = Router("x")
    pts = [r.point(None) for _ in range(4000)]
    assert all(not keyed for _, keyed in pts)
    assert len({u for u, _ in pts}) == 4000  # each unkeyed request draws its own point
    k = sum(to_candidate(u, 25) for u, _ in pts)
    assert stats.binomtest(k, 4000, 0.25).pvalue > 1e-4


def test_session_key_header_then_user() -> None:
    assert session_key({"X-Session-Id": "h1"}, {"user": "u1"}, "X-Session-Id") == "h1"
    assert session_key({}, {"user": "u1"}, "X-Session-Id") == "u1"
    assert session_key({}, {"user": ""}, "X-Session-Id") is None
    assert session_key({}, None, "X-Session-Id") is None
    assert session_key({"X-Tenant": "t"}, {}, "X-Tenant") == "t"


def test_steps_durations_and_urls() -> None:
    assert parse_steps("1,5,25,50,100") == STEPS
    for bad in ("5,1", "0,10", "10,101", "a,b", ""):
        with pytest.raises(ConfigError):
            parse_steps(bad)
    assert parse_duration("60s") == 60 and parse_duration("1.5m") == 90 and parse_duration("500ms") == 0.5
    assert parse_duration("2h") == 7200 and parse_duration("3") == 3
    for bad in ("0s", "soon", "-1"):
        with pytest.raises(ConfigError):
            parse_duration(bad)
    assert public_url("http://user:pw@host:8000/v") == "http://host:8000/v"
    cfg = CanaryConfig(baseline="http://a:1/", candidate="http://k:secret@b:2", out_dir="/abs/path/run1")
    pub = cfg.public()
    assert pub["candidate"] == "http://b:2" and pub["out_dir"] == "run1" and "secret" not in str(pub)
    with pytest.raises(ValueError):
        CanaryConfig(baseline="ftp://a", candidate="http://b:1")
