"""Bench runs of a scripted known-law server on a VIRTUAL clock: the records a bench run would write,
synthesised exactly from the server's law, with no sleep, no socket and no scheduler jitter.

The scripted server (``testing.scripted_server``) sleeps each step for its law's time and the client
timestamps what arrives, so a calibration on it is right only up to how busy the host is (a test on
it flipped at load 13). Here the same server is run on a virtual clock: the closed loop of bench against
a continuous-batching server (``predict.schedule.simulate_schedule``: who runs in which step, the client
sending the next request when one finishes) with each step timed by the server's own step function (the
law's, or a GPU curve's: ``predict.gpu_curve``), and every request written as bench writes it — its
chunks at the ends of the steps it ran in (plus half the HTTP round trip ``ell``), one chunk per step,
the server's per-request counts with ``per_step_drafted`` / ``per_step_accepted`` (vLLM's ``detailed``).
Drafts per step come from the replay of the real drafters (what the scripted server answers with when
given ``traces``); a synthetic-acceptance config draws its acceptance with the scripted server's own
draws (``scripted_drafts.synthetic_steps``: per request, seeded by the request and the run).

So calibrate → fit → predict can be held to near-exact equalities: the truth is the law, the records
carry no noise, and the same inputs give the same verdict on any machine. What this cannot test —
real HTTP, bench's stream parsing, the server's batching against the client's — stays in the
end-to-end tests over the real scripted server, which assert only what timing cannot flip.

Boundary: a test double (imported by tests and benchmarks only); it writes run directories that
``predict.fit_profile`` / ``calibrate --from-runs`` / ``calibrate.measure_cell`` read like bench's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.config import conditional_rates, resolve_spec
from specgauge.engine.spec_stats import SpecStats
from specgauge.loadgen.dialects.vllm import spec_from_vllm_request
from specgauge.predict.runs import write_cell
from specgauge.predict.replay import WorkloadReplay, prior_requests
from specgauge.predict.schedule import PlannedRequest, simulate_schedule, step_ends
from specgauge.predict.types import CellSpec
from specgauge.records import Chunk, RequestRecord, TokenCountSource
from specgauge.testing.scripted_drafts import synthetic_steps, trace_key

#: the HTTP round trip of the virtual client (s): a loopback request's, as the fit's ``ell`` sees it
ELL = 6e-4
#: a step function of ``predict.step_function``'s signature (batch, drafted sum, drafted max, context,
#: prefill tokens, prefill requests, emitted, sampled, sampled verifying, sampled drafted) -> seconds
StepFn = Callable[..., float]


def planned_run(replay: WorkloadReplay, spec: dict[str, Any] | None, run: int = 0,
                sampled_repeat: bool = False) -> list[PlannedRequest]:
    """What the scripted server does with each request of ``replay`` under ``spec`` in its run ``run`` over
    the same requests: the replayed steps (a suffix cache holding the ``run`` earlier runs; ``sampled_repeat``:
    their sampled requests' outputs too, as a live-drafting scripted server, which emits the logged output
    at any temperature, has them), or for a synthetic config the drafter's proposal per position with
    acceptance drawn as the server draws it."""
    prior = prior_requests(len(replay.requests), 0, run)
    _, _, cfg = resolve_spec(spec)
    if cfg is None or not cfg.synthetic:
        return replay.planned(spec, prior, sampled_repeat)
    assert spec is not None
    rates = conditional_rates(cfg.synthetic_rates())
    out = []
    for lr, pt in zip(replay.requests, replay.positions(spec, prior), strict=True):
        rng = np.random.default_rng(int(trace_key(lr.prompt_ids, lr.output_ids), 16) + run)
        d, a = synthetic_steps(pt.drafted.astype(int).tolist(), len(lr.output_ids), rates, rng)
        out.append(PlannedRequest(lr.id, len(lr.prompt_ids), len(lr.output_ids), np.asarray(d, dtype=np.int64),
                                  np.asarray(a, dtype=np.int64), lr.greedy))
    return out


def write_run(out_dir: Path, workload: Path, replay: WorkloadReplay, cell: CellSpec, step_fn: StepFn, *,
              run: int = 0, ell: float = ELL, t0: float = 0.0, server: dict[str, Any] | None = None,
              num_prompts: int | None = None, sampled_repeat: bool = False) -> float:
    """One virtual bench run (closed loop at ``cell.concurrency`` over the first ``num_prompts`` of
    ``replay``'s requests — bench's plan — all of them by default) into ``out_dir``: results.jsonl, run.json
    and cell.json, as bench and calibrate write them. ``t0``: its first send (Unix s; runs of one server
    go in order of it); returns when its last response ended, for the next run's ``t0``."""
    spec = cell.speculative_config
    method, k, _ = resolve_spec(spec)
    reqs = planned_run(replay, spec, run, sampled_repeat)[:num_prompts]
    durations: list[float] = []

    def timed(*row: int) -> float:
        durations.append(float(step_fn(*row)))
        return durations[-1]

    sched = simulate_schedule(reqs, cell.concurrency, timed, ell, method, k)
    ends = step_ends(sched, np.asarray(durations), ell)
    send = np.where(sched.send_after >= 0, ends[np.maximum(sched.send_after, 0)] + ell / 2, 0.0)
    by_id = {lr.id: (i, lr) for i, lr in enumerate(replay.requests)}
    records = []
    for j, r in enumerate(reqs):
        first, last = int(sched.first_step[j]), int(sched.last_step[j])
        # one chunk per step it ran in: the prefill's first token, then accepted + 1 per decode step
        assert last - first == len(r.drafted), (r.id, first, last, len(r.drafted))
        ntok = [1]
        left = r.output_tokens - 1
        stats = SpecStats(k) if k else None
        for d, a in zip(r.drafted.tolist(), r.accepted.tolist(), strict=True):
            ntok.append(min(a + 1, left))
            left -= ntok[-1]
            if stats is not None:
                stats.observe(int(d), int(a))
        t = ends[first : last + 1] + ell / 2 - send[j]
        extra = {"metrics": {"speculative_decoding": stats.to_vllm(detailed=True)}} if stats is not None else {}
        idx, lr = by_id[r.id]
        records.append(RequestRecord(
            id=r.id, index=idx, scheduled_s=0.0, sent_s=float(send[j]), ready_s=0.0, started_at=t0 + float(send[j]), ok=True,
            http_status=200, ttft_s=float(t[0]), e2e_s=float(t[-1]), elapsed_s=float(t[-1]),
            chunks=[Chunk(t=float(x), n=int(n)) for x, n in zip(t, ntok, strict=True)], token_counts=TokenCountSource.usage,
            prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens, finish_reason="length",
            text="".join(f" t{x}" for x in lr.output_ids),
            spec=spec_from_vllm_request(extra["metrics"]["speculative_decoding"]) if stats is not None else None, extra=extra))
    records.sort(key=lambda rec: rec.started_at + (rec.e2e_s or 0.0))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.jsonl").write_text("".join(rec.model_dump_json() + "\n" for rec in records), encoding="utf-8")
    rel = os.path.relpath(workload.resolve(), out_dir.resolve())  # as bench writes it: no machine path
    config = {"workload": [str(rel)], "max_concurrency": cell.concurrency, "num_prompts": len(reqs), "warmup": 0, "seed": 0,
              "max_tokens": None, "request_rate": None, "speculative_config": None}
    run_json = {"specgauge_version": "virtual", "started_at": t0, "config": config, "dialect": "vllm",
                "server": {"/version": {"version": "scripted-virtual", **(server or {}), "speculative_config": spec}},
                "virtual_clock": {"steps": len(durations), "ell_s": ell}}
    (out_dir / "run.json").write_text(json.dumps(run_json, indent=1), encoding="utf-8")
    write_cell(out_dir, cell)
    return t0 + float(ends[-1]) + ell


