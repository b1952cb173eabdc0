"""Runs the :class:`Engine` loop in one background thread and hands each request's step outputs to
the asyncio side through a per-request queue. Times every event (TTFT, inter-token, end-to-end) and
feeds the Prometheus metrics, so the counters and the per-request statistics come from the same steps.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from specgauge.engine.core import Engine
from specgauge.engine.step_records import StepOutput
from specgauge.engine.metrics import EngineMetrics
from specgauge.engine.sampling import SamplingParams

_log = logging.getLogger("specgauge.engine")
#: steps in a row that raise outside the engine's per-request containment before the loop gives up
MAX_STEP_FAILURES = 8


@dataclass
class Event:
    """One step's output for one request, timed by the engine thread."""

    out: StepOutput
    time: float  # time.monotonic() when the step finished
    spec: dict[str, Any] | None  # vLLM's per-request speculative_decoding object, on the final event only
    finish_reason: str | None  # what the client sees ("stop" for a stop string, not "abort")


@dataclass
class _Track:
    queue: asyncio.Queue[Event]
    arrival: float
    last: float | None = None
    reason: str = "abort"  # reason reported if the engine finishes the request by abort


class EngineRunner:
    def __init__(self, engine: Engine, metrics: EngineMetrics, detailed_spec_metrics: bool = False) -> None:
        self.engine, self.metrics, self.detailed = engine, metrics, detailed_spec_metrics
        self._tracks: dict[str, _Track] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="specgauge-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def healthy(self) -> bool:
        return self.error is None and self._thread is not None and self._thread.is_alive()

    def submit(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> asyncio.Queue[Event]:
        """Queue a request (raises ``RequestError`` for one the engine refuses)."""
        q: asyncio.Queue[Event] = asyncio.Queue()
        self._tracks[request_id] = _Track(q, time.monotonic())
        try:
            self.engine.add_request(request_id, prompt_ids, params)
        except Exception:
            self._tracks.pop(request_id, None)
            raise
        self.metrics.prompt_tokens.inc(len(prompt_ids))
        self._wake.set()
        return q

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request at the next step (client gone: "abort"; stop string: "stop")."""
        t = self._tracks.get(request_id)
        if t is not None:
            t.reason = reason
        self.engine.abort(request_id)
        self._wake.set()

    def _run(self) -> None:
        """The step loop. A request that fails inside a step is failed by the engine (``finish_reason
        "error"``); a step that raises outside that containment fails the requests in flight and the loop
        goes on. Only ``MAX_STEP_FAILURES`` such steps in a row stop it (then ``/health`` says 503)."""
        failures = 0
        try:
            while not self._stop.is_set():
                self._wake.wait(timeout=0.1)
                self._wake.clear()
                while self.engine.has_unfinished() and not self._stop.is_set():
                    try:
                        outs = self.engine.step()
                    except Exception as e:
                        failures += 1
                        if failures >= MAX_STEP_FAILURES:
                            raise
                        _log.error("engine step failed (%s: %s); the requests in flight get an error", type(e).__name__, e)
                        for rid in list(self._tracks):
                            self.engine.abort(rid)
                            self._fail(rid)
                        continue
                    failures = 0
                    now = time.monotonic()
                    for o in outs:
                        self._dispatch(o, now)
                    self.metrics.set_state(self.engine.num_running, self.engine.num_waiting, self.engine.kv_cache_usage())
                self.metrics.set_state(self.engine.num_running, self.engine.num_waiting, self.engine.kv_cache_usage())
        except BaseException as e:  # surfaced through /health and to waiting requests
            self.error = e
            for rid in list(self._tracks):
                self._fail(rid)
            raise

    def _dispatch(self, o: StepOutput, now: float) -> None:
        t = self._tracks.get(o.request_id)
        self.metrics.observe_step(o)
        if t is None:
            return
        if o.new_token_ids:
            if t.last is None:
                self.metrics.ttft.observe(now - t.arrival)
            else:
                self.metrics.itl.observe(now - t.last)
            t.last = now
        reason = None
        spec = None
        if o.finished:
            reason = t.reason if o.finish_reason == "abort" else o.finish_reason
            assert reason is not None
            self.metrics.observe_finished(reason)
            self.metrics.e2e.observe(now - t.arrival)
            spec = o.spec.to_vllm(self.detailed) if o.spec is not None else None
            del self._tracks[o.request_id]
        ev = Event(o, now, spec, reason)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(t.queue.put_nowait, ev)

    def _fail(self, rid: str) -> None:
        t = self._tracks.pop(rid, None)
        if t is not None and self._loop is not None:
            o = StepOutput.failed(rid)
            self._loop.call_soon_threadsafe(t.queue.put_nowait, Event(o, time.monotonic(), None, "error"))
