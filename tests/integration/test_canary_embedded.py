"""The canary in front of two real embedded servers (``specgauge serve``, the shipped tiny target; the
candidate speculating with n-gram drafts), driven by the official openai client:
- healthy candidate: the weight climbs the steps to 100, every request went where its session's
  hash and the weight at routing said, the split matches the weight within binomial error, and no
  session ever went back from the candidate to the baseline while the weight grew;
- ``--shadow``: clients only see the baseline, the candidate gets mirrored copies, the greedy
  outputs are compared and their exact-match rate reported;
- the candidate starts failing mid-run (here the candidate is the scripted fault server, since a
  real server cannot be told to return 500s on cue): rollback within ``--failure-limit``
  evaluations, and no client saw an error.
Short intervals, few requests; no wall-clock assertions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from scipy import stats

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

from specgauge.canary import CanaryConfig, CanaryThread, JudgeConfig  # noqa: E402
from specgauge.canary.eventlog import read_events  # noqa: E402
from specgauge.canary.proxy import TAG_HEADER  # noqa: E402
from specgauge.canary.routing import bucket, to_candidate  # noqa: E402
from specgauge.testing.fakeserver import FakeServer  # noqa: E402
from specgauge.models import available, target_dir  # noqa: E402
from specgauge.records import ResultsFile  # noqa: E402
from specgauge.servers import ManagedServer, embedded_server  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available(), reason="shipped tiny models missing")]

PROMPTS = ["Summarise: the printer on floor 3 jams every morning.", "Review: def add(a, b): return a - b",
           "Answer from the context: the office opens at 9.", "List the errors in: timeout, timeout, refused.",
           "Write a one-line status update for the on-call channel."]
MODEL = "tiny-target"
KEY = "sk-embedded-canary-key"  #: both servers require it: the proxy must pass the client's key through


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    logs = tmp_path_factory.mktemp("canary-servers")
    base = embedded_server(target_dir(), logs / "baseline.log", max_batch=4, extra=("--api-key", KEY))
    # n-gram drafting: cheap enough on 2 CPU cores (the draft model makes this tiny target ~2x slower here,
    # which the judge rightly rolls back)
    cand = embedded_server(target_dir(), logs / "candidate.log", max_batch=4, extra=("--api-key", KEY),
                           speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                                               "prompt_lookup_max": 3})
    started: list[ManagedServer] = []
    try:
        with ThreadPoolExecutor(2) as ex:  # start both at once
            for s in ex.map(lambda m: m.start(), (base, cand)):
                started.append(s)
        yield base.base_url, cand.base_url
    finally:
        for s in (base, cand):
            s.stop()


def drive(url: str, until: Callable[[dict[str, Any]], bool], *, sessions: int, deadline_s: float,
          temperature: float | None = 0.0, workers: int = 3, streamed_only: bool = False) -> list[tuple[str, str, float]]:
    """Send chat requests (streamed with usage, and not) from ``sessions`` users through the proxy
    until ``until(status)``; every call must succeed. Returns (session, side that answered, time)."""
    seen: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    counter = iter(range(10**9))
    client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)

    def one() -> None:
        while not stop.is_set():
            i = next(counter)
            session = f"session-{i % sessions}"
            kw: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                                  "max_tokens": 12}
            if temperature is not None:
                kw["temperature"] = temperature
            if i % 2:
                kw["extra_headers"] = {"X-Session-Id": session}
            else:
                kw["user"] = session
            if i % 3 or streamed_only:
                raw = client.chat.completions.with_raw_response.create(stream=True, stream_options={"include_usage": True}, **kw)
                chunks = list(raw.parse())
                assert chunks and chunks[-1].usage is not None
            else:
                raw = client.chat.completions.with_raw_response.create(**kw)
                assert raw.parse().choices[0].message.content is not None
            with lock:
                seen.append((session, raw.headers[TAG_HEADER], time.monotonic()))

    with ThreadPoolExecutor(workers) as ex:
        futs = [ex.submit(one) for _ in range(workers)]
        t_end = time.monotonic() + deadline_s
        try:
            while time.monotonic() < t_end:
                if until(httpx.get(url + "/canary/status").json()):
                    break
                if any(f.done() for f in futs):
                    break  # a worker failed: its exception is raised below
                time.sleep(0.2)
        finally:
            stop.set()
        for f in futs:
            f.result()
    return seen


def test_healthy_candidate_climbs_to_100_sticky_and_split_by_weight(servers: tuple[str, str], tmp_path: Path) -> None:
    b, c = servers
    out = tmp_path / "o"
    cfg = CanaryConfig(baseline=b, candidate=c, port=0, out_dir=out, steps=[20.0, 50.0, 100.0], interval_s=1.5,
                       max_weight_without_speedup=100, hash_seed="t1",
                       judge=JudgeConfig(min_samples=4, min_speedup=3.0))  # a wide margin: CPU timings here are noisy
    with CanaryThread(cfg) as cy:
        seen = drive(cy.base_url, lambda s: s["state"] != "running", sessions=40, deadline_s=150)
        status = httpx.get(cy.base_url + "/canary/status").json()
        metrics = httpx.get(cy.base_url + "/metrics").text
    assert status["state"] == "complete" and status["weight"] == 100.0, status
    assert status["totals"]["client_visible_failures"] == 0
    events = read_events(out / "decisions.jsonl")
    actions = [(e["decision"]["action"], e["decision"]["to_weight"]) for e in events if e["event"] == "evaluation"]
    moves = [a for a in actions if a[0] in ("promote", "complete", "rollback")]
    assert moves == [("promote", 50.0), ("promote", 100.0), ("complete", 100.0)], actions
    # sticky: once a session reached the candidate it never went back while the weight grew
    by_session: dict[str, list[str]] = {}
    for session, side, _ in sorted(seen, key=lambda x: x[2]):
        by_session.setdefault(session, []).append(side)
    for session, sides in by_session.items():
        if "candidate" in sides:
            first = sides.index("candidate")
            assert all(s == "candidate" for s in sides[first:]), (session, sides)
    # every live request went where its point and the weight at routing said
    recs = [r for side in ("baseline", "candidate") for r in ResultsFile(out / side / "results.jsonl").existing()]
    live = [r for r in recs if r.extra["canary"]["role"] == "live"]
    assert live and all((r.extra["canary"]["side"] == "candidate") == to_candidate(r.extra["canary"]["point"], r.extra["canary"]["weight"])
                        for r in live)
    # the points are the sessions' hashes, and the split matches the weight within binomial error (per session)
    points = {round(bucket(f"session-{i}", "t1"), 6) for i in range(40)}
    assert {r.extra["canary"]["point"] for r in live} <= points
    for w in (20.0, 50.0):
        pts = {r.extra["canary"]["point"] for r in live if r.extra["canary"]["weight"] == w}
        k = sum(to_candidate(p, w) for p in pts)
        assert stats.binomtest(k, len(pts), w / 100).pvalue > 1e-3, (w, k, len(pts))
    # the candidate's acceptance came from its own counters, window by window
    acc = [float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("specgauge_canary_candidate_acceptance_rate")]
    assert acc and 0.0 <= acc[0] <= 1.0
    windows = [e["window"]["acceptance"] for e in events if e["event"] == "evaluation" and e["window"]["acceptance"]]
    assert windows and sum(w["draft_tokens"] for w in windows) > 0
    assert all(w["source"].endswith(":/metrics") for w in windows)  # the counters, not per-request counts
    evals = [e for e in events if e["event"] == "evaluation" and e["window"]["weight"] < 100]
    assert any(any(ch["name"] == "guardrail:failure_rate" for ch in e["judgement"]["checks"]) for e in evals)
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY not in f.read_text(errors="replace"), f  # passed through, never written


def test_shadow_mirrors_and_compares_greedy_outputs(servers: tuple[str, str], tmp_path: Path) -> None:
    b, c = servers
    out = tmp_path / "o"
    cfg = CanaryConfig(baseline=b, candidate=c, port=0, out_dir=out, steps=[100.0], interval_s=1.0, shadow=True,
                       keep_outputs=True, judge=JudgeConfig(min_samples=3, min_pairs=3, min_speedup=3.0))
    with CanaryThread(cfg) as cy:
        seen = drive(cy.base_url, lambda s: s["totals"]["greedy_pairs"] >= 12, sessions=10, deadline_s=90)
    result = cy.result
    assert result is not None
    assert {side for _, side, _ in seen} == {"baseline"}  # clients only ever saw the baseline
    cand = ResultsFile(out / "candidate" / "results.jsonl").existing()
    base = ResultsFile(out / "baseline" / "results.jsonl").existing()
    assert cand and {r.extra["canary"]["role"] for r in cand} == {"shadow"}
    assert {r.id for r in cand} <= {r.id for r in base}  # each mirror is paired with the request it copies
    by_id = {r.id: r for r in base}
    matched = sum(by_id[r.id].text == r.text for r in cand if r.ok and by_id[r.id].ok)
    both = sum(1 for r in cand if r.ok and by_id[r.id].ok)
    assert result.greedy_pairs == both >= 12
    assert result.exact_match_rate == pytest.approx(matched / both)
    assert result.exact_match_rate >= 0.9  # the embedded engine is lossless at temperature 0
    assert json.loads((out / "summary.json").read_text())["exact_match_rate"] == result.exact_match_rate


def test_candidate_failing_mid_run_falls_back_without_client_errors(servers: tuple[str, str], tmp_path: Path) -> None:
    b, _ = servers
    out = tmp_path / "o"
    with FakeServer(model=MODEL) as fake:
        cfg = CanaryConfig(baseline=b, candidate=fake.base_url, port=0, out_dir=out, steps=[25.0, 50.0, 100.0],
                           interval_s=1.0, failure_limit=2, max_weight_without_speedup=100,
                           judge=JudgeConfig(min_samples=3, min_speedup=2.0, metrics=["ttft"]))
        with CanaryThread(cfg) as cy:
            # (the scripted server always streams, so the clients do too)
            drive(cy.base_url, lambda s: s["weight"] >= 50.0, sessions=40, deadline_s=60, temperature=None, streamed_only=True)
            assert httpx.get(cy.base_url + "/canary/status").json()["weight"] >= 50.0
            evals_before = cy.call(_evaluations(cy))
            fake.override = "fault:http500"
            drive(cy.base_url, lambda s: s["state"] == "rolled_back", sessions=40, deadline_s=60, temperature=None,
                  streamed_only=True)
            status = httpx.get(cy.base_url + "/canary/status").json()
    assert status["state"] == "rolled_back" and status["weight"] == 0.0
    assert status["evaluations"] - evals_before <= cfg.failure_limit  # fell back within --failure-limit evaluations
    assert status["totals"]["client_visible_failures"] == 0 and status["totals"]["retried_on_baseline"] > 0
    events = [e for e in read_events(out / "decisions.jsonl") if e["event"] == "evaluation"]
    last = events[-1]
    assert last["decision"]["action"] == "rollback" and "candidate requests failed" in last["decision"]["reason"]
    fr = next(ch for ch in last["judgement"]["checks"] if ch["name"] == "guardrail:failure_rate")
    assert fr["status"] == "fail" and fr["evidence"]["kinds"] == {"http_status": fr["evidence"]["failed"]}


async def _evaluations(cy: CanaryThread) -> int:
    assert cy.service.controller is not None
    return cy.service.controller.state.evaluations
