"""Workload loading: streaming iteration, Batch API joins, segments, bad input.

``iter_workload(paths, options)`` yields ``WorkloadItem``s one at a time (files are streamed, never
loaded whole). Each file is opened once (``reader.WorkloadFile``): its format is detected from its
head (``detect``) and it is then parsed through the same handle. Every malformed record raises
``WorkloadError("FILE:LINE", field, message)``; with ``skip_invalid`` it is counted in the
``LoadReport`` instead and loading continues.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specgauge.workload import formats as F
from specgauge.workload import importers
from specgauge.workload.batch_output import BatchOutputIndex
from specgauge.workload.detect import first_record, format_of
from specgauge.workload.reader import DEFAULT_MAX_LINE_BYTES, WorkloadError, WorkloadFile
from specgauge.workload.schema import Request, WorkloadItem

Format = Literal["openai", "batch", "sharegpt", "vllm-custom", "text", "otlp", "langfuse", "litellm", "vllm-log"]
#: the last four are trace importers (``specgauge.workload.importers``)
FORMATS: tuple[str, ...] = ("openai", "batch", "sharegpt", "vllm-custom", "text", *importers.IMPORTERS)


class LoadOptions(BaseModel):
    format: Format | None = Field(default=None, description="override format detection")
    segment_by: str | None = Field(
        default=None, description="a field path (e.g. metadata.team) or 're:REGEX' over the system prompt"
    )
    skip_invalid: bool = False
    max_line_bytes: int = Field(default=DEFAULT_MAX_LINE_BYTES, ge=1024)
    max_decompressed_bytes: int | None = Field(
        default=None, ge=1, description="a compressed file may decompress to this many bytes (default: 100x its size, >= 256 MiB)"
    )
    limit: int | None = Field(default=None, ge=1, description="stop after this many requests")


@dataclass
class LoadReport:
    items: int = 0
    skipped: int = 0
    #: first problems found (all are counted in ``skipped``)
    errors: list[str] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)

    def add_error(self, err: WorkloadError) -> None:
        self.skipped += 1
        if len(self.errors) < 20:
            self.errors.append(str(err))


# ---------------------------------------------------------------- files


#: files held open at once between detection and reading; past it each is closed after its detection
#: and opened again to be read (a workload of many shards must not run out of descriptors)
OPEN_AT_ONCE = 64


class _Files:
    """The workload's files, each opened once on first use (``WorkloadFile``) and closed by ``done`` or
    at the end."""

    def __init__(self, opts: LoadOptions) -> None:
        self._opts = opts
        self._open: dict[Path, WorkloadFile] = {}

    def __getitem__(self, path: Path) -> WorkloadFile:
        f = self._open.get(path)
        if f is None:
            f = self._open[path] = WorkloadFile(path, self._opts.max_line_bytes, self._opts.max_decompressed_bytes)
        return f

    def done(self, path: Path) -> None:
        f = self._open.pop(path, None)
        if f is not None:
            f.close()

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()


# ---------------------------------------------------------------- segments


def segment_rule(spec: str | None) -> Callable[[Request], str] | None:
    """``re:REGEX`` over the system prompt (first group, else the match; 'other' when none), or a
    dotted field path looked up in the request body and its metadata."""
    if not spec:
        return None
    if spec.startswith("re:"):
        try:
            rx = re.compile(spec[3:])
        except re.error as e:
            raise WorkloadError("--segment-by", f"bad regular expression: {e}") from None

        def by_regex(req: Request) -> str:
            m = rx.search(req.system_text())
            if not m:
                return "other"
            return (m.group(1) if rx.groups else m.group(0)) or "other"

        return by_regex
    path = spec.split(".")

    def by_field(req: Request) -> str:
        obj: Any = {**req.extra, **req.model_dump(exclude={"extra"}, mode="json")}
        for part in path:
            if isinstance(obj, dict) and part in obj:
                obj = obj[part]
            elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
                obj = obj[int(part)]
            else:
                return "(none)"
        return str(obj) if obj is not None else "(none)"

    return by_field


# ---------------------------------------------------------------- main entry


def _kinds(paths: list[Path], opts: LoadOptions, files: _Files) -> dict[Path, str]:
    """Each file's format (``--format`` or detected, the files opened in order); Batch API output
    files are ``batch-output``."""
    if not paths:
        raise WorkloadError("workload", "no workload files given")
    kinds: dict[Path, str] = {}
    for p in paths:
        if opts.format is not None and opts.format != "batch":
            kinds[p] = opts.format
            continue
        kind = format_of(files[p])
        if opts.format == "batch" and kind not in ("batch", "batch-output"):
            kind = "batch"  # an explicit 'batch' covers output files given alongside
        kinds[p] = kind
        if len(paths) > OPEN_AT_ONCE:
            files[p].park()
    outputs = [p for p, k in kinds.items() if k == "batch-output"]
    if outputs and not any(k == "batch" for k in kinds.values()):
        raise WorkloadError(str(outputs[0]), "a Batch API output file needs its input file too (pass both)")
    return kinds


def file_kinds(paths: list[Path], opts: LoadOptions) -> dict[Path, str]:
    """Each file's format (``--format`` or detected); Batch API output files are ``batch-output``."""
    with _Files(opts) as files:
        return _kinds(paths, opts, files)


