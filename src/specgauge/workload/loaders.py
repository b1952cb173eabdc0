"""Workload loading: format detection, streaming iteration, Batch API joins, segments, bad input.

``iter_workload(paths, options)`` yields ``WorkloadItem``s one at a time (files are streamed, never
loaded whole). Every malformed record raises ``WorkloadError("FILE:LINE", field, message)``; with
``skip_invalid`` it is counted in the ``LoadReport`` instead and loading continues.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import zstandard
from pydantic import BaseModel, Field

from specgauge.workload import formats as F
from specgauge.workload import importers
from specgauge.workload.reader import (
    DEFAULT_MAX_LINE_BYTES,
    WorkloadError,
    compression_of,
    iter_json_array,
    iter_lines,
    loads_bounded,
    open_binary,
)
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


# ---------------------------------------------------------------- detection


def _first_record(path: Path, max_line_bytes: int, max_decompressed_bytes: int | None = None) -> tuple[str, Any]:
    """('empty'|'array'|'json'|'text'|'badjson', first parsed object or text)."""
    first_error: WorkloadError | None = None
    for _, line in iter_lines(path, max_line_bytes, max_decompressed_bytes):
        if isinstance(line, WorkloadError):  # unreadable line: detect from the next one
            first_error = first_error or line
            continue
        s = line.strip()
        if not s:
            continue
        if s.startswith("["):
            return "array", None
        if s.startswith("{"):
            try:
                return "json", loads_bounded(s, str(path))
            except WorkloadError:  # reported, with its line, when the file is read
                return "badjson", None
        return "text", s
    if first_error is not None:
        raise first_error
    return "empty", None


def detect_format(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_decompressed_bytes: int | None = None) -> str:
    """Guess a file's format from its first record. Returns a FORMATS name or 'batch-output'."""
    imported = importers.sniff(path, max_line_bytes, max_decompressed_bytes)
    if imported is not None:
        return imported
    kind, obj = _first_record(path, max_line_bytes, max_decompressed_bytes)
    if kind == "empty":
        raise WorkloadError(str(path), "empty workload (no requests)")
    if kind == "array":
        return "sharegpt"
    if kind == "text":
        return "text"
    if kind == "badjson" or not isinstance(obj, dict):
        return "openai"  # JSON lines; the bad line is reported when read
    if "custom_id" in obj:
        return "batch" if "body" in obj else "batch-output"
    if "conversations" in obj or "conversation" in obj:
        return "sharegpt"
    if "prompt" in obj and "output_tokens" in obj and "messages" not in obj:
        return "vllm-custom"
    return "openai"


# ---------------------------------------------------------------- records


def _json_records(path: Path, opts: LoadOptions) -> Iterator[tuple[str, Any | WorkloadError]]:
    """(``FILE:LINE``, parsed JSON value or the error) per non-blank line."""
    for n, line in iter_lines(path, opts.max_line_bytes, opts.max_decompressed_bytes):
        where = f"{path}:{n}"
        if isinstance(line, WorkloadError):
            yield where, line
            continue
        if not line.strip():
            continue
        try:
            yield where, loads_bounded(line, where)
        except WorkloadError as e:
            yield where, e


def _array_records(path: Path, opts: LoadOptions) -> Iterator[tuple[str, Any | WorkloadError]]:
    """Items of a top-level JSON array (ShareGPT files), streamed (bounded nesting, see ``reader``)."""
    with open_binary(path, opts.max_decompressed_bytes) as f:
        try:
            for i, obj in iter_json_array(f, str(path)):
                yield f"{path}:item {i}", obj
        except WorkloadError as e:  # nothing after a broken array can be read
            yield e.source, e


def _text_records(path: Path, opts: LoadOptions) -> Iterator[tuple[str, Any | WorkloadError]]:
    for n, line in iter_lines(path, opts.max_line_bytes, opts.max_decompressed_bytes):
        if isinstance(line, WorkloadError) or line.strip():
            yield f"{path}:{n}", line


# ---------------------------------------------------------------- batch join