@dataclass
class VirtualServers:
    """One scripted server per config, kept up across runs (as ``ServerProcess`` / ``--url`` targets are):
    each config's runs are numbered in the order they ran (a suffix cache remembers the earlier ones)."""

    workload: Path
    step_fn_of: Callable[[dict[str, Any] | None], StepFn]  #: the server's step time for one config
    ell: float = ELL
    server: dict[str, Any] = field(default_factory=dict)  #: what its /version says (the law)
    clock: float = 1.0e9  #: the virtual Unix time of the next run's first send
    runs: dict[str, int] = field(default_factory=dict)
    #: the GPU-shaped scripted server's ``--num-prompts``: its drafts for run r are the replay of that many
    #: requests with r such runs before (``scripted_drafts.replay_traces``), whatever a run sends; None: the
    #: replay of each run's own requests with r runs like it before (the live-drafting server's state when
    #: every run sends the same requests)
    server_prompts: int | None = None
    #: a stateful drafter's earlier runs hold their sampled requests' outputs (the live-drafting server:
    #: it emits the logged output at any temperature); False: as ``replay_traces`` plans the GPU-shaped one
    sampled_repeat: bool = False
    _replays: dict[int, WorkloadReplay] = field(default_factory=dict)

    def replay(self, num_prompts: int) -> WorkloadReplay:
        """The workload's replay planned for ``num_prompts`` requests (bench's plan), made once."""
        if num_prompts not in self._replays:
            self._replays[num_prompts] = WorkloadReplay([self.workload], None, num_prompts)
        return self._replays[num_prompts]

    def run(self, out_dir: Path, cell: CellSpec, num_prompts: int) -> Path:
        """Bench ``cell`` with ``num_prompts`` requests on its config's server into ``out_dir``."""
        key = json.dumps(cell.speculative_config, sort_keys=True)
        run = self.runs.get(key, 0)
        self.runs[key] = run + 1
        served = self.server_prompts or num_prompts
        assert num_prompts <= served, (num_prompts, served)
        end = write_run(out_dir, self.workload, self.replay(served), cell, self.step_fn_of(cell.speculative_config),
                        run=run, ell=self.ell, t0=self.clock, server=self.server, num_prompts=num_prompts,
                        sampled_repeat=self.sampled_repeat)
        self.clock = end + 1.0
        return out_dir

    def grid(self, out: Path, cells: Sequence[tuple[CellSpec, int]]) -> dict[tuple[str, int], Path]:
        """Each (cell, requests) into ``out/LABEL/cC`` (``out/nN/LABEL/cC`` when the counts differ), in the
        order ``calibrate`` runs them: grouped by request count, each config's concurrencies ascending."""
        groups: dict[int, list[CellSpec]] = {}
        for c, n in cells:
            groups.setdefault(n, []).append(c)
        dirs: dict[tuple[str, int], Path] = {}
        for n, group in groups.items():
            base = out if len(groups) == 1 else out / f"n{n}"
            labels = list(dict.fromkeys(c.label for c in group))
            for lb in labels:
                for c in sorted((c for c in group if c.label == lb), key=lambda c: c.concurrency):
                    dirs[(c.label, c.concurrency)] = self.run(base / c.label / f"c{c.concurrency}", c, n)
        return dirs


