"""``specgauge bench``: the library entry ``run_bench(BenchConfig) -> BenchResult``.

Flags are named as in ``vllm bench serve`` where they mean the same. Output directory:
- ``results.jsonl``: one ``RequestRecord`` per finished request, appended and flushed as it ends;
- ``run.json``: the config (``api_key`` never written), server identity, dialect, and per session
  the ``/metrics`` snapshots before/after, their diff and device-memory samples;
- ``summary.json``: ``vllm bench serve``-compatible keys at the top level plus ``specgauge``
  (per-token ITL, distributions, failures by class, acceptance per request / segment / counters).
``resume`` continues a broken run: ids already in ``results.jsonl`` are not sent again.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from specgauge import __version__
from specgauge.config import SpeculativeConfig
from specgauge.errors import UserError
from specgauge.loadgen import arrivals as A
from specgauge.loadgen.client_loop import GcTimer, stall_warning, watch_loop
from specgauge.loadgen.dialects import Dialect, detect, get_dialect
from specgauge.loadgen.memory import MemorySampler
from specgauge.loadgen.metrics_scrape import MetricsParseError, Snapshot, diff
from specgauge.loadgen.runner import Runner, RunnerSettings, new_session, run_async
from specgauge.paths import portable_path, public_url
from specgauge.records import RequestRecord, ResultsFile, RunRecord
from specgauge.stats.latency import parse_goodput
from specgauge.stats.replay_check import WARMUP_KEYS, check_bench_run
from specgauge.stats.server_memory import parse_vllm_log
from specgauge.stats.summary import counter_total, summarize
from specgauge.workload.plan import plan_cycle
from specgauge.workload.schema import Request

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


class BenchError(UserError):
    """A bench problem the user can fix: bad flag, unreachable server, existing results."""


class BenchConfig(BaseModel):
    """Settings of one benchmark run (names as ``vllm bench serve`` where they mean the same)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    base_url: str
    workload: list[Path] = Field(min_length=1)
    output_dir: Path
    endpoint: str | None = None  #: None: /v1/chat/completions or /v1/completions by request kind
    model: str | None = None  #: None: the first model of the server's /v1/models
    max_concurrency: int | None = Field(default=None, ge=1)
    request_rate: float = Field(default=math.inf, gt=0)
    burstiness: float = Field(default=1.0, gt=0)
    ramp_up_strategy: Literal["linear", "exponential"] | None = None
    ramp_up_start_rps: float | None = Field(default=None, ge=0)
    ramp_up_end_rps: float | None = Field(default=None, gt=0)
    self_timed: bool = False  #: replay the workload's own arrival_time values
    trace_speed: float = Field(default=1.0, gt=0)
    num_prompts: int | None = Field(default=None, ge=1)  #: None: every request once; more cycles
    seed: int = 0
    goodput: list[str] | None = None  #: ["ttft:MS", "tpot:MS", "e2el:MS"]
    percentile_metrics: str = "ttft,tpot,itl"
    metric_percentiles: str = "99"
    resume: bool = False
    timeout: float = Field(default=600.0, gt=0)
    warmup: int = Field(default=0, ge=0)  #: vLLM's --num-warmups: sent first, never recorded
    api_key: SecretStr | None = None
    dialect: str = "auto"
    segment_by: str | None = None
    progress: bool = True
    memory_interval: float = Field(default=1.0, gt=0)
    memory_tool_timeout: float = Field(default=5.0, gt=0)  #: seconds a GPU telemetry tool may take before it is killed
    #: the server's log file when specgauge (or you) started it: its memory lines (model weights, KV
    #: cache) are read at the end of the run; nothing else of it is kept
    server_log: Path | None = None
    fsync: bool = False
    #: send from N async Ray actors (``specgauge[ray]``; ``specgauge.scale.loadgen``); None: this process
    ray_workers: int | None = Field(default=None, ge=1)
    #: the Ray cluster: None / "auto" (RAY_ADDRESS, the latest cluster here, else a new local one) or an address
    ray_address: str | None = None
    ray_worker_cpus: float = Field(default=0.25, gt=0)  #: CPUs reserved per load-generator actor
    #: the speculative config the server runs with, when it does not say (vLLM): the replay check
    #: (``stats.replay_check``) replays the run's outputs through the same drafter
    speculative_config: SpeculativeConfig | None = None

    @field_validator("dialect")
    @classmethod
    def _dialect(cls, v: str) -> str:
        if v != "auto":
            get_dialect(v)  # ValueError naming the known dialects (plugins included)
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v.rstrip("/")

    def percentiles(self) -> list[float]:
        try:
            ps = [float(p) for p in self.metric_percentiles.split(",") if p.strip()]
        except ValueError:
            raise BenchError(f"--metric-percentiles {self.metric_percentiles!r}: comma-separated numbers, e.g. 50,90,99") from None
        if any(not 0 <= p <= 100 for p in ps):
            raise BenchError(f"--metric-percentiles {self.metric_percentiles!r}: each must be within 0..100")
        return ps

    def selected_metrics(self) -> list[str]:
        ms = [m.strip() for m in self.percentile_metrics.split(",") if m.strip()]
        bad = [m for m in ms if m not in PERCENTILE_METRICS]
        if bad:
            raise BenchError(f"--percentile-metrics: {', '.join(bad)} unknown; choose from {', '.join(PERCENTILE_METRICS)}")
        return ms

    def public(self) -> dict[str, Any]:
        """The config as stored beside the results: secrets left out, and no absolute machine path
        (workload files relative to the output directory, the built-in sample by name, the output
        directory by its name; ``report.runs`` resolves them back)."""
        d = self.model_dump(mode="json", exclude={"api_key"})
        d["api_key_set"] = self.api_key is not None
        d["base_url"] = public_url(self.base_url)
        d["workload"] = [portable_path(p, self.output_dir) for p in self.workload]
        d["output_dir"] = Path(self.output_dir).resolve().name
        if self.server_log is not None:
            d["server_log"] = portable_path(self.server_log, self.output_dir)
        model = (d.get("speculative_config") or {}).get("model")
        if model and Path(model).exists():  # a draft model directory: no machine path in the results
            d["speculative_config"]["model"] = portable_path(Path(model), self.output_dir)
        return d