class _BatchOutputIndex:
    """custom_id -> byte offset of its line in a (decompressed, spooled) Batch API output file.

    The spool is as bounded as any read: a compressed output stops at its decompressed cap, every line
    at ``max_line_bytes``; the temp files are removed by ``close`` and when building the index fails."""

    def __init__(self, paths: list[Path], opts: LoadOptions | None = None) -> None:
        self.opts = opts or LoadOptions()
        self.offsets: dict[str, tuple[Path, int]] = {}
        self._tmp: list[Path] = []
        try:
            for p in paths:
                self._index(p)
        except BaseException:
            self.close()
            raise

    def _index(self, p: Path) -> None:
        cap = self.opts.max_line_bytes
        plain = self._plain(p)
        with open(plain, "rb") as f:
            n, pos = 0, 0
            while raw := f.readline(cap + 1):
                n += 1
                if len(raw) > cap and not raw.endswith(b"\n"):
                    raise WorkloadError(f"{p}:{n}", f"line longer than {cap} bytes (raise --max-line-bytes to accept it)")
                if raw.strip():
                    obj = loads_bounded(raw, f"{p}:{n}")  # bad or too deep JSON: its own error
                    try:
                        cid = obj["custom_id"]
                    except (KeyError, TypeError, IndexError):
                        raise WorkloadError(f"{p}:{n}", "batch output line without a readable custom_id") from None
                    self.offsets[str(cid)] = (plain, pos)
                pos += len(raw)

    def _plain(self, p: Path) -> Path:
        if compression_of(p) == "none":  # a plain file: read in place
            return p
        with open_binary(p, self.opts.max_decompressed_bytes) as src:
            fd, name = tempfile.mkstemp(suffix=".jsonl", prefix="specgauge-batch-")
            self._tmp.append(Path(name))
            try:
                with open(fd, "wb") as out:
                    shutil.copyfileobj(src, out)
            except (EOFError, OSError, zlib.error, zstandard.ZstdError) as e:
                if isinstance(e, WorkloadError):
                    raise
                raise WorkloadError(str(p), f"compressed stream is truncated or corrupt ({e})") from None
            return Path(name)

    def get(self, cid: str) -> dict[str, Any] | None:
        hit = self.offsets.get(cid)
        if hit is None:
            return None
        with open(hit[0], "rb") as f:
            f.seek(hit[1])
            return loads_bounded(f.readline(self.opts.max_line_bytes + 1), cid)  # type: ignore[no-any-return]

    def close(self) -> None:
        for t in self._tmp:
            t.unlink(missing_ok=True)
        self._tmp.clear()


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


def file_kinds(paths: list[Path], opts: LoadOptions) -> dict[Path, str]:
    """Each file's format (``--format`` or detected); Batch API output files are ``batch-output``."""
    if not paths:
        raise WorkloadError("workload", "no workload files given")
    mx = opts.max_decompressed_bytes
    kinds = {p: (opts.format or detect_format(p, opts.max_line_bytes, mx)) for p in paths}
    if opts.format == "batch":  # an explicit 'batch' covers output files given alongside
        kinds = {p: (detect_format(p, opts.max_line_bytes, mx) if k == "batch" else k) for p, k in kinds.items()}
        kinds = {p: ("batch" if k not in ("batch", "batch-output") else k) for p, k in kinds.items()}
    outputs = [p for p, k in kinds.items() if k == "batch-output"]
    if outputs and not any(k == "batch" for k in kinds.values()):
        raise WorkloadError(str(outputs[0]), "a Batch API output file needs its input file too (pass both)")
    return kinds


def iter_file_items(
    path: Path, kind: str, options: LoadOptions, report: LoadReport, batch_outputs: Iterable[Path] = ()
) -> Iterator[WorkloadItem]:
    """One file's items in file order, for readers that take files in parallel (``specgauge.scale``):
    ``kind`` from ``file_kinds``; no segment rule, no duplicate-id check across files, no limit (the
    caller applies those in workload order). Bad records raise or, with ``skip_invalid``, go to
    ``report`` as ``iter_workload`` does."""
    outputs = list(batch_outputs)
    index = _BatchOutputIndex(outputs, options) if outputs and kind == "batch" else None
    try:
        yield from _iter_file([path], kind, options, report, index)
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
    kinds = file_kinds(paths, opts)
    outputs = [p for p, k in kinds.items() if k == "batch-output"]
    seg = segment_rule(opts.segment_by)
    index = _BatchOutputIndex(outputs, opts) if outputs else None
    joined = _joined_groups(paths, kinds)
    seen: dict[str, str] = {}
    try:
        for p in paths:
            kind = kinds[p]
            rep.formats[str(p)] = kind
            if kind == "batch-output" or (kind in joined and joined[kind][0] != p):
                continue  # a Batch API output is read with its input; a joined format at its first file
            for item in _iter_file(joined.get(kind, [p]), kind, opts, rep, index):
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
    paths: list[Path], kind: str, opts: LoadOptions, rep: LoadReport, index: _BatchOutputIndex | None
) -> Iterator[WorkloadItem]:
    """The items of ``paths``: one file, or the files of a joined importer format read as one."""
    path = paths[0]
    if kind in importers.IMPORTERS:
        records: Iterator[tuple[str, Any]] = importers.records(kind, paths, opts.max_line_bytes, opts.max_decompressed_bytes)
    elif kind == "text":
        records = _text_records(path, opts)
    elif kind == "sharegpt" and _first_record(path, opts.max_line_bytes, opts.max_decompressed_bytes)[0] == "array":
        records = _array_records(path, opts)
    else:
        records = _json_records(path, opts)
    stem = path.name
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


def _convert(kind: str, rec: Any, default_id: str, index: _BatchOutputIndex | None) -> WorkloadItem:
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