def law_servers(workload: Path, law: dict[str, float], shape: str = "flattened", ell: float = ELL) -> VirtualServers:
    """Virtual scripted servers timed by a step-cost law (``predict.law``), as ``ScriptedServer(law=...)``."""
    from specgauge.predict.predict import step_function

    def fn(spec: dict[str, Any] | None) -> StepFn:
        method, k, _ = resolve_spec(spec)
        return step_function(law, shape, method, k)

    return VirtualServers(workload, fn, ell, {"law": dict(law), "shape": shape}, sampled_repeat=True)


def gpu_servers(workload: Path, curve: Path, costs: Any, num_prompts: int, ell: float = ELL,
                replays: dict[int, WorkloadReplay] | None = None) -> VirtualServers:
    """Virtual scripted servers timed on a measured GPU curve (``predict.gpu_curve``), as ``--gpu-curve``
    with ``--num-prompts num_prompts`` (``VirtualServers.server_prompts``); ``replays``: replays already
    made, by number of requests (their traces are cached)."""
    from specgauge.predict.gpu_curve import GpuCurve, gpu_step_function

    c = GpuCurve.load(curve)

    def fn(spec: dict[str, Any] | None) -> StepFn:
        method, k, _ = resolve_spec(spec)
        return gpu_step_function(c, costs, method, k)

    return VirtualServers(workload, fn, ell, {"gpu_costs": costs.model_dump(mode="json")}, server_prompts=num_prompts,
                          _replays=dict(replays or {}))
