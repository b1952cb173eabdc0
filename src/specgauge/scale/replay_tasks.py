"""What ``simulate --ray`` runs on the workers: read files, replay per-request methods, replay streams.

Everything is data in Arrow tables with fixed schemas, so Ray Data can move and order it:

- ``RECORDS``: one row per workload record of a file, in file order: a request with its token ids
  (``kind`` item), a request without output (``noresp`` / ``empty``), a request whose token ids are
  wrong (``idserror``), or a bad line (``error`` when loading stops there, ``skip`` under
  --skip-invalid). Errors travel as rows, not exceptions, so the driver raises the first one *in
  workload order*, exactly where the single-process run would.
- ``ROWS``: one header row per record (``midx`` -1) and one result row per (record, method, k)
  carrying its ``RequestAcceptance`` as JSON (whatever fields it grows travel unchanged); sorted by
  (seq, midx, k) they are the single-process order.

``seq`` = file index << 32 | record ordinal in the file: the workload order.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from specgauge.errors import UserError
from specgauge.simulate.replay import RequestAcceptance
from specgauge.offline.replay import (
    EMPTY_OUTPUT,
    NO_RESPONSE,
    MethodReplay,
    ReplayedRequest,
    prefetched,
    replayed_request,
)
from specgauge.simulate.run import (
    MethodSpec,
    SimulateConfig,
    SimulateError,
    method_replays,
    method_specs,
)
from specgauge.workload.loaders import LoadReport, iter_file_items, segment_rule
from specgauge.workload.reader import WorkloadError
from specgauge.workload.tokenizer import Tokenizer

SEQ_SHIFT = 32
HEADER = -1  #: midx of a header row
ITEM_KINDS = ("item", "noresp", "empty", "idserror")  #: records that count as workload items
_SKIP_KIND = {NO_RESPONSE: "noresp", EMPTY_OUTPUT: "empty"}

RECORDS = pa.schema([
    ("seq", pa.int64()), ("kind", pa.string()), ("id", pa.string()), ("source", pa.string()),
    ("segment", pa.string()), ("stream", pa.string()), ("exact", pa.bool_()), ("match", pa.int8()),
    ("calls", pa.string()),  # ReplayedRequest.tool_calls ("" = None)
    ("prompt", pa.list_(pa.int32())), ("out", pa.list_(pa.int32())),
    ("err_class", pa.string()), ("err_field", pa.string()), ("err_msg", pa.string()),
])

ROWS = pa.schema([
    ("seq", pa.int64()), ("midx", pa.int32()), ("k", pa.int32()), ("role", pa.string()),
    ("kind", pa.string()), ("id", pa.string()), ("source", pa.string()), ("segment", pa.string()),
    ("exact", pa.bool_()), ("match", pa.int8()), ("calls", pa.string()),
    ("err_class", pa.string()), ("err_field", pa.string()), ("err_msg", pa.string()),
    ("drafts", pa.int64()), ("draft_tokens", pa.int64()), ("accepted_tokens", pa.int64()),  # for split checks
    ("ra", pa.string()),  # the RequestAcceptance row, JSON
])


def _match_code(m: bool | None) -> int:
    return -1 if m is None else int(m)


def match_value(code: int) -> bool | None:
    return None if code < 0 else bool(code)


def stream_group(stream: str, groups: int) -> int:
    """Which stream task replays this stream (stable across processes, unlike ``hash``)."""
    return zlib.crc32(stream.encode("utf-8")) % groups if groups > 1 else 0


class _Columns:
    """Column lists for one Arrow table of a fixed schema; missing values are defaults."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.cols: dict[str, list[Any]] = {f.name: [] for f in schema}
        self.tokens = 0

    def __len__(self) -> int:
        return len(self.cols["seq"])

    def add(self, **values: Any) -> None:
        for f in self.schema:
            v = values.get(f.name)
            if v is None:
                v = [] if pa.types.is_list(f.type) else False if f.type == pa.bool_() else "" if f.type == pa.string() else -1 if f.name in ("match", "midx") else 0
            self.cols[f.name].append(v)

    def take(self) -> pa.Table:
        t = pa.Table.from_pydict(self.cols, schema=self.schema)
        self.cols = {f.name: [] for f in self.schema}
        self.tokens = 0
        return t


# ---------------------------------------------------------------------------------------- caches

_TOKENIZERS: dict[str | None, Tokenizer] = {}


def tokenizer(spec: str | None) -> Tokenizer:
    """One tokenizer per worker process and spec (loading one costs more than a small batch)."""
    tok = _TOKENIZERS.get(spec)
    if tok is None:
        from specgauge.workload.tokenizer import resolve_tokenizer

        tok = _TOKENIZERS[spec] = resolve_tokenizer(spec)
    return tok


def _err_fields(e: Exception) -> dict[str, str]:
    if isinstance(e, WorkloadError):
        return {"err_class": "WorkloadError", "source": e.source, "err_field": e.field or "", "err_msg": e.message}
    return {"err_class": "SimulateError", "err_msg": str(e)}


