"""The canary judge as a small HTTP service for Kubernetes roll-out controllers.

Argo Rollouts (an ``AnalysisTemplate`` metric with the ``web`` provider) and Flagger (a ``rollout``
webhook) call it during a canary step; each call is one *analysis*: the service sends the same
``requests`` workload requests to the baseline and to the candidate (``concurrency`` at a time,
interleaved, so both sides see the same load at the same time), diffs the candidate's ``/metrics``
counters over the analysis (acceptance), and judges the candidate with ``canary.judge.judge_window``
— the same guardrails, rank tests and minimum samples as ``specgauge canary``. Greedy (temperature
0) requests give output pairs: the candidate must answer them as the baseline does.

HTTP contract (``deploy/`` has the manifests):
- ``GET|POST /v1/analysis`` (Argo ``web``): always **200** with the verdict as JSON when the analysis
  ran — ``{"outcome": "PASS"|"FAIL"|"INCONCLUSIVE", "pass": bool, "score", "speedup", "reasons",
  "checks", "requests"}``; the template reads it with ``jsonPath: "{$}"``, ``successCondition:
  result.outcome == "PASS"``, ``failureCondition: result.outcome == "FAIL"`` (neither: Argo's
  Inconclusive). **502** when an upstream could not be reached at all (Argo: a measurement Error).
- ``POST /v1/flagger`` (Flagger webhook payload ``{"name", "namespace", "phase", "checksum",
  "metadata"}``): **200** on PASS (Flagger advances), **412** on FAIL and **409** on INCONCLUSIVE
  (any non-2xx halts advancement and counts a failed check; the body says why, and Flagger logs it).
- ``GET /healthz``; ``GET /metrics`` (Prometheus: ``specgauge_canary_analysis_total{outcome}``,
  ``specgauge_canary_analysis_score``, ``specgauge_canary_analysis_speedup``,
  ``specgauge_canary_analysis_candidate_acceptance_rate``).
The upstream URLs are fixed when the service starts: a caller cannot point it anywhere else.
One analysis runs at a time; a call during one waits for it.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, Field

from specgauge.canary.config import JudgeConfig
from specgauge.canary.judge import Judgement, Outcome, WindowInput, judge_window
from specgauge.canary.observe import Role, is_greedy, pairing_key
from specgauge.canary.window import PairResult, Sample
from specgauge.errors import UserError
from specgauge.loadgen.dialects import Dialect, detect
from specgauge.loadgen.metrics_scrape import MetricsParseError, Snapshot, diff
from specgauge.loadgen.runner import Runner, RunnerSettings, build_body
from specgauge.records import RequestRecord, SpecCounts
from specgauge.workload.schema import Request

FLAGGER_STATUS = {Outcome.PASS: 200, Outcome.FAIL: 412, Outcome.INCONCLUSIVE: 409}


class AnalysisConfig(BaseModel):
    baseline: str
    candidate: str
    workload: list[Path] = Field(default_factory=list, description="default: the built-in sample workload")
    requests: int = Field(default=24, ge=2, description="requests sent to each side per analysis")
    concurrency: int = Field(default=4, ge=1)
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1, description="cap each request's max_tokens (short analyses)")
    timeout_s: float = Field(default=120.0, gt=0)
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    judge: JudgeConfig = Field(default_factory=lambda: JudgeConfig(min_samples=10, min_tail_samples=10))
    api_key: str | None = Field(default=None, repr=False, exclude=True)


class AnalysisError(UserError):
    pass


def _requests(cfg: AnalysisConfig) -> list[Request]:
    from specgauge.workload.loaders import LoadOptions, load_workload
    from specgauge.workload.samples import sample_path

    paths = cfg.workload or [sample_path()]
    items = load_workload(paths, LoadOptions(limit=max(cfg.requests, 1)))
    reqs = [it.request for it in items]
    if cfg.max_tokens is not None:
        reqs = [r.model_copy(update={"max_tokens": min(r.max_tokens or cfg.max_tokens, cfg.max_tokens)}) for r in reqs]
    return [reqs[i % len(reqs)].model_copy(update={"id": f"{reqs[i % len(reqs)].id}#{i}"}) for i in range(cfg.requests)]


async def _scrape(session: aiohttp.ClientSession, url: str) -> tuple[Snapshot | None, dict[str, Any] | None]:
    snap = models = None
    try:
        async with session.get(url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status == 200:
                snap = Snapshot.parse((await r.read()).decode("utf-8", "replace"), t=time.time())
        async with session.get(url.rstrip("/") + "/v1/models", timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status == 200:
                models = await r.json(content_type=None)
    except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError, ValueError):
        pass
    return snap, models


class JudgeMetrics:
    """The judge's own ``/metrics``, in a registry of its own."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.m_total = Counter("specgauge_canary_analysis", "Analyses run, by outcome", ["outcome"], registry=r)
        self.m_score = Gauge("specgauge_canary_analysis_score", "Score of the last analysis (0-100)", registry=r)
        self.m_speedup = Gauge("specgauge_canary_analysis_speedup", "Typical speedup (baseline/candidate) of the speed metric in the last analysis", registry=r)
        self.m_acc = Gauge("specgauge_canary_analysis_candidate_acceptance_rate", "Candidate accepted/drafted tokens over the last analysis", registry=r)
        for g in (self.m_score, self.m_speedup, self.m_acc):
            g.set(math.nan)