@dataclass
class BenchResult:
    summary: dict[str, Any]
    output_dir: Path

    @property
    def exit_code(self) -> int:
        """0 when every request succeeded, 1 when any failed (the run itself completed)."""
        return 1 if self.summary.get("failed", 0) else 0


# ---------------------------------------------------------------------------- planning


def plan_requests(items: Sequence[Request], num_prompts: int | None) -> list[Request]:
    """The first ``num_prompts`` requests, cycling (ids suffixed ``~rN``) when more are asked."""
    if not items:
        raise BenchError("the workload has no requests")
    return plan_cycle(items, num_prompts, lambda req, rid: req.model_copy(update={"id": rid}), lambda req: req.id)


def arrival_process(cfg: BenchConfig, reqs: Sequence[Request]) -> A.Arrivals:
    try:
        if cfg.self_timed:
            ts = [r.arrival_time for r in reqs]
            if any(t is None for t in ts):
                raise BenchError("--self-timed needs an arrival_time on every workload request")
            return A.Trace([float(t) for t in ts if t is not None], cfg.trace_speed)
        return A.from_flags(cfg.request_rate, cfg.burstiness, cfg.ramp_up_strategy, cfg.ramp_up_start_rps, cfg.ramp_up_end_rps)
    except ValueError as e:
        raise BenchError(str(e)) from None


# ---------------------------------------------------------------------------- server I/O


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    return (await _get_json_status(session, url, headers))[0]


