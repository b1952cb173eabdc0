"""``simulate --ray``: the offline replay spread over a Ray cluster, merged into exactly the result of
the single-process run.

Plan (workers in ``replay_tasks``):

1. Ray Data reads the files: a dataset of file names, ``map_batches`` through specgauge's own loader
   (gzip/zstd, every format, ``FILE:LINE`` errors), token ids computed there; the record blocks are
   materialised once in the object store (Ray spills them to disk when they outgrow memory), in
   workload order. Many files read in parallel; one file is one reader (split big logs into files).
2. Per-request methods (n-gram, draft model) replay in ``map_batches`` over those blocks: stateless
   tasks for n-gram, an actor pool when a draft model is asked for (it loads once per actor).
3. Stream-ordered methods (suffix: one cache learning from every request in arrival order) replay as
   Ray tasks, one per (method, k, stream group): each walks the record blocks in workload order and
   keeps one cache per stream (``--partition-by`` value), so every stream is replayed exactly, in
   order, on one worker. Different k never share a cache, so k is the parallelism even for one stream.
   ``split_streams`` N > 1 cuts every stream into N pieces that start cold (approximate); the error this
   introduces is measured against an exact replay of the requests after the first cut.
4. The driver merges the rows in (workload order, method, k) and feeds them to the same
   ``ReplayTally`` as the single-process run, with the same duplicate-id, limit and skip rules, so the
   result (per-request rows, tables, float sums) is the same.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from specgauge.scale import ScaleError, require_ray
from specgauge.scale.cluster import AUTO, connect, data_context, disconnect
from specgauge.simulate.replay import RequestAcceptance
from specgauge.drafters.base import is_stateful, offers_whole_output
from specgauge.offline.replay import EMPTY_OUTPUT, NO_RESPONSE
from specgauge.simulate.run import (
    ReplayTally,
    SimulateConfig,
    SimulateResult,
    method_specs,
    stream_note,
)
from specgauge.workload.loaders import file_kinds, segment_rule
from specgauge.workload.reader import WorkloadError
from specgauge.workload.tokenizer import Tokenizer


class RayReplayConfig(BaseModel):
    address: str | None = AUTO
    #: > 1: cut every suffix stream into this many pieces that start with a cold cache (approximate;
    #: the error is measured and reported); 1: exact
    split_streams: int = Field(default=1, ge=1)
    #: requests after the first cut replayed exactly to measure a split's error
    split_check_requests: int = Field(default=200, ge=1)
    #: record block size (prompt + output tokens): small enough to spread a file over the workers
    block_tokens: int = Field(default=1 << 16, ge=1)
    #: tasks per (method, k) for stream-ordered methods; None: 1 without --partition-by, else the cluster's CPUs
    stream_groups: int | None = Field(default=None, ge=1)
    #: cap on the CPUs Ray Data uses (benchmarks compare worker counts); None: the whole cluster
    cpu_limit: float | None = Field(default=None, gt=0)


class SplitError(BaseModel):
    """How wrong a split of one stream is, measured on the requests after the first cut."""

    method: str
    k: int
    requests: int
    first_request: str  #: the window: the first request after the first cut …
    last_request: str  #: … to this one, in workload order
    split_acceptance_rate: float | None
    exact_acceptance_rate: float | None
    split_mean_acceptance_length: float | None
    exact_mean_acceptance_length: float | None

    @property
    def delta_pp(self) -> float | None:
        if self.split_acceptance_rate is None or self.exact_acceptance_rate is None:
            return None
        return 100 * (self.split_acceptance_rate - self.exact_acceptance_rate)


class RayReplayReport(BaseModel):
    cluster: str
    files: int
    record_blocks: int
    per_request_stage: str
    stream_tasks: int
    split_streams: int
    split_errors: list[SplitError] = Field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = Field(default_factory=list)


class _Sums:
    __slots__ = ("acc", "drafts", "dtok", "first", "last", "n")

    def __init__(self) -> None:
        self.n = self.acc = self.dtok = self.drafts = 0
        self.first: tuple[int, str] | None = None
        self.last: tuple[int, str] | None = None

    def add(self, r: dict[str, Any]) -> None:
        key = (r["seq"], r["id"])
        self.first = key if self.first is None or key < self.first else self.first
        self.last = key if self.last is None or key > self.last else self.last
        self.n += 1
        self.acc += r["accepted_tokens"]
        self.dtok += r["draft_tokens"]
        self.drafts += r["drafts"]

    def rate(self) -> float | None:
        return self.acc / self.dtok if self.dtok else None

    def mal(self) -> float | None:
        return 1 + self.acc / self.drafts if self.drafts else None


def _rows(tables: Iterator[Any]) -> Iterator[dict[str, Any]]:
    for t in tables:
        yield from t.to_pylist()


def _generator_rows(gen: Any) -> Iterator[dict[str, Any]]:
    ray = require_ray()
    for ref in gen:
        yield from ray.get(ref).to_pylist()


def _key(r: dict[str, Any]) -> tuple[int, int, int]:
    return r["seq"], r["midx"], r["k"]


def simulate_on_ray(
    cfg: SimulateConfig, tok: Tokenizer, rcfg: RayReplayConfig | None = None, on_request: Callable[[int], None] | None = None,
) -> tuple[SimulateResult, RayReplayReport]:
    """``simulate(cfg, tok)`` on a Ray cluster: the same ``SimulateResult``, plus how it was spread."""
    rcfg = rcfg or RayReplayConfig()
    specs = method_specs(cfg)
    if any(s.probabilistic for s in specs):
        raise ScaleError("--ray: --draft-sampling probabilistic is not distributed; run it without --ray")
    paths = [Path(p) for p in cfg.workload]
    kinds = file_kinds(paths, cfg.load)  # detection as the single-process run does it (empty files fail here)
    segment_rule(cfg.load.segment_by)  # a bad rule fails before the cluster starts
    segment_rule(cfg.partition_by)
    labels = [s.label for s in specs]
    info = connect(rcfg.address)
    t0 = time.perf_counter()
    try:
        return _run(cfg, tok, rcfg, specs, labels, paths, kinds, info.describe(), info.cpus, on_request, t0)
    finally:
        disconnect(info)


def _gpus_for(cfg: SimulateConfig, ray: Any) -> int:
    """Actors with one GPU each for hidden-state heads on ``--device cuda`` / ``auto`` (0: CPU actors):
    one per GPU of the cluster, each loading the target once."""
    if cfg.device == "cpu":
        return 0
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if not gpus and cfg.device != "auto":
        raise ScaleError(f"--ray --device {cfg.device}: the Ray cluster has no GPU (ray status); use --device cpu")
    return gpus


def _run(cfg: SimulateConfig, tok: Tokenizer, rcfg: RayReplayConfig, specs: list[Any], labels: list[str],
         paths: list[Path], kinds: dict[Path, str], cluster: str, cpus: float, on_request: Callable[[int], None] | None,
         t0: float) -> tuple[SimulateResult, RayReplayReport]:
    ray = require_ray()  # with ray.data imported

    from specgauge.scale import replay_tasks as T

    data_context(preserve_order=True, cpu_limit=rcfg.cpu_limit, max_block_bytes=rcfg.block_tokens * 5)  # int32 ids + a little
    cfg_json = cfg.model_dump_json()
    records, n_files = _read_records(ray, cfg_json, kinds, rcfg.block_tokens)
    blocks = records.to_arrow_refs()

    per_request = [i for i, s in enumerate(specs) if not is_stateful(s.kind)]
    ordered = [i for i, s in enumerate(specs) if is_stateful(s.kind)]
    wants_model = any(offers_whole_output(specs[i].kind) for i in per_request)  # loads weights: once per actor

    # stream-ordered methods: tasks over the ordered record blocks
    # k (and the method) already make len(ordered) x len(ks) independent streams; more groups of
    # partitions only where that is fewer than wanted: 2 per CPU (each task reads every block), and
    # at least 16, since a few coarse tasks leave CPUs idle at the end (2 CPUs, n-gram + suffix
    # k 1..8: 8 suffix tasks of 1.5-2 s left one CPU idle up to 0.6 s; 16 half as long, 1->2 CPU
    # speed-up 1.72x -> 1.79x)
    want = max(max(1, int(cpus)) * 2, 16)
    groups = rcfg.stream_groups or (max(1, -(-want // max(1, len(ordered) * len(cfg.ks)))) if cfg.partition_by else 1)
    calls, checks_at, window = _stream_calls(blocks, cfg_json, ordered, cfg.ks, groups, rcfg) if ordered else ([], 0, None)
    # Order of the two stages. Stream tasks are coarse (a whole stream each), per-request tasks fine
    # (a block each). When the stream tasks alone can fill every CPU, the per-request stage runs
    # first, spread over the whole cluster, and the stream tasks follow with every CPU to themselves:
    # started together they would interleave at random, and a late long stream task leaves the other
    # CPUs idle at the end. When there are fewer stream tasks than CPUs, they start first (they are
    # the critical path) and the per-request stage gets the CPUs they leave.
    stream_first = 0 < len(calls) < cpus
    free = max(1, int(cpus) - len(calls)) if stream_first else max(1, int(cpus))
    pool = max(1, min(free, len(blocks)))
    rows_ds, stage = _per_request_stage(ray, records, cfg, cfg_json, per_request, pool, wants_model)
    if not stream_first:
        rows_ds = rows_ds.materialize()  # per-request rows done (actors released) before the stream tasks start
    stream_task = ray.remote(num_returns="streaming", num_cpus=1)(T.replay_streams)
    refs = [stream_task.remote(*args, **kw) for args, kw in calls]
    gens, checks = refs[:checks_at], refs[checks_at:]
    if stream_first:
        rows_ds = rows_ds.materialize()  # per-request rows on the CPUs the stream tasks leave

    tally = ReplayTally(cfg, labels, tok)
    try:
        split_rows = _merge(tally, rows_ds, gens, cfg, window, ordered, on_request)
    except BaseException:
        _cancel(gens + checks)
        raise
    finally:
        tally.close()
    _cancel(gens)  # --limit may end the merge before the streams do; the checks are read below
    if tally.report.items == 0:
        where = str(paths[0]) if len(paths) == 1 else ", ".join(map(str, paths))
        skipped = tally.report.skipped
        raise WorkloadError(where, "no valid requests" + (f" ({skipped} skipped as invalid)" if skipped else ""))
    if cfg.partition_by:
        tally.notes.append(stream_note(cfg.partition_by, specs))
    report = RayReplayReport(cluster=cluster, files=n_files, record_blocks=len(blocks), per_request_stage=stage,
                             stream_tasks=len(gens), split_streams=rcfg.split_streams)
    _explain(report, tally, cfg, rcfg, labels, ordered, checks, split_rows, window)
    result = tally.result()  # ``exact`` keeps its meaning (token ids, not text); a split says APPROXIMATE in its notes
    report.seconds = time.perf_counter() - t0
    return result, report


def _read_records(ray: Any, cfg_json: str, kinds: dict[Path, str], block_tokens: int) -> tuple[Any, int]:
    """Every workload file read into record blocks by Ray Data, in workload order (a Batch API output file
    is read beside its input file, not as a file of its own): the dataset, materialized, and the files read."""
    from specgauge.scale import replay_tasks as T

    outputs = [str(p) for p, kd in kinds.items() if kd == "batch-output"]
    files = [{"file_index": i, "path": str(p), "kind": kd} for i, (p, kd) in enumerate(kinds.items()) if kd != "batch-output"]
    records = (
        ray.data.from_items(files, override_num_blocks=len(files))
        .map_batches(T.read_files, batch_size=1, batch_format="pyarrow", zero_copy_batch=True,
                     fn_kwargs={"cfg_json": cfg_json, "batch_outputs": outputs, "block_tokens": block_tokens})
        .materialize()
    )
    return records, len(files)


def _per_request_stage(ray: Any, records: Any, cfg: SimulateConfig, cfg_json: str, per_request: list[int], pool: int,
                       wants_model: bool) -> tuple[Any, str]:
    """The per-request methods over the record blocks (not started yet): stateless tasks, or an actor pool
    when a method loads weights (one actor per GPU for a hidden-state head on a GPU cluster); and its
    description for the report."""
    from specgauge.scale import replay_tasks as T

    if not wants_model:
        rows_ds = records.map_batches(T.per_request_replay, batch_size=None, batch_format="pyarrow",
                                      fn_kwargs={"cfg_json": cfg_json, "midxs": per_request})
        return rows_ds, "stateless tasks"
    gpus = _gpus_for(cfg, ray)
    rows_ds = records.map_batches(T.PerRequestReplay, batch_size=None, batch_format="pyarrow",
                                  compute=ray.data.ActorPoolStrategy(size=gpus or pool),
                                  fn_constructor_kwargs={"cfg_json": cfg_json, "midxs": per_request},
                                  **({"num_gpus": 1} if gpus else {}))
    stage = (f"actor pool of {gpus}, one per GPU (a hidden-state head's target loaded once per actor)" if gpus
             else f"actor pool of {pool} (draft model loaded once per actor)")
    return rows_ds, stage


def _explain(report: RayReplayReport, tally: ReplayTally, cfg: SimulateConfig, rcfg: RayReplayConfig, labels: list[str],
             ordered: list[int], checks: list[Any], split_rows: dict[tuple[int, int, int], dict[str, Any]],
             window: tuple[int, int] | None) -> None:
    """How the streams were replayed, in the report and the result's notes: a split's measured error, or exact."""
    if window is not None:
        report.split_errors = _split_errors(checks, split_rows, labels)
        for e in report.split_errors:
            d = e.delta_pp
            tally.notes.append(
                f"{e.method} k={e.k}: each stream cut into {rcfg.split_streams} pieces with cold caches: APPROXIMATE; on the "
                f"{e.requests} requests after the first cut, acceptance {_pct(e.split_acceptance_rate)} split vs "
                f"{_pct(e.exact_acceptance_rate)} exact ({'n/a' if d is None else f'{d:+.2f} pp'})"
            )
    elif ordered:
        what = f"each value of {cfg.partition_by}" if cfg.partition_by else "the whole log (one cache)"
        report.notes.append(f"{', '.join(labels[i] for i in ordered)}: replayed exactly, {what} in arrival order on one "
                            f"worker per k ({report.stream_tasks} tasks)")


def _merge(tally: ReplayTally, rows_ds: Any, gens: list[Any], cfg: SimulateConfig, window: tuple[int, int] | None,
           ordered: list[int], on_request: Callable[[int], None] | None) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Feed the per-request rows and the stream tasks' rows, merged in (workload order, method, k), to
    ``tally`` with the single-process run's duplicate-id, limit and skip rules; returns the rows of the
    split-check window (stream-ordered methods), keyed (seq, method index, k)."""
    from specgauge.scale import replay_tasks as T

    split_rows: dict[tuple[int, int, int], dict[str, Any]] = {}
    limit = cfg.load.limit
    seen: dict[str, str] = {}
    merged = heapq.merge(_rows(rows_ds.iter_batches(batch_format="pyarrow", batch_size=None)),
                         *(_generator_rows(g) for g in gens), key=_key)
    for seq, group in itertools.groupby(merged, key=lambda r: r["seq"]):
        rows = list(group)
        head = rows[0]
        if head["midx"] != T.HEADER:
            raise RuntimeError(f"replay rows for seq {seq} came without their record")
        kind = head["kind"]
        if kind == "error":
            raise T.rebuild_error(head)
        if kind == "skip":
            tally.report.add_error(WorkloadError(head["source"], head["err_msg"], head["err_field"] or None))
            continue
        prev = seen.get(head["id"])
        if prev is not None:
            err = WorkloadError(head["source"], f"duplicate request id (first seen at {prev})", "id")
            if not cfg.load.skip_invalid:
                raise err
            tally.report.add_error(err)
            continue
        seen[head["id"]] = head["source"]
        tally.report.items += 1
        if kind == "noresp":
            tally.skip(NO_RESPONSE)
        elif kind == "empty":
            tally.skip(EMPTY_OUTPUT)
        elif kind == "idserror":
            raise T.rebuild_error(head)
        else:
            tally.begin_request(head["exact"], T.match_value(head["match"]), head["calls"] or None)
            for r in rows[1:]:
                if r["role"] == "error":
                    raise T.rebuild_error(r)
                tally.add(RequestAcceptance.model_validate_json(r["ra"]))
                if window is not None and window[0] <= seq < window[1] and r["midx"] in ordered:
                    split_rows[(seq, r["midx"], r["k"])] = r
            n = tally.end_request()
            if on_request is not None:
                on_request(n)
        if limit is not None and tally.report.items >= limit:
            break
    return split_rows