class Analyzer:
    """Runs analyses against the two fixed upstreams; keeps the last verdicts' figures for /metrics."""

    def __init__(self, cfg: AnalysisConfig) -> None:
        self.cfg = cfg
        self.reqs = _requests(cfg)
        self.lock = asyncio.Lock()
        self.metrics = JudgeMetrics()

    async def _side(self, url: str, session: aiohttp.ClientSession, dialect: Dialect) -> tuple[Runner, RunnerSettings]:
        s = RunnerSettings(base_url=url, model=self.cfg.model, max_concurrency=self.cfg.concurrency,
                           timeout=self.cfg.timeout_s, api_key=self.cfg.api_key)
        return Runner(s, dialect, session), s

    async def analyse(self) -> dict[str, Any]:
        async with self.lock:
            return await self._analyse()

    async def _analyse(self) -> dict[str, Any]:
        cfg = self.cfg
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as session:
            bsnap, bmodels = await _scrape(session, cfg.baseline)
            csnap, cmodels = await _scrape(session, cfg.candidate)
            bd, cd = detect(bsnap, bmodels), detect(csnap, cmodels)
            if cfg.model is None:
                name = next((m.get("id") for m in (cmodels or {}).get("data", []) if isinstance(m, dict)), None)
                cfg = cfg.model_copy(update={"model": name})
            (brun, _), (crun, _) = await self._side(cfg.baseline, session, bd), await self._side(cfg.candidate, session, cd)
            brun.s.model = crun.s.model = cfg.model
            jobs = []
            for i, req in enumerate(self.reqs):
                jobs += [brun.send(req, i, 0.0), crun.send(req, i, 0.0)]
            recs: list[RequestRecord] = await asyncio.gather(*jobs)
            after, _ = await _scrape(session, cfg.candidate)
        base, cand = recs[0::2], recs[1::2]
        if not any(r.ok for r in base) and all(r.failure is not None and r.failure.value == "connection_error" for r in base):
            raise AnalysisError(f"baseline {cfg.baseline}: unreachable ({base[0].error})")
        if not any(r.ok for r in cand) and all(r.failure is not None and r.failure.value == "connection_error" for r in cand):
            raise AnalysisError(f"candidate {cfg.candidate}: unreachable ({cand[0].error})")
        spec: SpecCounts | None = None
        if csnap is not None and after is not None:
            spec = cd.counter_spec(diff(csnap, after), cfg.model)
        pairs = []
        for req, b, c in zip(self.reqs, base, cand, strict=True):
            body = build_body(req, crun.s, cd)
            if b.ok and c.ok and is_greedy(body):
                pairs.append(PairResult(key=pairing_key(body), kind="shadow", match=b.text == c.text))
        inp = WindowInput(baseline=[Sample.of(r, Role.live) for r in base], candidate=[Sample.of(r, Role.live) for r in cand],
                          spec=spec, spec_source="candidate /metrics diff over the analysis" if spec else None, pairs=pairs)
        j = await asyncio.to_thread(judge_window, inp, cfg.judge)
        return self._record(j, base, cand, spec)

    def _record(self, j: Judgement, base: list[RequestRecord], cand: list[RequestRecord], spec: SpecCounts | None) -> dict[str, Any]:
        self.metrics.m_total.labels(outcome=j.outcome.value).inc()
        self.metrics.m_score.set(j.score if j.score is not None else math.nan)
        speed = next((c for c in j.checks if c.name == f"relative:{j.speed_metric}"), None)
        s = (speed.evidence.get("speedup") if speed is not None else None) or {}
        est = s.get("estimate") if isinstance(s, dict) else s if isinstance(s, (int, float)) else None
        self.metrics.m_speedup.set(est if isinstance(est, (int, float)) else math.nan)
        rate = spec.acceptance_rate if spec is not None else math.nan
        self.metrics.m_acc.set(rate)
        rate = rate if math.isfinite(rate) else None  # JSON has no NaN
        return {"outcome": j.outcome.value, "pass": j.outcome is Outcome.PASS, "fail": j.outcome is Outcome.FAIL,
                "critical": j.critical, "score": j.score, "speed": j.speed, "speed_metric": j.speed_metric,
                "speedup": est if isinstance(est, (int, float)) and math.isfinite(est) else None, "acceptance_rate": rate,
                "requests": {"baseline": len(base), "candidate": len(cand),
                             "baseline_failed": sum(not r.ok for r in base), "candidate_failed": sum(not r.ok for r in cand)},
                "reasons": j.reasons, "checks": [c.model_dump(mode="json") for c in j.checks]}