async def _get_json_status(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> tuple[Any, int | None]:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return None, r.status
            return await r.json(content_type=None), r.status
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None, None


async def scrape(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str]) -> tuple[Snapshot | None, str | None]:
    try:
        async with session.get(base_url + "/metrics", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return None, f"/metrics answered HTTP {r.status}"
            text = await r.text()
        return Snapshot.parse(text, time.time()), None
    except MetricsParseError as e:
        return None, str(e)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        return None, f"/metrics unreachable: {type(e).__name__}"


async def server_identity(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = {"base_url": public_url(base_url)}
    for p in dialect.identity_paths():
        v = await _get_json(session, base_url + p, headers)
        if v is not None:
            out[p] = v
    return out


# ---------------------------------------------------------------------------- the run


class _Progress:
    """A rich progress bar with live output throughput and acceptance."""

    def __init__(self, total: int, done: int, enabled: bool, console: Any) -> None:
        self.enabled = enabled
        self.tokens = 0
        self.acc = 0
        self.drafted = 0
        self.t0 = time.perf_counter()
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.p = Progress(
            TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[live]}"), console=console, transient=False,
        )
        self.task = self.p.add_task("bench", total=total, completed=done, live="")
        self.p.start()

    def update(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.tokens += rec.output_tokens or 0
            if rec.spec is not None and rec.spec.draft_tokens:
                self.acc += rec.spec.accepted_tokens or 0
                self.drafted += rec.spec.draft_tokens
        if not self.enabled:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        live = f"{self.tokens / dt:,.1f} tok/s"
        if self.drafted:
            live += f"  acceptance {100 * self.acc / self.drafted:.1f}%"
        self.p.update(self.task, advance=1, live=live)

    def stop(self) -> None:
        if self.enabled:
            self.p.stop()


async def _session_run(
    cfg: BenchConfig, reqs: list[Request], todo: list[tuple[int, Request]], results: ResultsFile,
    run: RunRecord, on_record: Callable[[RequestRecord], None],
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {cfg.api_key.get_secret_value()}"} if cfg.api_key else {}
    sess_info: dict[str, Any] = {"started_at": time.time(), "requests": len(todo)}
    async with new_session(cfg.max_concurrency) as session:
        models, status = await _get_json_status(session, cfg.base_url + "/v1/models", headers)
        if status in (401, 403):
            raise BenchError(f"{public_url(cfg.base_url)} refused the request (HTTP {status}): check --api-key")
        model = cfg.model
        if model is None:
            try:
                model = models["data"][0]["id"]
            except (TypeError, KeyError, IndexError):
                raise BenchError(f"{public_url(cfg.base_url)}/v1/models gave no model; pass --model (is the server up?)") from None
        snap0, why = await scrape(session, cfg.base_url, headers)
        dialect = get_dialect(cfg.dialect) if cfg.dialect != "auto" else detect(snap0, models if isinstance(models, dict) else None)
        run.dialect = dialect.name
        run.server = await server_identity(session, cfg.base_url, headers, dialect)
        run.server["model"] = model
        settings = RunnerSettings(cfg.base_url, model, cfg.endpoint, cfg.max_concurrency, cfg.timeout,
                                  cfg.api_key.get_secret_value() if cfg.api_key else None)
        if cfg.warmup:
            warm = Runner(settings, dialect, session)
            wrecs = await warm.run([(i, reqs[i % len(reqs)].model_copy(update={"id": f"warmup-{i}"}), 0.0) for i in range(cfg.warmup)])
            # what a stateful drafter (suffix) learned before the run: the replay check feeds it first
            run.warmups = [{"id": r.id, "ok": r.ok, **{k: v for k, v in (r.extra or {}).items() if k in WARMUP_KEYS}}
                           for r in wrecs]
            bad = [r for r in wrecs if not r.ok]
            if bad:
                run.warnings.append(f"{len(bad)} of {cfg.warmup} warm-up requests failed: {bad[0].error}")
        ray_gen = None
        if cfg.ray_workers:  # start the actors and sync clocks before the counters and the clock start
            from specgauge.scale.loadgen import RayLoadGen

            ray_gen = RayLoadGen.start(cfg.ray_workers, cfg.ray_address, settings, dialect, cfg.ray_worker_cpus)
        before, why = await scrape(session, cfg.base_url, headers)
        if why:
            run.warnings.append(f"no counter snapshot: {why}")
        elif before is not None and dialect.spec_config(before):
            run.server["speculative_config_inferred"] = dialect.spec_config(before)
        mem = MemorySampler(cfg.memory_interval, timeout=cfg.memory_tool_timeout)
        mem.start()
        times = arrival_process(cfg, [r for _, r in todo]).times(len(todo), cfg.seed)
        runner = Runner(settings, dialect, session, on_record)
        kv: list[dict[str, Any]] = []
        kv_task = asyncio.get_running_loop().create_task(_sample_kv(cfg, headers, dialect, kv)) if before else None
        stalls: dict[str, Any] = {}
        watch = asyncio.get_running_loop().create_task(watch_loop(stalls))
        gc_timer = GcTimer(stalls)
        t0 = time.perf_counter()
        recs: list[RequestRecord] = []
        try:
            plan = [(i, r, t) for (i, r), t in zip(todo, times)]
            if ray_gen is not None:
                recs = await ray_gen.run(plan, on_record)
                t0 = ray_gen.start_perf
            else:
                recs = await runner.run(plan)
        finally:
            sess_info["duration_s"] = time.perf_counter() - t0
            if ray_gen is not None:
                from specgauge.scale.loadgen import public_info

                sess_info["ray"] = public_info(ray_gen, recs)
                run.warnings.extend(ray_gen.death_warnings())
                ray_gen.close()
            await mem.stop()
            sess_info["memory"] = mem.summary()
            if mem.warning:
                run.warnings.append(mem.warning)
            if kv_task is not None:
                kv_task.cancel()
                await asyncio.gather(kv_task, return_exceptions=True)
            sess_info["kv_samples"] = kv
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            gc_timer.close()
            sess_info["client_loop"] = stalls
            if (w := stall_warning(stalls)) is not None:
                run.warnings.append(w)
        after, why2 = await scrape(session, cfg.base_url, headers)
    if cfg.server_log is not None:
        try:
            sess_info["server_log_memory"] = parse_vllm_log(Path(cfg.server_log).read_text(errors="replace"))
        except OSError as e:
            run.warnings.append(f"--server-log {Path(cfg.server_log).name}: {e.strerror or e}; server memory from /metrics only")
    sess_info["counters_before"] = before.to_json() if before else None
    sess_info["counters_after"] = after.to_json() if after else None
    if before is not None and after is not None:
        d = diff(before, after)
        sess_info["counter_diff"] = d.to_json()
        if d.resets:
            run.warnings.append(f"counters went down during the run (server restart?): {', '.join(d.resets[:3])}")
        cs = dialect.counter_spec(d, model)
        sess_info["counter_spec"] = cs.model_dump() if cs else None
        sess_info["spec_gauges"] = dialect.spec_gauges(after)
        sess_info["kv_cache"] = dialect.memory(after)
        traffic = dialect.traffic(d)
        ok = [r for r in recs if r.ok]
        ours_req, ours_tok = len(ok), sum(r.output_tokens or 0 for r in ok)
        failed = len(recs) - len(ok)
        if traffic["requests"] is not None and traffic["requests"] > len(recs):
            run.warnings.append(
                f"other traffic moved the counters: the server finished {traffic['requests']:.0f} requests during the run, "
                f"specgauge sent {len(recs)}; counter-based figures include it"
            )
        elif traffic["generation_tokens"] is not None and traffic["generation_tokens"] > ours_tok and not failed:
            run.warnings.append(
                f"other traffic moved the counters: the server generated {traffic['generation_tokens']:.0f} tokens, "
                f"specgauge received {ours_tok} in {ours_req} requests"
            )
    elif why2:
        run.warnings.append(f"no counter snapshot after the run: {why2}")
    return sess_info


async def _sample_kv(cfg: BenchConfig, headers: dict[str, str], dialect: Dialect, out: list[dict[str, Any]]) -> None:
    """KV-cache usage from /metrics every ``memory_interval`` s during the run (the after-run
    snapshot sees an idle server), on a connection of its own: the run's pool holds
    ``max_concurrency`` connections, all busy streaming, and a scrape queued there waited for a
    stream to end (real vLLM, 4 streams: 2 samples in a 2.0 s run at ``--memory-interval 0.05``, 39 now)."""
    t0 = time.perf_counter()
    async with new_session(1) as session:
        while True:
            await asyncio.sleep(cfg.memory_interval)
            snap, _ = await scrape(session, cfg.base_url, headers)
            if snap is not None:
                m = dialect.memory(snap)
                if "kv_cache_usage" in m:
                    out.append({"t": time.perf_counter() - t0, "kv_cache_usage": m["kv_cache_usage"]})


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=False))
    tmp.replace(path)


def run_bench(cfg: BenchConfig, console: Any = None) -> BenchResult:
    """Runs (or resumes) one benchmark; writes results.jsonl, run.json, summary.json."""
    from specgauge.workload.loaders import LoadOptions, load_workload

    percentiles, selected = cfg.percentiles(), cfg.selected_metrics()
    if cfg.api_key is not None and (urlsplit(cfg.base_url).username is not None or urlsplit(cfg.base_url).password is not None):
        raise BenchError(f"--base-url {public_url(cfg.base_url)} carries user:password and --api-key is given: one "
                         "Authorization header cannot hold both; drop one")
    try:
        goodput = parse_goodput(cfg.goodput)
    except ValueError as e:
        raise BenchError(f"--goodput: {e}") from None
    items = load_workload(cfg.workload, LoadOptions(segment_by=cfg.segment_by))
    reqs = plan_requests([it.request for it in items], cfg.num_prompts)
    if cfg.endpoint is not None:
        want = "chat" if "chat" in cfg.endpoint else "completion"
        wrong = [r.id for r in reqs if r.api.value != want]
        if wrong:
            raise BenchError(f"--endpoint {cfg.endpoint} takes {want} requests; {wrong[0]} (and {len(wrong) - 1} more) is not")
    out = Path(cfg.output_dir)
    results = ResultsFile(out / "results.jsonl", fsync=cfg.fsync)
    run_path = out / "run.json"
    try:
        out.mkdir(parents=True, exist_ok=True)
        existing = results.existing()
    except OSError as e:
        raise BenchError(f"--output-dir {out}: {e.strerror or e}") from None
    except ValueError as e:
        raise BenchError(str(e)) from None
    if existing and not cfg.resume:
        raise BenchError(f"{results.path} already holds {len(existing)} results; pass --resume to continue it, or another --output-dir")
    run = RunRecord(specgauge_version=__version__, started_at=time.time(), config=cfg.public(), dialect=cfg.dialect)
    sessions: list[dict[str, Any]] = []
    planned = {r.id for r in reqs}
    strangers = [r.id for r in existing if r.id not in planned]
    if strangers:  # records of another workload (or --num-prompts / --seed): resuming would mix two runs
        raise BenchError(f"--resume: {results.path} holds {len(strangers)} records this workload does not plan (e.g. "
                         f"{strangers[0]!r}); it belongs to another run: use another --output-dir")
    if cfg.resume and run_path.exists():
        try:
            prev = json.loads(run_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BenchError(f"--resume: {run_path} is unreadable ({str(e).splitlines()[0]}); move it away to resume") from None
        if not isinstance(prev, dict):
            raise BenchError(f"--resume: {run_path} is not a specgauge run record; move it away to resume")
        pw = prev.get("config", {}).get("workload")
        if pw is not None and pw != run.config.get("workload"):
            raise BenchError(f"--resume: {out} was run with workload {pw!r}, not {run.config.get('workload')!r}; resuming "
                             "would mix two workloads' records: use another --output-dir")
        sessions = prev.get("sessions", [])
        run.warnings = list(prev.get("warnings", []))
        run.started_at = prev.get("started_at", run.started_at)
        for k in ("base_url", "model", "workload", "num_prompts", "seed"):
            if prev.get("config", {}).get(k) != run.config.get(k):
                run.warnings.append(f"resumed with a different {k}: {prev.get('config', {}).get(k)!r} -> {run.config.get(k)!r}")
    done_ids = {r.id for r in existing}
    run.resumed_from = len(done_ids)
    todo = [(i, r) for i, r in enumerate(reqs) if r.id not in done_ids]
    progress = _Progress(len(reqs), len(done_ids), cfg.progress, console)

    def on_record(rec: RequestRecord) -> None:
        results.append(rec)
        progress.update(rec)

    results.open()
    sess: dict[str, Any] = {}
    try:
        if todo:
            sess = run_async(_session_run(cfg, reqs, todo, results, run, on_record))  # uvloop where installed
    except KeyboardInterrupt:
        run.warnings.append("interrupted: finished requests are saved; rerun with --resume to continue")
        sess = {"interrupted": True}
        raise BenchError(f"interrupted; {results.path} keeps every finished request — rerun with --resume") from None
    except (aiohttp.ClientError, OSError) as e:
        raise BenchError(f"cannot reach {cfg.base_url}: {e}") from None
    finally:
        results.close()
        progress.stop()
        if sess:
            sessions.append(sess)
        run.sessions = sessions
        _write_kept(run_path, run.model_dump(mode="json"), results.path)
    records = results.existing()
    summary = summarize(records, sessions, run, cfg.public(), percentiles, selected, goodput)
    summary["specgauge"]["replay_check"] = check_bench_run(  # does the server accept what its outputs allow?
        records, cfg.speculative_config, run.server, counter_total(sessions)[0], run.warmups).model_dump(mode="json")
    _write_kept(out / "summary.json", summary, results.path)
    return BenchResult(summary, out)


def _write_kept(path: Path, data: dict[str, Any], results: Path) -> None:
    """``_write_json``, and a write that fails is one line saying the results are kept."""
    try:
        _write_json(path, data)
    except OSError as e:
        raise BenchError(f"{path}: cannot write ({e.strerror or e}); every finished request is kept in {results}") from None
