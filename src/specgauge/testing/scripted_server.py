"""A scripted speculative-decoding server whose step time follows a KNOWN law, over real HTTP.

For testing calibration and prediction where the truth is known. It batches the real requests
continuously like vLLM / the embedded engine (a step prefills the requests that arrived before it
started and advances every other running request by one speculative step), answers each request with
the workload's logged output token ids (so replay equals the server exactly), drafts with the real
specgauge drafters, and sleeps each step for the law's time (``specgauge.predict.law``) scheduled on
absolute deadlines — the step ends at start + T whatever the host did meanwhile, so nothing drifts.
Wire shape as vLLM with ``--per-request-spec-decode-metrics detailed``: one SSE chunk per step with
continuous usage, ``metrics.speculative_decoding`` in the final chunk, and ``/metrics`` with vLLM's
spec-decode counters and ``vllm:num_requests_running``.

GPU-shaped (``step_fn``, ``--gpu-curve``): each step's time follows a measured GPU curve
(``predict.gpu_curve``: a knee in the forward, a host proposer overlapping the device step), and each
request's drafts come from ``traces`` — the replay of the real drafters, computed once by the caller
(``replay_traces``), per run this server has served (a suffix cache remembers earlier runs). A live
Python suffix drafter costs 1–8 ms per call on a busy 2-core host, so 64 of them per step would break
the step deadlines; the CPU-shaped server keeps drafting live, and its tests check live = replay.

Raw asyncio sockets (as ``specgauge.testing.fakeserver``). In a thread: ``with ScriptedServer(...) as
srv: srv.base_url``; as a process: ``python -m specgauge.testing.scripted_server --workload W --law
JSON [--speculative-config JSON] --port P``, or several configs in one process (``--config LABEL=JSON``
repeated; it prints their URLs; ``testing.server_process.ServerProcess`` starts that) — out of the
client's process, its steps do not wait on the client's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.drafters.base import accepted_options, accepted_prefix, make_drafter
from specgauge.engine.spec_stats import SpecStats
from specgauge.predict.law import SHAPES, is_model_method
from specgauge.predict.predict import step_function
from specgauge.config import conditional_rates, resolve_spec
from specgauge.testing._loop import ThreadedServer
from specgauge.testing.faults import FaultHooks, Faults
from specgauge.testing.scripted_drafts import Traces, draw_accepted, load_logged, replay_traces, request_key, trace_key
from specgauge.testing.vllm_metrics import vllm_metrics_text


@dataclass
class _Req:
    rid: str
    prompt: list[int]
    output: list[int]  #: what this request will emit (the logged output up to max_tokens)
    arrival: float
    chat: bool
    writer: asyncio.StreamWriter
    continuous: bool
    stats: SpecStats | None
    emitted: int = 0
    match: np.ndarray | None = None  #: draft model: draft argmax == logged token, per output position
    done: asyncio.Event = field(default_factory=asyncio.Event)
    sampled: bool = False  #: sent at T > 0 (it still emits the logged output; the law's g terms apply)
    trace: tuple[list[int], list[int]] | None = None  #: replayed (drafted, accepted) per decode step (synthetic: per position)
    step: int = 0  #: decode steps done
    run: int = 0  #: the run over the same requests this server served it in (0: the first)
    return_ids: bool = False  #: the body asked for ``return_token_ids`` (answered in fault mode)
    rng: np.random.Generator | None = None  #: synthetic acceptance: this request's own draws (any batch, same result)


class ScriptedServer(ThreadedServer):
    what = "scripted server"
    start_timeout_s = 30.0

    def __init__(self, workload: Sequence[Path], law: dict[str, float], shape: str = "flattened",
                 speculative_config: dict[str, Any] | None = None, max_batch: int | None = None,
                 model_name: str = "scripted", port: int = 0, step_fn: Any = None,
                 traces: Traces | None = None, faults: Faults | None = None) -> None:
        """``step_fn``: the step time (``predict.step_function``'s signature) in place of ``law``'s;
        ``traces``: drafts per run from the replay (``replay_traces``) in place of live drafting;
        ``faults``: fault mode (``testing.faults``: text, token ids, and the faults it injects)."""
        if shape not in SHAPES:
            raise ValueError(f"shape {shape!r}: expected one of {', '.join(SHAPES)}")
        self.logged = load_logged(workload)
        self.law, self.shape, self.spec = dict(law), shape, speculative_config
        self.method, self.k, cfg = resolve_spec(speculative_config)
        self.hooks = FaultHooks(faults, self.k, speculative_config) if faults is not None else None
        #: synthetic acceptance (vLLM's ``rejection_sample_method: synthetic``): conditional rate per position
        self.synthetic = conditional_rates(cfg.synthetic_rates()) if cfg is not None and cfg.synthetic else None
        self.step_seconds = step_fn or step_function(self.law, shape, self.method, self.k)
        self.max_batch = max_batch
        self.model_name = model_name
        self.port = port
        self.drafter: Any = None
        self._draft_model: Any = None
        self.traces = traces if self.method is not None else None
        self._run, self._run_keys = 0, set()  # runs over the same requests, told apart by a repeated request
        if self.method is not None and cfg is not None and self.traces is None:
            if is_model_method(self.method):
                self._draft_model = make_drafter("draft_model", model=cfg.model, num_speculative_tokens=1)
            else:
                opts = {k: v for k, v in cfg.model_dump().items() if v is not None and k not in ("method", "model")}
                self.drafter = make_drafter(self.method, **accepted_options(self.method, opts))
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "gen": 0, "prompt": 0, "success": 0}
        self.per_pos = [0] * max(self.k, 0)
        self.steps: list[tuple[float, float]] = []  #: (start, duration) of every step, for tests
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._wake: asyncio.Event | None = None
        self._init_lifecycle()
        self._n = 0

    # -- lifecycle (``ThreadedServer``) ------------------------------------------------------------
    async def _start(self) -> asyncio.base_events.Server:
        self._wake = asyncio.Event()
        server = await asyncio.start_server(self._conn, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        asyncio.get_running_loop().create_task(self._engine())
        self._ready.set()
        return server

    async def serve_forever(self) -> None:
        server = await self._start()
        async with server:
            await server.serve_forever()

    # -- the engine loop --------------------------------------------------------------------------
    async def _engine(self) -> None:
        assert self._wake is not None
        perf = time.perf_counter
        prev_end: float | None = None
        while True:
            if not self._running and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                prev_end = None
            # busy: this step starts where the last one ended (absolute deadlines, no drift); idle: when
            # the first waiting request arrived
            if self._running and prev_end is not None:
                start = prev_end
            else:
                start = max(prev_end or 0.0, self._waiting[0].arrival)
            admitted: list[_Req] = []
            cap = self.max_batch or 1 << 30
            while self._waiting and len(self._running) + len(admitted) < cap and self._waiting[0].arrival <= start:
                admitted.append(self._waiting.popleft())
            if not admitted and not self._running:  # the waiting request arrived after `start`: start at it
                prev_end = None
                await asyncio.sleep(0)
                continue
            decode = self._running
            plan = [(r, *self._draft(r)) for r in decode]
            if self.hooks is not None:
                plan = [(r, *self.hooks.accepted(len(r.prompt), d, a)) for r, d, a in plan]
            b = len(decode)
            dsum = sum(d for _, d, _ in plan)
            dmax = max((d for _, d, _ in plan), default=0)
            ctx = sum(len(r.prompt) + r.emitted for r in decode)
            ptok = sum(len(r.prompt) for r in admitted)
            emit = sum(min(a + 1, len(r.output) - r.emitted) for r, _, a in plan)
            smp = [d for r, d, _ in plan if r.sampled]
            dur = self.step_seconds(b, dsum, dmax, ctx, ptok, len(admitted), emit, len(smp), sum(d > 0 for d in smp), sum(smp))
            if self.hooks is not None:
                dur += self.hooks.step_extra_s(ptok)
                self.hooks.on_step(start, dur, [r.arrival for r in admitted])
            end = start + dur
            self.steps.append((start, dur))
            delay = end - perf()
            if delay > 0:  # no busy-wait for the last millisecond: on a busy host spinning costs the slice we need
                await asyncio.sleep(delay)
            still: list[_Req] = []
            for r, d, a in plan:
                r.step += 1
                n = min(a + 1, len(r.output) - r.emitted)
                if r.stats is not None:
                    r.stats.observe(d, a)
                    if d:
                        self.counters["drafts"] += 1
                        self.counters["draft_tokens"] += d
                        self.counters["accepted"] += a
                        for i in range(a):
                            self.per_pos[i] += 1
                if self._emit(r, n):
                    still.append(r)
            for r in admitted:
                if self.traces is not None:
                    r.trace = self.traces[min(r.run, len(self.traces) - 1)].get(trace_key(r.prompt, r.output))
                if self.synthetic is not None:
                    r.rng = np.random.default_rng(int(trace_key(r.prompt, r.output), 16) + r.run)
                if self.drafter is not None:
                    self.drafter.begin(r.rid, r.prompt)
                if self._draft_model is not None:
                    pred = self._draft_model.teacher_forced_argmax(r.prompt, r.output)
                    r.match = np.asarray(pred) == np.asarray(r.output)
                if self._emit(r, 1):
                    still.append(r)
            self._running = still
            prev_end = end

    def _draft(self, r: _Req) -> tuple[int, int]:
        """(drafted, accepted) of this request's next step: the real drafter's proposal on the real history."""
        pos = r.emitted
        if self.method is None:
            return 0, 0
        if self.synthetic is not None:
            return self._draft_synthetic(r, pos)
        if r.trace is not None:
            i = min(r.step, len(r.trace[0]) - 1)
            return (r.trace[0][i], r.trace[1][i]) if i >= 0 else (0, 0)
        if r.match is not None:  # greedy draft model: k drafts, accepted while its argmax matches
            run = 0
            while run < self.k and pos + run < len(r.output) and r.match[pos + run]:
                run += 1
            return self.k, run
        history = r.prompt + r.output[:pos]
        d = self.drafter.propose(r.rid, history, self.k)
        return len(d), accepted_prefix(d, r.output, pos)

    def _draft_synthetic(self, r: _Req, pos: int) -> tuple[int, int]:
        """Synthetic acceptance: the drafter's real proposal length here (the position table, the live
        drafter, or k for a draft model), each position accepted with its conditional rate while the
        ones before it were — whatever the target would have said (vLLM's synthetic rejection rule)."""
        assert self.synthetic is not None and r.rng is not None
        if r.trace is not None:
            d = r.trace[0][pos] if pos < len(r.trace[0]) else 0
        elif r.match is not None or self.drafter is None:
            d = self.k
        else:
            d = len(self.drafter.propose(r.rid, r.prompt + r.output[:pos], self.k))
        return d, draw_accepted(d, self.synthetic, r.rng)

    def _emit(self, r: _Req, n: int) -> bool:
        """Send one step's tokens; True while the request goes on."""
        toks = r.output[r.emitted : r.emitted + n]
        r.emitted += n
        self.counters["gen"] += n
        done = r.emitted >= len(r.output)
        c: dict[str, Any] = {"index": 0, "finish_reason": "length" if done else None}
        delay = 0.0
        if self.hooks is not None:
            text, delay = self.hooks.chunk(r.rid, r.emitted - n, toks)
            c["finish_reason"] = self.hooks.finish_reason(done)
        else:
            text = "".join(f" t{t}" for t in toks)
        if r.chat:
            c["delta"] = {"content": text}
        else:
            c["text"] = text
        if r.return_ids:
            c["token_ids"] = list(toks)
        usage = {"prompt_tokens": len(r.prompt), "completion_tokens": r.emitted, "total_tokens": len(r.prompt) + r.emitted}
        obj: dict[str, Any] = {"id": r.rid, "object": "chat.completion.chunk" if r.chat else "text_completion",
                               "model": self.model_name, "choices": [c]}
        if r.return_ids and r.emitted == n:  # the first chunk: the prompt's ids (vLLM puts them there for chat)
            obj["prompt_token_ids"] = list(r.prompt)
        if r.continuous:
            obj["usage"] = usage
        data = [obj]
        if done:
            tail: dict[str, Any] = {"id": r.rid, "model": self.model_name, "choices": [], "usage": usage}
            if r.stats is not None:
                tail["metrics"] = {"speculative_decoding": r.stats.to_vllm(detailed=True)}
            data.append(tail)
        payload = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in data)
        if done:
            payload += b"data: [DONE]\n\n"
        data_out = f"{len(payload):x}\r\n".encode() + payload + b"\r\n" + (b"0\r\n\r\n" if done else b"")
        if delay > 0:  # fault mode: this response is held back (a stall); its later chunks keep their order
            asyncio.get_running_loop().call_later(delay, self._write, r.writer, data_out, r.done if done else None)
        else:
            self._write(r.writer, data_out, None)
        if done and self.hooks is not None:
            self.hooks.end(r.rid)
        if done:
            if delay <= 0:
                r.done.set()
            self.counters["success"] += 1
            if self.drafter is not None:
                self.drafter.end(r.rid, r.output)
        return not done

    @staticmethod
    def _write(writer: asyncio.StreamWriter, data: bytes, done: asyncio.Event | None) -> None:
        try:
            writer.write(data)
        except (ConnectionError, RuntimeError):
            pass
        if done is not None:
            done.set()

    # -- HTTP -------------------------------------------------------------------------------------
    async def _conn(self, rd: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await rd.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await rd.readexactly(int(hdrs.get("content-length", "0") or 0))
                if not await self._handle(method, path.split("?")[0], body, w):
                    return
        except (ConnectionError, asyncio.CancelledError, asyncio.IncompleteReadError):
            return
        finally:
            try:
                w.close()
            except RuntimeError:
                pass

    async def _plain(self, w: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json") -> bool:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "X")
        w.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await w.drain()
        return True

    async def _handle(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> bool:
        if path == "/health":
            return await self._plain(w, 200, b"")
        if path == "/metrics":
            return await self._plain(w, 200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        if path == "/v1/models":
            card = {"id": self.model_name, "object": "model", **(self.hooks.card() if self.hooks is not None else {})}
            return await self._plain(w, 200, json.dumps({"object": "list", "data": [card]}).encode())
        if path == "/version":
            return await self._plain(w, 200, json.dumps({"version": "scripted-1", "law": self.law, "shape": self.shape,
                                                         "speculative_config": self.spec}).encode())
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return await self._plain(w, 404, b'{"error":{"message":"no such path"}}')
        try:
            req = json.loads(body or b"{}")
            prompt, out = self.logged[request_key(req)]
        except (ValueError, KeyError):
            return await self._plain(w, 400, b'{"error":{"message":"not a request of the scripted workload"}}')
        mt = req.get("max_tokens")
        out = out[: int(mt)] if mt else out
        self._n += 1
        opts = req.get("stream_options") or {}
        key = request_key(req)
        if key in self._run_keys:  # the same request again: a new run over the same requests
            self._run, self._run_keys = self._run + 1, set()
        self._run_keys.add(key)
        r = _Req(f"req-{self._n}", prompt, out, time.perf_counter(), path.endswith("chat/completions"), w,
                 bool(opts.get("continuous_usage_stats")), SpecStats(self.k) if self.k else None,
                 sampled=float(req.get("temperature") or 0.0) > 0, run=self._run,
                 return_ids=self.hooks is not None and bool(req.get("return_token_ids")))
        if self.hooks is not None:
            self.hooks.start(r.rid, out, req)
        self.counters["prompt"] += len(prompt)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        self._waiting.append(r)
        assert self._wake is not None
        self._wake.set()
        # the engine loop writes the rest; keep the connection until this request's last chunk went out
        await r.done.wait()
        await w.drain()
        return True

    def metrics_text(self) -> str:
        gauges = {"num_requests_running": len(self._running), "num_requests_waiting": len(self._waiting)}
        return vllm_metrics_text(self.model_name, self.counters, self.per_pos, spec=bool(self.k), gauges=gauges,
                                 histograms=self.hooks.histograms() if self.hooks is not None else None)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specgauge.testing.scripted_server", description=__doc__.splitlines()[0])
    ap.add_argument("--workload", type=Path, action="append", required=True)
    ap.add_argument("--law", required=True, help="JSON object of law parameters (seconds)")
    ap.add_argument("--shape", default="flattened", choices=SHAPES)
    ap.add_argument("--speculative-config", default=None)
    ap.add_argument("--config", action="append", default=[],
                    help="LABEL=JSON|off: serve several configs at once, each on its own free port; prints "
                         "one JSON line {label: base URL} and serves until stdin closes")
    ap.add_argument("--max-batch", type=int, default=None)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--served-model-name", default="scripted")
    ap.add_argument("--gpu-curve", type=Path, default=None,
                    help="step time from this measured GPU curve (predict.gpu_curve) instead of --law")
    ap.add_argument("--gpu-costs", default="{}", help="JSON of GpuServerCosts fields (scale, host_par, ...)")
    ap.add_argument("--traces", type=Path, default=None,
                    help="JSON {label or config JSON (sort_keys): traces} from replay_traces: drafts per step from the replay, not live")
    ap.add_argument("--replay-runs", type=int, default=0,
                    help="replay the drafters here, for this many runs over the same requests (what --traces would hold)")
    ap.add_argument("--num-prompts", type=int, default=None, help="with --replay-runs: the requests a run sends (bench's plan)")
    ap.add_argument("--faults", default=None,
                    help="fault mode: JSON of testing.faults.Faults ({} for fault mode without faults)")
    a = ap.parse_args(argv)
    law = json.loads(a.law)
    all_traces = json.loads(a.traces.read_text(encoding="utf-8")) if a.traces else {}
    replay: Any = None

    def extra(label: str, spec: dict[str, Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if a.gpu_curve is not None:
            from specgauge.predict.gpu_curve import GpuCurve, GpuServerCosts, gpu_step_function

            method, k, _ = resolve_spec(spec)
            out["step_fn"] = gpu_step_function(GpuCurve.load(a.gpu_curve), GpuServerCosts.model_validate_json(a.gpu_costs),
                                               method, k)
        nonlocal replay
        tr = all_traces.get(label) or all_traces.get(json.dumps(spec, sort_keys=True))
        if tr is None and a.replay_runs and spec:
            from specgauge.predict.replay import WorkloadReplay

            replay = replay or WorkloadReplay(a.workload, None, a.num_prompts)
            tr = replay_traces(replay, spec, a.replay_runs)
        if tr is not None:
            out["traces"] = [{key: (v[0], v[1]) for key, v in run.items()} for run in tr]
        if a.faults is not None:
            out["faults"] = Faults.model_validate_json(a.faults)
        return out

    if a.config:
        import sys
        from contextlib import ExitStack

        with ExitStack() as stack:
            urls = {}
            for item in a.config:
                label, _, body = item.partition("=")
                spec = None if body in ("off", "") else json.loads(body)
                srv = stack.enter_context(ScriptedServer(a.workload, law, a.shape, spec, a.max_batch, a.served_model_name,
                                                         **extra(label, spec)))
                urls[label] = srv.base_url
            print(json.dumps(urls), flush=True)
            sys.stdin.read()  # until the parent closes our stdin (or dies)
        return
    spec = json.loads(a.speculative_config) if a.speculative_config else None
    srv = ScriptedServer(a.workload, law, a.shape, spec, a.max_batch, a.served_model_name, a.port, **extra("", spec))
    asyncio.run(srv.serve_forever())


if __name__ == "__main__":
    main()