def make_app(an: Analyzer) -> web.Application:
    async def analysis(_: web.Request) -> web.Response:
        try:
            return web.json_response(await an.analyse())
        except AnalysisError as e:
            return web.json_response({"error": str(e)}, status=502)

    async def flagger(req: web.Request) -> web.Response:
        try:
            payload = await req.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            return web.json_response({"error": "expected Flagger's webhook payload (a JSON object)"}, status=400)
        try:
            res = await an.analyse()
        except AnalysisError as e:
            return web.json_response({"error": str(e)}, status=502)
        res["canary"] = {k: payload.get(k) for k in ("name", "namespace", "phase", "checksum")}
        return web.json_response(res, status=FLAGGER_STATUS[Outcome(res["outcome"])])

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(an.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/v1/analysis", analysis), web.post("/v1/analysis", analysis),
                    web.put("/v1/analysis", analysis), web.post("/v1/flagger", flagger),
                    web.get("/healthz", healthz), web.get("/metrics", metrics)])
    return app


class AnalysisThread:
    """The service on its own event loop thread (tests, ``specgauge canary-judge``): ``base_url`` once up."""

    def __init__(self, cfg: AnalysisConfig) -> None:
        self.cfg = cfg
        self.base_url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="specgauge-analysis", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as e:  # reported by start()
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(make_app(Analyzer(self.cfg)), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.cfg.host, self.cfg.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise AnalysisError(f"--port {self.cfg.port}: cannot listen on {self.cfg.host} ({e.strerror or e})") from None
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://{self.cfg.host}:{port}"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def start(self) -> AnalysisThread:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> AnalysisThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
