"""One (re)start of a bench run, ``BenchSession``: probe the server (model, dialect, identity), warm it
up, start the instruments (device memory, KV-cache samples, the client's own event-loop watch, the
Ray actors where used) in one ``AsyncExitStack``, measure (send the plan, one ``RequestRecord`` each),
and record what the server's counters say about it in a ``SessionRecord``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from specgauge.bench.config import BenchConfig, BenchError, arrival_process
from specgauge.loadgen.client_loop import GcTimer, stall_warning, watch_loop
from specgauge.loadgen.dialects import Dialect, detect, get_dialect
from specgauge.loadgen.memory import MemorySampler
from specgauge.loadgen.metrics_scrape import CounterDiff, Snapshot, diff
from specgauge.loadgen.probe import ServerProbe, auth_headers, sample_kv
from specgauge.loadgen.runner import Runner, RunnerSettings, new_session
from specgauge.paths import public_url
from specgauge.records import KvSample, RequestRecord, RunRecord, SessionRecord
from specgauge.stats.replay_check import WARMUP_KEYS
from specgauge.stats.server_memory import parse_vllm_log
from specgauge.workload.schema import Request

Plan = list[tuple[int, Request, float]]


class BenchSession:
    """Sends ``todo`` (index, request) to the server and returns the session's record; the run's
    identity, dialect, warm-ups and warnings go into ``run`` as they are learnt."""

    def __init__(self, cfg: BenchConfig, reqs: list[Request], todo: list[tuple[int, Request]], run: RunRecord,
                 on_record: Callable[[RequestRecord], None]) -> None:
        self.cfg, self.reqs, self.todo, self.run, self.on_record = cfg, reqs, todo, run, on_record
        self.api_key = cfg.api_key.get_secret_value() if cfg.api_key else None
        self.headers = auth_headers(self.api_key)
        self.rec = SessionRecord(started_at=time.time(), requests=len(todo))
        self.records: list[RequestRecord] = []

    def warn(self, line: str) -> None:
        self.run.warnings.append(line)

    async def measure(self) -> SessionRecord:
        cfg = self.cfg
        async with new_session(cfg.max_concurrency) as http:
            probe = ServerProbe(http, cfg.base_url, self.headers)
            model, dialect = await self._probe(probe)
            settings = RunnerSettings(base_url=cfg.base_url, model=model, endpoint=cfg.endpoint,
                                      max_concurrency=cfg.max_concurrency, timeout=cfg.timeout, api_key=self.api_key)
            if cfg.warmup:
                await self._warm_up(settings, dialect, http)
            async with AsyncExitStack() as stack:
                # the Ray actors start and sync clocks before the counters and the clock start
                ray_gen = self._ray(stack, settings, dialect)
                before = await self._snapshot_before(probe, dialect)
                times = arrival_process(cfg, [r for _, r in self.todo]).times(len(self.todo), cfg.seed)
                await stack.enter_async_context(self._instruments(dialect, before))
                await self._send(http, settings, dialect, ray_gen, [(i, r, t) for (i, r), t in zip(self.todo, times)])
            after, why = await probe.scrape()
        self._read_server_log()
        self._record_counters(before, after, why, dialect, model)
        return self.rec

    # ------------------------------------------------------------------ probe

    async def _probe(self, probe: ServerProbe) -> tuple[Any, Dialect]:
        """The model (``--model`` or the server's first), the dialect, and the server's identity."""
        cfg, run = self.cfg, self.run
        models, status = await probe.get_json_status("/v1/models")
        if status in (401, 403):
            raise BenchError(f"{public_url(cfg.base_url)} refused the request (HTTP {status}): check --api-key")
        model = cfg.model
        if model is None:
            try:
                model = models["data"][0]["id"]
            except (TypeError, KeyError, IndexError):
                raise BenchError(f"{public_url(cfg.base_url)}/v1/models gave no model; pass --model (is the server up?)") from None
        snap0, _ = await probe.scrape()
        dialect = get_dialect(cfg.dialect) if cfg.dialect != "auto" else detect(snap0, models if isinstance(models, dict) else None)
        run.dialect = dialect.name
        run.server = await probe.identity(dialect)
        run.server["model"] = model
        return model, dialect

    async def _warm_up(self, settings: RunnerSettings, dialect: Dialect, http: aiohttp.ClientSession) -> None:
        """``--num-warmups`` requests, never recorded; what a stateful drafter (suffix) learnt from
        them is kept for the replay check."""
        n, reqs = self.cfg.warmup, self.reqs
        wrecs = await Runner(settings, dialect, http).run(
            [(i, reqs[i % len(reqs)].model_copy(update={"id": f"warmup-{i}"}), 0.0) for i in range(n)])
        self.run.warmups = [{"id": r.id, "ok": r.ok, **{k: v for k, v in (r.extra or {}).items() if k in WARMUP_KEYS}}
                            for r in wrecs]
        bad = [r for r in wrecs if not r.ok]
        if bad:
            self.warn(f"{len(bad)} of {n} warm-up requests failed: {bad[0].error}")

    async def _snapshot_before(self, probe: ServerProbe, dialect: Dialect) -> Snapshot | None:
        before, why = await probe.scrape()
        if why:
            self.warn(f"no counter snapshot: {why}")
        elif before is not None and dialect.spec_config(before):
            self.run.server["speculative_config_inferred"] = dialect.spec_config(before)
        return before

    # ------------------------------------------------------------------ instruments

    def _ray(self, stack: AsyncExitStack, settings: RunnerSettings, dialect: Dialect) -> Any:
        """``--ray-workers``: the actors, closed (with their public info and deaths recorded) on exit."""
        cfg = self.cfg
        if not cfg.ray_workers:
            return None
        from specgauge.scale.loadgen import RayLoadGen, public_info

        gen = RayLoadGen.start(cfg.ray_workers, cfg.ray_address, settings, dialect, cfg.ray_worker_cpus)

        def close() -> None:
            self.rec.ray = public_info(gen, self.records)
            self.run.warnings.extend(gen.death_warnings())
            gen.close()

        stack.callback(close)
        return gen

    @asynccontextmanager
    async def _instruments(self, dialect: Dialect, before: Snapshot | None) -> AsyncIterator[None]:
        """Device memory, KV-cache usage from /metrics (when it answered), and the client's own
        event-loop stalls and GC pauses, for the duration of the measurement."""
        cfg, loop = self.cfg, asyncio.get_running_loop()
        mem = MemorySampler(cfg.memory_interval, timeout=cfg.memory_tool_timeout)
        mem.start()
        kv: list[KvSample] = []
        kv_task = loop.create_task(sample_kv(cfg.base_url, self.headers, dialect, cfg.memory_interval, kv)) if before else None
        stalls: dict[str, Any] = {}
        watch = loop.create_task(watch_loop(stalls))
        gc_timer = GcTimer(stalls)
        try:
            yield
        finally:
            await mem.stop()
            self.rec.memory = mem.summary()
            if mem.warning:
                self.warn(mem.warning)
            if kv_task is not None:
                kv_task.cancel()
                await asyncio.gather(kv_task, return_exceptions=True)
            self.rec.kv_samples = kv
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            gc_timer.close()
            self.rec.client_loop = stalls
            if (w := stall_warning(stalls)) is not None:
                self.warn(w)

    # ------------------------------------------------------------------ measure

    async def _send(self, http: aiohttp.ClientSession, settings: RunnerSettings, dialect: Dialect, ray_gen: Any,
                    plan: Plan) -> None:
        t0 = time.perf_counter()
        try:
            if ray_gen is not None:
                self.records = await ray_gen.run(plan, self.on_record)
                t0 = ray_gen.start_perf
            else:
                self.records = await Runner(settings, dialect, http, self.on_record).run(plan)
        finally:
            self.rec.duration_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ record

    def _read_server_log(self) -> None:
        log = self.cfg.server_log
        if log is None:
            return
        try:
            self.rec.server_log_memory = parse_vllm_log(Path(log).read_text(errors="replace"))
        except OSError as e:
            self.warn(f"--server-log {Path(log).name}: {e.strerror or e}; server memory from /metrics only")

    def _record_counters(self, before: Snapshot | None, after: Snapshot | None, why_after: str | None, dialect: Dialect,
                         model: Any) -> None:
        """The snapshots, their diff and what the dialect reads in it (speculative counts, gauges, KV)."""
        rec = self.rec
        rec.counters_before = before.to_json() if before else None
        rec.counters_after = after.to_json() if after else None
        if before is None or after is None:
            if why_after:
                self.warn(f"no counter snapshot after the run: {why_after}")
            return
        d = diff(before, after)
        rec.counter_diff = d.to_json()
        if d.resets:
            self.warn(f"counters went down during the run (server restart?): {', '.join(d.resets[:3])}")
        rec.counter_spec = dialect.counter_spec(d, model)
        rec.spec_gauges = dialect.spec_gauges(after)
        rec.kv_cache = dialect.memory(after)
        self._check_traffic(dialect, d)

    def _check_traffic(self, dialect: Dialect, d: CounterDiff) -> None:
        """Warns when the counters moved more than this run's own requests can explain."""
        traffic, recs = dialect.traffic(d), self.records
        ok = [r for r in recs if r.ok]
        ours_req, ours_tok = len(ok), sum(r.output_tokens or 0 for r in ok)
        failed = len(recs) - len(ok)
        if traffic["requests"] is not None and traffic["requests"] > len(recs):
            self.warn(
                f"other traffic moved the counters: the server finished {traffic['requests']:.0f} requests during the run, "
                f"specgauge sent {len(recs)}; counter-based figures include it"
            )
        elif traffic["generation_tokens"] is not None and traffic["generation_tokens"] > ours_tok and not failed:
            self.warn(
                f"other traffic moved the counters: the server generated {traffic['generation_tokens']:.0f} tokens, "
                f"specgauge received {ours_tok} in {ours_req} requests"
            )
