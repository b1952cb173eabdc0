"""The canary service: owns the upstream sessions, the proxy's HTTP server, the current window, the
controller and the files; every ``interval`` it closes the window, judges it (in a worker thread, so
streams keep flowing), decides, logs the decision with its evidence and applies the new weight.

Files in ``out_dir``: ``canary.json`` (config without secrets, upstream identities),
``decisions.jsonl`` (``eventlog``), ``state.json`` (``controller``), ``baseline/results.jsonl`` and
``candidate/results.jsonl`` (one ``RequestRecord`` per proxied request, outputs dropped unless
``keep_outputs``; ``specgauge compare`` and ``report`` read them), and ``summary.json`` at the end.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from specgauge.canary.config import CanaryConfig
from specgauge.canary.controller import (
    Action,
    CanaryStateError,
    Controller,
    Decision,
    StateFile,
    fingerprint,
)
from specgauge.canary.eventlog import DecisionLog, clean, cut_torn_tail
from specgauge.canary.judge import Judgement, WindowInput, judge_window
from specgauge.canary.metrics import ProxyMetrics
from specgauge.canary.observe import Role, Side
from specgauge.canary.proxy import Proxy, Upstream
from specgauge.canary.summary import (
    CanaryResult,
    RunTotals,
    WindowRow,
    build_result,
    window_latency,
)
from specgauge.canary.token_ids import TokenIdAsk
from specgauge.canary.window import Pairing, Window
from specgauge.errors import UserError
from specgauge.loadgen.dialects import Dialect, detect, get_dialect
from specgauge.loadgen.metrics_scrape import MetricsParseError, Snapshot, diff
from specgauge.paths import public_url
from specgauge.records import RequestRecord, ResultsFile, SpecCounts
from specgauge.offline.record_fields import token_ids
from specgauge.i18n import en
from specgauge.stats.replay_check import ReplayCheck, check_run, unavailable


class CanaryError(UserError):
    """The canary cannot start: an unreachable upstream, a port in use, a state of another canary."""


async def _get(session: aiohttp.ClientSession, url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        return r.status, await r.read()


def _state_problem(st: Any, steps: list[float]) -> str | None:
    """What makes a saved state impossible for these steps (a weight off the schedule, counts below 0)."""
    if not 0 <= st.step < len(steps):
        return f"step {st.step} is outside the {len(steps)} steps"
    if not (math.isfinite(st.weight) and (st.weight == steps[st.step] or (st.weight == 0 and st.status == "rolled_back"))):
        return f"weight {st.weight} is not step {st.step} ({steps[st.step]:g}%) of the schedule"
    if st.failed_evaluations < 0 or st.evaluations < 0:
        return "negative evaluation counts"
    return None


class CanaryService:
    def __init__(self, cfg: CanaryConfig, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.cfg = cfg
        self.on_event = on_event
        self.metrics = ProxyMetrics()
        self.totals = RunTotals()
        self.rows: list[WindowRow] = []
        self.window = Window()
        self.pairing = Pairing()
        self.controller: Controller | None = None
        self.proxy: Proxy | None = None
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._sessions: list[aiohttp.ClientSession] = []
        self._files: dict[Side, ResultsFile] = {}
        self._log = DecisionLog(cfg.out_dir / "decisions.jsonl")
        self._state_file = StateFile(cfg.out_dir / "state.json")
        self._model: str | None = None
        self._identity: dict[str, Any] = {}
        self._started_mono = time.monotonic()
        self._started = time.time()
        self._evaluating = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------------------
    def _session(self) -> aiohttp.ClientSession:
        c = self.cfg
        s = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            cookie_jar=aiohttp.DummyCookieJar(),  # one client's Set-Cookie must never ride on another's request
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=c.connect_timeout_s, sock_read=c.stall_timeout_s),
            trust_env=False, auto_decompress=True,
        )
        self._sessions.append(s)
        return s

    async def _probe(self, name: str, url: str, session: aiohttp.ClientSession) -> dict[str, Any]:
        """GET /v1/models; an unreachable upstream (or a 5xx) is the user's to fix. 401/403 is fine:
        the proxy has no key of its own, clients bring theirs."""
        try:
            status, raw = await _get(session, url + "/v1/models")
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise CanaryError(f"--{name} {public_url(url)}: unreachable ({type(e).__name__}: {e})") from None
        if status >= 500:
            raise CanaryError(f"--{name} {public_url(url)}: GET /v1/models answered HTTP {status}")
        models: dict[str, Any] = {}
        if status == 200:
            try:
                obj = json.loads(raw)
                models = obj if isinstance(obj, dict) else {}
            except ValueError:
                pass
        ids = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
        return {"status": status, "models": ids, "raw": models}

    async def _scrape(self, session: aiohttp.ClientSession, url: str) -> Snapshot | None:
        try:
            status, raw = await _get(session, url + "/metrics", timeout=5.0)
            if status != 200:
                return None
            return Snapshot.parse(raw.decode("utf-8", "replace"), t=time.time())
        except (aiohttp.ClientError, OSError, TimeoutError, MetricsParseError):
            return None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._close_sessions()
            self._log.close()
            for f in self._files.values():
                f.close()
            raise

    async def _start(self) -> None:
        cfg = self.cfg
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        bs, cs = self._session(), self._session()
        bi = await self._probe("baseline", cfg.baseline, bs)
        ci = await self._probe("candidate", cfg.candidate, cs)
        if bi["models"] and ci["models"] and set(bi["models"]).isdisjoint(ci["models"]):
            raise CanaryError(f"the baseline serves {bi['models']} and the candidate {ci['models']}: a canary needs the same "
                              "model name on both (requests are forwarded unchanged)")
        self._model = (ci["models"] or [None])[0]
        snap = await self._scrape(cs, cfg.candidate)
        cdialect = get_dialect(cfg.candidate_dialect) if cfg.candidate_dialect != "auto" else detect(snap, ci["raw"])
        bsnap = await self._scrape(bs, cfg.baseline)
        bdialect: Dialect = detect(bsnap, bi["raw"])
        # the candidate is asked for token ids itself when it speaks vLLM's dialect (guardrail:acceptance_replay)
        ask = TokenIdAsk.for_dialect(cdialect.name) if cfg.asks_token_ids() else None
        self._identity = {"baseline": {"url": public_url(cfg.baseline), "models": bi["models"], "dialect": bdialect.name},
                          "candidate": {"url": public_url(cfg.candidate), "models": ci["models"], "dialect": cdialect.name,
                                        "counters": snap is not None and cdialect.counter_spec(diff(snap, snap), self._model) is not None,
                                        "asked_token_ids": ask is not None}}
        self._restore_state()
        assert self.controller is not None
        self._log.open()
        self._emit({"event": "resume" if self.controller.state.evaluations else "start", "t": time.time(),
                    "config": cfg.public(), "upstreams": self._identity, "state": self.controller.state})
        (cfg.out_dir / "canary.json").write_text(json.dumps(clean({
            "kind": "specgauge.canary", "started_at": self._started, "config": cfg.public(), "upstreams": self._identity,
        }), indent=2, ensure_ascii=False), encoding="utf-8")
        for side in Side:
            path = cfg.out_dir / side.value / "results.jsonl"
            cut_torn_tail(path)  # a restart after a crash mid-write: the next record starts its own line
            self._files[side] = ResultsFile(path).open()
        self.window = Window(weight=self.controller.weight, snapshot=snap)
        self._update_metrics()
        self.proxy = Proxy(self, Upstream(Side.baseline, cfg.baseline, bs, bdialect), Upstream(Side.candidate, cfg.candidate, cs, cdialect),
                           session_header=cfg.session_header, hash_seed=cfg.hash_seed, timeout_s=cfg.timeout_s,
                           first_byte_timeout_s=cfg.first_byte_timeout_s, shadow_max_inflight=cfg.shadow_max_inflight,
                           tag_responses=cfg.tag_responses, metrics_body=self.metrics.render, metrics_type=self.metrics.content_type,
                           stall_timeout_s=cfg.stall_timeout_s, body_timeout_s=cfg.body_timeout_s,
                           max_body_bytes=cfg.max_body_bytes, max_inflight_bytes=cfg.max_inflight_bytes, token_ids=ask)
        proxy = self.proxy
        self.metrics.shadow_skipped.set_function(lambda: float(proxy.shadow_skipped))
        # keepalive_timeout bounds a connection without a complete request (aiohttp closes it then): an idle
        # keep-alive connection, one that never sends, and one that trickles its headers (slowloris)
        self._runner = web.AppRunner(self.proxy.app(), access_log=None, handle_signals=False, shutdown_timeout=5.0,
                                     keepalive_timeout=cfg.header_timeout_s, lingering_time=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.host, cfg.port, reuse_address=True)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            raise CanaryError(f"--port {cfg.port}: cannot listen on {cfg.host}:{cfg.port} ({e.strerror or e})") from None
        server = site._server
        self.port = server.sockets[0].getsockname()[1] if server is not None and server.sockets else cfg.port  # type: ignore[union-attr]
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    def _restore_state(self) -> None:
        cfg = self.cfg
        fp = fingerprint(public_url(cfg.baseline), public_url(cfg.candidate), cfg.steps, cfg.mode)
        saved = None if cfg.reset_state else self._state_file.load()
        if saved is not None and saved.fingerprint != fp:
            raise CanaryStateError(f"{self._state_file.path}: the saved state belongs to another canary (other upstreams, "
                                   "steps or mode); use another --out-dir or pass --reset-state")
        if saved is not None:
            bad = _state_problem(saved, cfg.steps)
            if bad:
                raise CanaryStateError(f"{self._state_file.path}: {bad}; not a state this canary wrote (remove it or pass "
                                       "--reset-state)")
        cap = 100.0 if cfg.shadow else cfg.max_weight_without_speedup  # mirroring exposes nobody: no speedup needed
        if saved is not None:
            self.controller = Controller(cfg.steps, cfg.failure_limit, cap, saved)
        else:
            self.controller = Controller.fresh(cfg.steps, cfg.failure_limit, cap, fp)
            self._state_file.save(self.controller.state)

    @property
    def base_url(self) -> str:
        return f"http://{self.cfg.host}:{self.port}"

    async def _tick_loop(self) -> None:
        nxt = time.monotonic() + self.cfg.interval_s
        while True:
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))
            nxt += self.cfg.interval_s
            try:
                await self.evaluate()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a judging bug must not take the proxy (and the traffic) down
                self._emit({"event": "error", "t": time.time(), "error": f"{type(e).__name__}: {e}"})

    async def stop(self) -> CanaryResult:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self.proxy is not None:
            await self.proxy.drain_shadows(timeout=5.0)
        if self._runner is not None:
            await self._runner.cleanup()
        await self._close_sessions()
        result = self.result()
        if self.controller is not None:
            self._emit({"event": "stop", "t": time.time(), "state": self.controller.state, "result": result.headline()})
        self._log.close()
        for f in self._files.values():
            f.close()
        (self.cfg.out_dir / "summary.json").write_text(json.dumps(clean(result), indent=2, ensure_ascii=False), encoding="utf-8")
        return result

    async def _close_sessions(self) -> None:
        for s in self._sessions:
            await s.close()
        self._sessions.clear()

    # -- what the proxy asks ------------------------------------------------------------------------
    def live_weight(self) -> float:
        if self.controller is None or self.cfg.shadow:
            return 0.0
        return self.controller.state.weight

    def mirror_weight(self) -> float:
        if self.controller is None or not self.cfg.shadow:
            return 0.0
        return self.controller.state.weight

    def record(self, side: Side, role: Role, rec: RequestRecord, *, counted: bool, pair_key: str | None, client_gone: bool,
               client_error: bool) -> None:
        self.window.add(side, role, rec, counted=counted, client_gone=client_gone, client_error=client_error)
        if (self.cfg.speculative_config is not None and side is Side.candidate and counted and rec.ok
                and token_ids(rec.extra) is not None):
            self.window.replay.append(rec.model_copy(update={"chunks": [], "text": ""}))
        if pair_key is not None and rec.ok:
            pr = self.pairing.add(side, pair_key, rec.text)
            if pr is not None:
                self.window.pairs.append(pr)
                self.totals.pairs += 1
                self.totals.pairs_matched += pr.match
        self.totals.add(side, role, rec, counted=counted, client_gone=client_gone, client_error=client_error)
        outcome = "client_gone" if client_gone else "client_error" if client_error else "ok" if rec.ok else "failed"
        self.metrics.requests.labels(upstream=side.value, role=role.value, outcome=outcome).inc()
        if rec.extra.get("canary", {}).get("retried_on_baseline"):
            self.metrics.retried.inc()
        if rec.ok:
            if rec.ttft_s is not None:
                self.metrics.ttft.labels(upstream=side.value).observe(rec.ttft_s)
            if rec.e2e_s is not None:
                self.metrics.e2e.labels(upstream=side.value).observe(rec.e2e_s)
        if self.totals.pairs:
            self.metrics.exact_match.set(self.totals.pairs_matched / self.totals.pairs)
        f = self._files.get(side)
        if f is not None:
            if not self.cfg.keep_outputs:
                rec.text = ""
            f.append(rec)

    def status(self) -> dict[str, Any]:
        assert self.controller is not None
        st = self.controller.state
        w = self.window
        return clean({
            "mode": self.cfg.mode, "state": st.status, "weight": st.weight, "step": st.step, "steps": self.cfg.steps,
            "failed_evaluations": st.failed_evaluations, "failure_limit": self.cfg.failure_limit, "evaluations": st.evaluations,
            "rollback_reason": st.rollback_reason,
            "window": {"age_s": round(w.age(), 3), "baseline": len(w.samples[Side.baseline]), "candidate": len(w.samples[Side.candidate]),
                       "pairs": len(w.pairs)},
            "last": self.rows[-1] if self.rows else None,
            "totals": self.totals.as_dict(),
            "token_ids": None if self.proxy is None or self.proxy.token_ids is None else
            {"asked": self.proxy.token_ids.asked, "refused": self.proxy.token_ids.refused},
        })

    # -- judging ---------------------------------------------------------------------------------------
    def _spec(self, snap: Snapshot | None) -> tuple[SpecCounts | None, str | None]:
        w = self.window
        assert self.proxy is not None
        if snap is not None and w.snapshot is not None:
            d = diff(w.snapshot, snap)
            spec = self.proxy.candidate.dialect.counter_spec(d, self._model)
            if spec is not None:
                return spec, spec.source or "candidate /metrics diff"
        per_req = [s.spec for s in w.samples[Side.candidate] if s.spec is not None]
        if per_req:
            total = SpecCounts.total(per_req)
            return total, "candidate per-request counts"
        return None, None

    async def evaluate(self) -> dict[str, Any] | None:
        """Judge the current window and act on it; the logged event as JSON data (None once rolled back)."""
        async with self._evaluating:
            assert self.controller is not None and self.proxy is not None
            ctl = self.controller
            if ctl.state.status == "rolled_back":
                return None
            w = self.window
            end = time.time()
            snap = await self._scrape(self.proxy.candidate.session, self.cfg.candidate)
            spec, source = self._spec(snap)
            replay: ReplayCheck | None = None
            if self.cfg.speculative_config is not None and w.replay:  # the candidate's outputs through its own drafter
                replay = await asyncio.to_thread(check_run, list(w.replay), self.cfg.speculative_config, "canary --speculative-config",
                                                 collapse=self.cfg.judge.collapse)
            elif self.cfg.speculative_config is not None and any(s.ok for s in w.samples[Side.candidate]):
                replay = unavailable(self._why_no_token_ids())
            inp = WindowInput(baseline=list(w.samples[Side.baseline]), candidate=list(w.samples[Side.candidate]), spec=spec,
                              spec_source=source, pairs=list(w.pairs), baseline_expected=self.cfg.shadow or ctl.weight < 100,
                              replay=replay)
            j: Judgement = await asyncio.to_thread(judge_window, inp, self.cfg.judge)
            d: Decision = ctl.decide(j)
            self._state_file.save(ctl.state)
            window_info = {"start": w.start, "end": end, "duration_s": round(end - w.start, 3), "weight": w.weight,
                           "requests": {"baseline": len(inp.baseline), "candidate": len(inp.candidate)}, "retried_on_baseline": w.retried_on_baseline,
                           "client_gone": w.client_gone, "client_errors": w.client_errors, "greedy_pairs": len(w.pairs),
                           "latency_ms": window_latency(inp),
                           "counters": "scraped" if snap is not None else "unavailable",
                           "acceptance": None if spec is None else {
                               "drafts": spec.drafts, "draft_tokens": spec.draft_tokens, "accepted_tokens": spec.accepted_tokens,
                               "acceptance_rate": spec.acceptance_rate, "source": source}}
            event = self._emit({"event": "evaluation", "t": end, "mode": self.cfg.mode, "window": window_info,
                                "judgement": j, "decision": d, "state": ctl.state})
            self.rows.append(WindowRow.of(event_t=end, window=window_info, inp=inp, j=j, d=d, spec=spec))
            self.metrics.decisions.labels(action=d.action.value).inc()
            if spec is not None and spec.draft_tokens:
                self.metrics.acceptance.set(spec.acceptance_rate)
            self._update_metrics()
            if d.new_window or w.age() >= self.cfg.max_window_intervals * self.cfg.interval_s * 0.999:
                nw = Window(weight=ctl.weight, snapshot=snap)
                for side, judged in ((Side.baseline, inp.baseline), (Side.candidate, inp.candidate)):
                    nw.samples[side] = w.samples[side][len(judged):]  # finished while the judge ran: the next window's
                self.window = nw
            return clean(event)

    def _why_no_token_ids(self) -> str:
        """Why the candidate's answers in a window carried no token ids (guardrail:acceptance_replay)."""
        assert self.proxy is not None
        ask = self.proxy.token_ids
        if ask is not None and ask.refused is not None:
            return en("canary.j.ids_refused", answer=ask.refused)
        if ask is not None and not ask.asked:
            return en("canary.j.ids_not_added")
        if ask is not None:
            return en("canary.j.ids_missing")
        if not self.cfg.asks_token_ids():
            return en("canary.j.ids_off")
        return en("canary.j.ids_dialect", dialect=self.proxy.candidate.dialect.name)

    def _update_metrics(self) -> None:
        assert self.controller is not None
        st = self.controller.state
        self.metrics.set_state(st.status, st.weight, st.failed_evaluations)

    def _emit(self, event: dict[str, Any]) -> dict[str, Any]:
        logged = self._log.append(event)
        if self.on_event is not None:
            self.on_event(clean(logged))
        return logged

    def result(self) -> CanaryResult:
        assert self.controller is not None
        return build_result(self.cfg, self.controller.state, self.rows, self.totals, time.monotonic() - self._started_mono,
                            shadow_skipped=self.proxy.shadow_skipped if self.proxy is not None else 0)


__all__ = ["Action", "CanaryError", "CanaryService", "CanaryStateError"]