def _stream_calls(blocks: list[Any], cfg_json: str, ordered: list[int], ks: list[int], groups: int,
                  rcfg: RayReplayConfig) -> tuple[list[tuple[tuple[Any, ...], dict[str, Any]]], int, tuple[int, int] | None]:
    """The stream tasks of the stream-ordered methods: (args, kwargs) of each, the "result" ones first,
    where the "check" ones start, and the window a split is measured on (None: not split)."""
    ray = require_ray()
    from specgauge.scale import replay_tasks as T

    window: tuple[int, int] | None = None
    plan: list[tuple[int, int | None, int]] = [(0, None, 0)]
    kw: dict[str, Any] = {}
    if rcfg.split_streams > 1:
        ranges = ray.get([ray.remote(num_cpus=0)(T.seq_range).remote(b) for b in blocks])
        item_seqs = [s for _, _, items in ranges for s in items]
        n = len(item_seqs)
        cuts = [item_seqs[(j * n) // rcfg.split_streams] for j in range(1, rcfg.split_streams) if (j * n) // rcfg.split_streams < n]
        bounds = [0, *cuts, None]
        plan = [(lo, hi, lo) for lo, hi in itertools.pairwise(bounds)]
        kw["block_ranges"] = [(lo, hi) for lo, hi, _ in ranges]
        if cuts:
            c_idx = item_seqs.index(cuts[0])
            end = item_seqs[c_idx + rcfg.split_check_requests] if c_idx + rcfg.split_check_requests < n else None
            window = (cuts[0], end if end is not None else 1 << 62)
    streams = [(midx, k, g) for midx in ordered for k in ks for g in range(groups)]
    calls = [((blocks, cfg_json, midx, k, g, groups, lo, hi, emit, "result"), kw)
             for midx, k, g in streams for lo, hi, emit in plan]
    checks_at = len(calls)
    if window is not None:
        calls += [((blocks, cfg_json, midx, k, g, groups, 0, window[1], window[0], "check"), kw) for midx, k, g in streams]
    return calls, checks_at, window


def _cancel(gens: list[Any]) -> None:
    """Stops stream tasks whose rows are no longer needed (an error, or --limit reached)."""
    ray = require_ray()
    for g in gens:
        with contextlib.suppress(Exception):  # a finished generator cannot be cancelled; nothing to stop
            ray.cancel(g)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _split_errors(checks: list[Any], split_rows: dict[tuple[int, int, int], dict[str, Any]], labels: list[str]) -> list[SplitError]:
    """Acceptance on the check window: the split run's rows against the exact replay's, on the same
    requests (those the merge kept)."""
    exact: dict[tuple[int, int], _Sums] = {}
    split: dict[tuple[int, int], _Sums] = {}
    for gen in checks:
        for r in _generator_rows(gen):
            key = (r["seq"], r["midx"], r["k"])
            if r["role"] != "check" or key not in split_rows:
                continue
            exact.setdefault((r["midx"], r["k"]), _Sums()).add(r)
            split.setdefault((r["midx"], r["k"]), _Sums()).add(split_rows[key])
    out = []
    for (midx, k), ex in sorted(exact.items()):
        sp = split[(midx, k)]
        assert ex.first is not None and ex.last is not None
        out.append(SplitError(method=labels[midx], k=k, requests=ex.n, first_request=ex.first[1], last_request=ex.last[1],
                              split_acceptance_rate=sp.rate(),
                              exact_acceptance_rate=ex.rate(), split_mean_acceptance_length=sp.mal(),
                              exact_mean_acceptance_length=ex.mal()))
    return out


__all__ = ["RayReplayConfig", "RayReplayReport", "SplitError", "simulate_on_ray"]
