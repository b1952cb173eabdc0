"""``bench --ray-workers N``: one arrival schedule sent from N async Ray actors (many hosts).

What llmperf does and this does not: one synchronous actor per concurrent request holding a whole
CPU (concurrency capped by cluster CPUs), batches waited for before sending more, SSE chunks counted
as tokens. Here each worker is ONE async actor with a fractional CPU, placed with SPREAD, running
specgauge's own ``Runner`` (the same request function, SSE parser and per-token timing as a
single-host run) over its own aiohttp session for as many concurrent streams as its share of
``--max-concurrency``.

- The driver computes the global schedule (Poisson / gamma / trace, as a single host would) and deals
  it round-robin: worker w gets requests w, w+N, … with their global scheduled times.
- Clocks: the driver measures each worker's clock offset (NTP-style, the least-RTT of a few
  pings) and starts every worker at the same instant in its own clock. Times in the records are the
  driver's: ``scheduled_s`` / ``sent_s`` from the global start, ``started_at`` in the driver's clock.
- Records stream back (a Ray streaming generator) as requests finish, with the send of each request
  (``sent``) so the driver always knows what a worker has in flight. The driver appends them to the
  one ``results.jsonl``; counters are scraped by the driver before/after, as on one host.
- A worker that dies loses only its in-flight requests: they are written as failed records
  (``worker_lost``) and the requests it had not sent yet go to the surviving workers, at their
  scheduled times (late ones at once; their send lag says so). A request sent in the last instant
  before the death, whose ``sent`` had not reached the driver yet, may be sent twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from specgauge import __version__
from specgauge.loadgen.dialects import Dialect, get_dialect
from specgauge.loadgen.runner import SPIN_S, Runner, RunnerSettings, new_session
from specgauge.records import FailureKind, RequestRecord
from specgauge.scale import ScaleError, require_ray
from specgauge.scale.cluster import ClusterInfo, connect, disconnect
from specgauge.workload.schema import Request

Plan = Sequence[tuple[int, Request, float]]
CLOCK_PINGS = 5
ACTOR_PREFIX = "specgauge-loadgen-"  #: actors are named ``specgauge-loadgen-<run token>-w<N>`` (ray list actors)
COALESCE_S = 0.005  #: a worker gathers records finishing within this long into one message


class _MarkingRunner(Runner):
    """The single-host ``Runner``, reporting the moment each request is really sent (after its
    concurrency slot), so the driver knows which requests a worker has in flight."""

    def __init__(self, *args: Any, on_send: Callable[[int, float, float | None], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_send = on_send

    async def _send_now(self, req: Request, index: int, scheduled_s: float, ready_s: float | None = None) -> RequestRecord:
        self._on_send(index, time.perf_counter() - self.t0_perf, ready_s)
        return await super()._send_now(req, index, scheduled_s, ready_s)


class LoadWorker:
    """One load-generator worker (a Ray async actor): sends its shard of the schedule."""

    def __init__(self, worker: int, settings: dict[str, Any], dialect: str) -> None:
        self.worker = worker
        self.settings = settings
        self.dialect: Dialect = get_dialect(dialect)

    async def hello(self) -> dict[str, Any]:
        ray = require_ray()
        return {"node_ip": ray.util.get_node_ip_address(), "node_id": ray.get_runtime_context().get_node_id(),
                "pid": os.getpid(), "specgauge": __version__}

    async def clock(self) -> float:
        return time.time()

    async def run(self, plan: list[tuple[int, str, float]], t0_wall: float, offset_s: float, max_concurrency: int | None,
                  ) -> AsyncIterator[dict[str, Any]]:
        """Sends ``(index, request JSON, scheduled s)`` from the global start ``t0_wall`` (driver clock;
        this worker's clock reads ``t0_wall + offset_s`` then). Yields ``{"sent": [[index, sent_s,
        ready_s]…], "records": [JSON…]}`` as requests are sent and finish, then ``{"late_start_s": …,
        "cpu_s": …}`` (this process's CPU time over the run: the load generator's own cost)."""
        cpu0 = time.process_time()
        settings = RunnerSettings(**{**self.settings, "max_concurrency": max_concurrency})
        sent: list[list[Any]] = []
        done: list[str] = []
        wake = asyncio.Event()
        start_perf = time.perf_counter() + (t0_wall + offset_s - time.time())  # the global start, this clock
        # a run that starts after the global start (requests taken over from a dead worker) keeps each
        # request's global time: overdue ones go at once, the rest when they are due
        behind = max(0.0, time.perf_counter() - start_perf)
        reqs = [(i, Request.model_validate_json(r), max(0.0, at - behind)) for i, r, at in plan]
        scheduled = {i: at for i, _, at in plan}

        async with new_session(max_concurrency) as session:
            runner: _MarkingRunner

            def late() -> float:  # Runner.run starts its clock when called: at the global start, or after it
                return runner.t0_perf - start_perf

            def on_send(index: int, sent_s: float, ready_s: float | None) -> None:
                sent.append([index, sent_s + late(), None if ready_s is None else ready_s + late()])
                wake.set()

            def on_record(rec: RequestRecord) -> None:
                # times from the global start and in the driver's clock
                rec.scheduled_s = scheduled[rec.index]
                rec.sent_s += late()
                if rec.ready_s is not None:
                    rec.ready_s += late()
                rec.started_at -= offset_s
                rec.extra["loadgen_worker"] = self.worker
                done.append(rec.model_dump_json())
                wake.set()

            runner = _MarkingRunner(settings, self.dialect, session, on_record, on_send=on_send)
            delay = start_perf - time.perf_counter() - SPIN_S
            if delay > 0:
                await asyncio.sleep(delay)
            while time.perf_counter() < start_perf:
                await asyncio.sleep(0)
            task = asyncio.get_running_loop().create_task(runner.run(reqs))  # specgauge's single-host send loop
            try:
                while True:
                    if sent or done:
                        batch = {"sent": sent[:], "records": done[:]}
                        sent.clear()
                        done.clear()
                        yield batch
                        continue
                    if task.done():
                        break
                    waiter = asyncio.ensure_future(wake.wait())
                    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    wake.clear()
                    await asyncio.sleep(COALESCE_S)
                task.result()
            finally:
                if not task.done():
                    task.cancel()
        yield {"late_start_s": max(0.0, late()), "cpu_s": time.process_time() - cpu0}


@dataclass
class _WorkerState:
    worker: int
    actor: Any
    share: int | None  #: its part of --max-concurrency
    node: dict[str, Any] = field(default_factory=dict)
    offset_s: float = 0.0
    rtt_s: float = 0.0
    assigned: int = 0
    in_flight: dict[int, tuple[float, float | None]] = field(default_factory=dict)  #: index -> (sent_s, ready_s)
    finished: set[int] = field(default_factory=set)
    late_start_s: float | None = None  #: how far after the global start its own shard began
    cpu_s: float = 0.0  #: the actor process's CPU time while sending
    died: str | None = None
    lost: list[str] = field(default_factory=list)
    handed_over: int = 0  #: unsent requests given to other workers when it died
    taken_over: int = 0  #: requests it took over from dead workers


def shares(max_concurrency: int | None, workers: int) -> list[int | None]:
    """``--max-concurrency`` split over the workers (the global cap stays the same)."""
    if max_concurrency is None:
        return [None] * workers
    if max_concurrency < workers:
        raise ScaleError(f"--max-concurrency {max_concurrency} is below --ray-workers {workers}: every worker needs a slot")
    base, rem = divmod(max_concurrency, workers)
    return [base + (1 if w < rem else 0) for w in range(workers)]


def deal(plan: Plan, workers: int) -> list[list[tuple[int, Request, float]]]:
    """Round-robin shards of one global schedule (each keeps the global scheduled times)."""
    return [list(plan[w::workers]) for w in range(workers)]


class RayLoadGen:
    """Driver side: start the workers, run the schedule, collect records, survive a dead worker."""

    def __init__(self, info: ClusterInfo, states: list[_WorkerState], settings: RunnerSettings, dialect: Dialect,
                 cpus: float) -> None:
        self.cluster, self.states, self.settings, self.dialect, self.cpus = info, states, settings, dialect, cpus
        self.t0_wall = 0.0
        self.start_perf = time.perf_counter()

    @classmethod
    def start(cls, workers: int, address: str | None, settings: RunnerSettings, dialect: Dialect,
              cpus_per_worker: float = 0.25) -> RayLoadGen:
        ray = require_ray()
        caps = shares(settings.max_concurrency, workers)
        info = connect(address, flag="--ray-address")
        actor_cls = ray.remote(LoadWorker)
        public = {k: v for k, v in asdict(settings).items() if k != "max_concurrency"}
        token = uuid.uuid4().hex[:8]
        states = []
        for w in range(workers):
            actor = actor_cls.options(name=f"{ACTOR_PREFIX}{token}-w{w}", num_cpus=cpus_per_worker, scheduling_strategy="SPREAD",
                                      max_restarts=0, max_task_retries=0, max_concurrency=100_000).remote(w, public, dialect.name)
            states.append(_WorkerState(worker=w, actor=actor, share=caps[w]))
        try:
            hellos = ray.get([s.actor.hello.remote() for s in states], timeout=600)
        except Exception as e:  # noqa: BLE001 — cannot place or start the actors: say so, leave nothing running
            for s in states:
                ray.kill(s.actor, no_restart=True)
            disconnect(info)
            raise ScaleError(f"--ray-workers {workers}: the load-generator actors did not start on {info.describe()}: "
                             f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
        for s, h in zip(states, hellos):
            s.node = h
            s.offset_s, s.rtt_s = _clock_offset(s.actor)
        return cls(info, states, settings, dialect, cpus_per_worker)

    async def run(self, plan: Plan, on_record: Callable[[RequestRecord], None], lead_s: float = 0.5) -> list[RequestRecord]:
        """Sends the whole plan; returns its records (those of dead workers' in-flight requests
        marked ``worker_lost``), handing each to ``on_record`` as it arrives."""
        by_index = {i: (r, at) for i, r, at in plan}
        records: list[RequestRecord] = []
        self.t0_wall = time.time() + lead_s + 0.01 * len(plan) ** 0.5
        self.start_perf = time.perf_counter() + (self.t0_wall - time.time())  #: the global start, this clock

        def take(rec: RequestRecord) -> None:
            records.append(rec)
            on_record(rec)

        tasks = [asyncio.ensure_future(self._drive(s, shard, take, by_index))
                 for s, shard in zip(self.states, deal(plan, len(self.states)))]
        await asyncio.gather(*tasks)
        return sorted(records, key=lambda r: r.index)

    async def _drive(self, st: _WorkerState, shard: list[tuple[int, Request, float]], take: Callable[[RequestRecord], None],
                     by_index: dict[int, tuple[Request, float]], share: int | None = None) -> None:
        """Runs one shard on one worker; on its death, marks what it had in flight and hands the rest on."""
        ray = require_ray()
        if not shard:
            return
        st.assigned += len(shard)
        wire = [(i, r.model_dump_json(), at) for i, r, at in shard]
        gen = st.actor.run.options(num_returns="streaming").remote(wire, self.t0_wall, st.offset_s,
                                                                     share if share is not None else st.share)
        try:
            async for ref in gen:
                msg = await ref
                if "late_start_s" in msg:
                    if share is None:  # its own shard (a take-over starts late on purpose)
                        st.late_start_s = msg["late_start_s"]
                    st.cpu_s += msg["cpu_s"]
                    continue
                for index, sent_s, ready_s in msg["sent"]:
                    st.in_flight[index] = (sent_s, ready_s)
                for raw in msg["records"]:
                    rec = RequestRecord.model_validate_json(raw)
                    st.in_flight.pop(rec.index, None)
                    st.finished.add(rec.index)
                    take(rec)
        except ray.exceptions.RayActorError as e:
            st.died = str(e).splitlines()[0][:200]
        if st.died is None:
            return
        mine = {i for i, _, _ in shard}
        lost = sorted(i for i in st.in_flight if i in mine)
        for i in lost:
            sent_s, ready_s = st.in_flight.pop(i)
            req, at = by_index[i]
            st.lost.append(req.id)
            take(_lost_record(req, i, at, sent_s, ready_s, self.t0_wall, st))
        unsent = [(i, r, at) for i, r, at in shard if i not in st.finished and i not in lost]
        alive = [s for s in self.states if s.died is None]
        if not unsent:
            return
        if not alive:
            for i, req, at in unsent:
                take(_lost_record(req, i, at, None, None, self.t0_wall, st, sent=False))
                st.lost.append(req.id)
            return
        st.handed_over += len(unsent)
        # the dead worker's share of --max-concurrency goes with its requests (the global cap holds)
        if st.share is None:
            caps: list[int | None] = [None] * len(alive)
        else:
            caps = list(shares(st.share, len(alive))) if st.share >= len(alive) else [1] * len(alive)
        await asyncio.gather(*(self._take_over(s, part, take, by_index, cap)
                               for s, part, cap in zip(alive, deal(unsent, len(alive)), caps)))

    async def _take_over(self, st: _WorkerState, part: list[tuple[int, Request, float]], take: Callable[[RequestRecord], None],
                         by_index: dict[int, tuple[Request, float]], cap: int | None) -> None:
        st.taken_over += len(part)
        await self._drive(st, part, take, by_index, share=cap)

    def info(self) -> dict[str, Any]:
        """Per-worker placement, clock offset, start and send lag, deaths (stored in run.json)."""
        out = []
        for s in self.states:
            out.append({
                "worker": s.worker, "node_ip": s.node.get("node_ip"), "node_id": s.node.get("node_id"),
                "clock_offset_s": s.offset_s, "clock_rtt_s": s.rtt_s, "max_concurrency": s.share,
                "requests_assigned": s.assigned, "requests_finished": len(s.finished),
                "late_start_s": s.late_start_s, "cpu_s": s.cpu_s,
                "died": s.died, "lost_in_flight": s.lost, "handed_over": s.handed_over, "taken_over": s.taken_over,
            })
        return {"workers": len(self.states), "cluster": self.cluster.describe(), "cpus_per_worker": self.cpus,
                "schedule_start_epoch": self.t0_wall, "per_worker": out}

    def death_warnings(self) -> list[str]:
        out = []
        for s in self.states:
            if s.died is None:
                continue
            ids = ", ".join(s.lost[:5]) + (" …" if len(s.lost) > 5 else "")
            out.append(f"load-generator worker {s.worker} ({s.node.get('node_ip')}) died mid-run: {len(s.lost)} request(s) "
                       f"in flight lost, recorded as failed (worker_lost){': ' + ids if ids else ''}; {s.handed_over} "
                       f"unsent request(s) sent by the other workers instead")
        return out

    def close(self) -> None:
        ray = require_ray()
        for s in self.states:
            if s.died is None:
                ray.kill(s.actor, no_restart=True)
        disconnect(self.cluster)


def send_lags(records: Sequence[RequestRecord]) -> dict[str, dict[str, float | int | None]]:
    """Per worker: how late its sends were against the global schedule (p50 / p99 / max, seconds)."""
    by: dict[str, list[float]] = {}
    for r in records:
        w = r.extra.get("loadgen_worker")
        if w is not None:
            by.setdefault(str(w), []).append(r.send_lag_s)
    out: dict[str, dict[str, float | int | None]] = {}
    for w, lags in sorted(by.items()):
        a = np.asarray(lags)
        out[w] = {"n": int(a.size), "p50_s": float(np.percentile(a, 50)), "p99_s": float(np.percentile(a, 99)),
                  "max_s": float(a.max())}
    return out


def _clock_offset(actor: Any) -> tuple[float, float]:
    """(worker clock − driver clock, round trip) from the ping with the least round trip."""
    ray = require_ray()
    best = (0.0, float("inf"))
    for _ in range(CLOCK_PINGS):
        t1 = time.time()
        tw = ray.get(actor.clock.remote(), timeout=60)
        t2 = time.time()
        if t2 - t1 < best[1]:
            best = (tw - (t1 + t2) / 2, t2 - t1)
    return best


def _lost_record(req: Request, index: int, scheduled_s: float, sent_s: float | None, ready_s: float | None,
                 t0_wall: float, st: _WorkerState, sent: bool = True) -> RequestRecord:
    where = f"load-generator worker {st.worker} ({st.node.get('node_ip')})"
    why = (f"{where} died while this request was in flight: its response is lost" if sent
           else f"not sent: {where} died and no worker was left to take it")
    at = sent_s if sent_s is not None else scheduled_s
    return RequestRecord(
        id=req.id, segment=req.segment, index=index, scheduled_s=scheduled_s, sent_s=at, ready_s=ready_s,
        started_at=t0_wall + at, ok=False, failure=FailureKind.worker_lost, error=why,
        extra={"loadgen_worker": st.worker},
    )


def public_info(gen: RayLoadGen, records: Sequence[RequestRecord]) -> dict[str, Any]:
    d = gen.info()
    lags = send_lags(records)
    for w in d["per_worker"]:
        w["send_lag"] = lags.get(str(w["worker"]))
    return json.loads(json.dumps(d, default=str))