def rebuild_error(row: dict[str, Any]) -> UserError:
    """The exception a worker turned into a row, as the single-process run would have raised it."""
    if row["err_class"] == "WorkloadError":
        return WorkloadError(row["source"], row["err_msg"], row["err_field"] or None)
    return SimulateError(row["err_msg"])


# ---------------------------------------------------------------------------------------- reading


class _OrderedReport(LoadReport):
    """A load report that also remembers skipped records in order, so they become rows in place."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[WorkloadError] = []

    def add_error(self, err: WorkloadError) -> None:
        super().add_error(err)
        self.pending.append(err)


def read_files(batch: pa.Table, cfg_json: str, batch_outputs: Sequence[str], block_tokens: int) -> Iterator[pa.Table]:
    """Ray Data ``map_batches`` UDF over the file list (file_index, path, kind): every record of each
    file as ``RECORDS`` rows, in blocks of about ``block_tokens`` tokens (many small blocks spread
    the replay over the workers; one file never becomes one giant block)."""
    from pathlib import Path

    cfg = SimulateConfig.model_validate_json(cfg_json)
    tok = tokenizer(cfg.tokenizer)
    seg = segment_rule(cfg.load.segment_by)
    part = segment_rule(cfg.partition_by)
    limit = cfg.load.limit
    outs = [Path(p) for p in batch_outputs]
    buf = _Columns(RECORDS)
    for fi, path, kind in zip(batch.column("file_index").to_pylist(), batch.column("path").to_pylist(),
                              batch.column("kind").to_pylist()):
        ordinal = 0
        report = _OrderedReport()
        seen: set[str] = set()
        items = iter_file_items(Path(path), kind, cfg.load, report, outs)
        while True:
            try:
                item = next(items, None)
            except UserError as e:  # loading stops at this record, as in the single-process run
                for err in report.pending:
                    buf.add(seq=(fi << SEQ_SHIFT) | ordinal, kind="skip", **_err_fields(err))
                    ordinal += 1
                buf.add(seq=(fi << SEQ_SHIFT) | ordinal, kind="error", **_err_fields(e))
                break
            for err in report.pending:
                buf.add(seq=(fi << SEQ_SHIFT) | ordinal, kind="skip", **_err_fields(err))
                ordinal += 1
            report.pending.clear()
            if item is None:
                break
            req = item.request
            if seg is not None:
                req.segment = seg(req)
            stream = part(req) if part is not None else ""
            row: dict[str, Any] = {"seq": (fi << SEQ_SHIFT) | ordinal, "id": req.id, "source": item.source,
                                   "segment": req.segment, "stream": stream}
            ordinal += 1
            try:
                rr = replayed_request(item, tok, stream)
            except SimulateError as e:
                row.update(kind="idserror", **_err_fields(e))
            else:
                if isinstance(rr, ReplayedRequest):
                    row.update(kind="item", exact=rr.exact, prompt=rr.prompt_ids, out=rr.output_ids,
                               match=_match_code(rr.model_match), calls=rr.tool_calls or "")
                    buf.tokens += len(rr.prompt_ids) + len(rr.output_ids)
                else:
                    row["kind"] = _SKIP_KIND[rr]
            buf.add(**row)
            if buf.tokens >= block_tokens:
                yield buf.take()
            if req.id not in seen:
                seen.add(req.id)
                if limit is not None and len(seen) >= limit:  # no file gives more than --limit requests
                    break
    if len(buf):
        yield buf.take()


# ---------------------------------------------------------------------------------------- replay


def _result(buf: _Columns, seq: int, midx: int, ra: RequestAcceptance, role: str = "result") -> None:
    buf.add(seq=seq, midx=midx, k=ra.k, role=role, kind="item", id=ra.request_id, segment=ra.segment, exact=ra.exact,
            drafts=ra.drafts, draft_tokens=ra.draft_tokens, accepted_tokens=ra.accepted_tokens, ra=ra.model_dump_json())


def _replay_one(runner: MethodReplay, buf: _Columns, midx: int, r: dict[str, Any], ks: Sequence[int] | None = None,
                role: str = "result", emit: bool = True) -> bool:
    """Replays one record for one method; False after an error row (the stream stops there)."""
    try:
        traces = runner.traces(r["id"], r["source"], r["prompt"], r["out"], r["stream"], ks)
    except UserError as e:
        buf.add(seq=r["seq"], midx=midx, k=0, role="error", kind="idserror", id=r["id"], **_err_fields(e))
        return False
    if emit:
        n_out = len(r["out"])
        for k, trace in traces.items():
            _result(buf, r["seq"], midx, RequestAcceptance.from_trace(trace, r["id"], r["segment"], runner.spec.label, k,
                                                                      n_out, r["exact"]), role)
    return True


def _item_ids(r: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    return (r["prompt"], r["out"]) if r["kind"] == "item" else None


class PerRequestReplay:
    """Ray Data ``map_batches`` callable: for each record a header row, and for every per-request
    method (n-gram, draft model) its result rows. As a class it runs in an actor pool, so a draft
    model loads once per actor; n-gram alone runs as plain tasks through ``per_request_replay``."""

    def __init__(self, cfg_json: str, midxs: Sequence[int]) -> None:
        cfg = SimulateConfig.model_validate_json(cfg_json)
        specs = method_specs(cfg)
        self.runners = list(zip(midxs, method_replays([specs[i] for i in midxs], cfg.ks, tokenizer(cfg.tokenizer)), strict=True))

    def __call__(self, batch: pa.Table) -> pa.Table:
        buf = _Columns(ROWS)
        for r in prefetched(batch.to_pylist(), _item_ids, [runner for _, runner in self.runners]):  # a head's target passes together
            buf.add(seq=r["seq"], midx=HEADER, k=0, role="header", kind=r["kind"], id=r["id"], source=r["source"],
                    segment=r["segment"], exact=r["exact"], match=r["match"], calls=r["calls"], err_class=r["err_class"],
                    err_field=r["err_field"], err_msg=r["err_msg"])
            if r["kind"] != "item":
                continue
            for midx, runner in self.runners:
                if not _replay_one(runner, buf, midx, r):
                    break
        return buf.take()


_PER_REQUEST: dict[tuple[str, tuple[int, ...]], PerRequestReplay] = {}


def per_request_replay(batch: pa.Table, cfg_json: str, midxs: Sequence[int]) -> pa.Table:
    """The stateless-task form of ``PerRequestReplay`` (drafters built once per worker process)."""
    key = (cfg_json, tuple(midxs))
    fn = _PER_REQUEST.get(key)
    if fn is None:
        fn = _PER_REQUEST[key] = PerRequestReplay(cfg_json, midxs)
    return fn(batch)


def replay_streams(
    blocks: Sequence[Any], cfg_json: str, midx: int, k: int, group: int, groups: int,
    lo_seq: int = 0, hi_seq: int | None = None, emit_seq: int = 0, role: str = "result", chunk_rows: int = 4096,
    block_ranges: Sequence[tuple[int, int]] | None = None,
) -> Iterator[pa.Table]:
    """A Ray streaming-generator task: one stream-ordered method (suffix) at one k over the streams of
    one group, in workload order, each stream with its own cache. Replays records with
    ``lo_seq <= seq < hi_seq`` and emits rows for ``seq >= emit_seq`` (a split piece starts cold at
    its ``lo_seq``; the exact check replays from 0 and emits only its window). ``blocks`` are the
    record blocks in workload order (fetched one at a time); ``block_ranges`` (min, max seq) lets a
    piece skip blocks outside its range."""
    import ray

    cfg = SimulateConfig.model_validate_json(cfg_json)
    spec: MethodSpec = method_specs(cfg)[midx]
    (runner,) = method_replays([spec], [k], tokenizer(cfg.tokenizer))
    hi = hi_seq if hi_seq is not None else 1 << 62
    buf = _Columns(ROWS)
    seen: set[str] = set()  # a duplicate id is skipped by the driver; its cache must not learn it either
    last = -1
    for bi, ref in enumerate(blocks):
        if block_ranges is not None and (block_ranges[bi][1] < lo_seq or block_ranges[bi][0] >= hi):
            continue
        table: pa.Table = ray.get(ref)
        seqs = table.column("seq").to_pylist()
        if seqs and (seqs[0] <= last or any(a >= b for a, b in itertools.pairwise(seqs))):
            raise RuntimeError(f"record blocks out of workload order after seq {last}")
        last = seqs[-1] if seqs else last
        kinds, streams = table.column("kind").to_pylist(), table.column("stream").to_pylist()
        keep = [i for i, (seq, kd, sm) in enumerate(zip(seqs, kinds, streams))
                if lo_seq <= seq < hi and kd == "item" and (groups == 1 or stream_group(sm, groups) == group)]
        if not keep:  # only the rows this task replays become Python objects (token lists are the cost)
            continue
        for r in (table if len(keep) == len(seqs) else table.take(keep)).to_pylist():
            seq = r["seq"]
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            if not _replay_one(runner, buf, midx, r, [k], role, emit=seq >= emit_seq):
                yield buf.take()
                return
            if len(buf) >= chunk_rows:
                yield buf.take()
        if last >= hi:
            break
    if len(buf):
        yield buf.take()


def seq_range(table: pa.Table) -> tuple[int, int, list[int]]:
    """(min seq, max seq, every item's seq) of one record block: the driver's plan for a split."""
    seqs = table.column("seq").to_pylist()
    kinds = table.column("kind").to_pylist()
    items = [s for s, kd in zip(seqs, kinds) if kd in ITEM_KINDS]
    return (min(seqs), max(seqs), items) if seqs else (0, -1, [])