def iter_file_items(
    path: Path, kind: str, options: LoadOptions, report: LoadReport, batch_outputs: Iterable[Path] = ()
) -> Iterator[WorkloadItem]:
    """One file's items in file order, for readers that take files in parallel (``specgauge.scale``):
    ``kind`` from ``file_kinds``; no segment rule, no duplicate-id check across files, no limit (the
    caller applies those in workload order). Bad records raise or, with ``skip_invalid``, go to
    ``report`` as ``iter_workload`` does."""
    outputs = list(batch_outputs)
    with _Files(options) as files:
        index = BatchOutputIndex([files[p] for p in outputs], options.max_line_bytes) if outputs and kind == "batch" else None
        try:
            yield from _iter_file([files[path]], kind, options, report, index)
        finally:
            if index is not None:
                index.close()


def iter_workload(
    paths: Iterable[str | Path], options: LoadOptions | None = None, report: LoadReport | None = None
) -> Iterator[WorkloadItem]:
    """Yield every request of the given files, in file order."""
    opts = options or LoadOptions()
    rep = report if report is not None else LoadReport()
    paths = [Path(p) for p in paths]
    with _Files(opts) as files:
        kinds = _kinds(paths, opts, files)
        outputs = [p for p, k in kinds.items() if k == "batch-output"]
        seg = segment_rule(opts.segment_by)
        index = BatchOutputIndex([files[p] for p in outputs], opts.max_line_bytes) if outputs else None
        joined = _joined_groups(paths, kinds)
        seen: dict[str, str] = {}
        try:
            for p in paths:
                kind = kinds[p]
                rep.formats[str(p)] = kind
                if kind == "batch-output" or (kind in joined and joined[kind][0] != p):
                    continue  # a Batch API output is read with its input; a joined format at its first file
                group = joined.get(kind, [p])
                for item in _iter_file([files[q] for q in group], kind, opts, rep, index):
                    if seg is not None:
                        item.request.segment = seg(item.request)
                    prev = seen.get(item.request.id)
                    if prev is not None:
                        err = WorkloadError(item.source, f"duplicate request id (first seen at {prev})", "id")
                        if not opts.skip_invalid:
                            raise err
                        rep.add_error(err)
                        continue
                    seen[item.request.id] = item.source
                    rep.items += 1
                    yield item
                    if opts.limit is not None and rep.items >= opts.limit:
                        return
                for q in group:
                    files.done(q)
        finally:
            if index is not None:
                index.close()
    if rep.items == 0:
        where = str(paths[0]) if len(paths) == 1 else ", ".join(map(str, paths))
        raise WorkloadError(where, "no valid requests" + (f" ({rep.skipped} skipped as invalid)" if rep.skipped else ""))


def _joined_groups(paths: list[Path], kinds: dict[Path, str]) -> dict[str, list[Path]]:
    """Per importer format whose files are read as one (OTLP: a call's span and log records may sit in
    different exports), its files in the order given."""
    return {k: [p for p in paths if kinds[p] == k] for k in importers.JOINED if k in kinds.values()}


def _iter_file(
    files: list[WorkloadFile], kind: str, opts: LoadOptions, rep: LoadReport, index: BatchOutputIndex | None
) -> Iterator[WorkloadItem]:
    """The items of ``files``: one file, or the files of a joined importer format read as one."""
    f = files[0]
    array = kind == "sharegpt" and first_record(f) == "array"
    if kind in importers.IMPORTERS:
        records: Iterator[tuple[str, Any]] = importers.records(kind, files)
    elif kind == "text":
        records = f.text_lines()
    elif array:
        records = f.array_items()
    else:
        records = f.json_lines()
    stem = f.path.name
    for where, rec in records:
        default_id = f"{stem}:{where.rsplit(':', 1)[-1].replace('item ', '')}"
        try:
            if isinstance(rec, WorkloadError):
                raise rec
            item = rec if isinstance(rec, WorkloadItem) else _convert(kind, rec, default_id, index)
        except F.FieldError as e:
            err = WorkloadError(where, e.message, e.field)
        except WorkloadError as e:
            err = e
        else:
            item.source = where
            yield item
            continue
        if not opts.skip_invalid:
            raise err
        rep.add_error(err)


def _convert(kind: str, rec: Any, default_id: str, index: BatchOutputIndex | None) -> WorkloadItem:
    if kind == "text":
        return F.from_text_line(rec, default_id)
    if kind == "openai":
        return F.from_openai_line(rec, default_id)
    if kind == "sharegpt":
        return F.from_sharegpt(rec, default_id)
    if kind == "vllm-custom":
        return F.from_vllm_custom(rec, default_id)
    if kind == "batch":
        out = None
        if index is not None and isinstance(rec, dict) and isinstance(rec.get("custom_id"), str):
            out = index.get(rec["custom_id"])
        return F.from_batch_input(rec, default_id, out)
    raise WorkloadError("--format", f"unknown format {kind!r}; known: {', '.join(FORMATS)}")


def load_workload(paths: Iterable[str | Path], options: LoadOptions | None = None) -> list[WorkloadItem]:
    """All items in memory (for small workloads and tests); prefer ``iter_workload`` for big logs."""
    return list(iter_workload(paths, options))
