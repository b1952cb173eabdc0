"""Streaming line reader for workload files: plain, gzip or zstd, detected by magic bytes.

Yields ``(line_number, text)`` one line at a time and never holds more than one line (capped by
``max_line_bytes``) in memory, so a multi-GB log streams in constant memory. Every problem is a
``WorkloadError`` naming ``FILE:LINE``.

Bounds (docs/reliability.md): a line at most ``max_line_bytes`` (16 MiB); JSON nested at
most ``MAX_JSON_DEPTH`` (256) levels, in a JSON line and in a JSON array file alike (checked while
parsing, so a file of ``[[[[...`` costs bounded memory and time); a compressed file decompresses to
at most ``max_decompressed_bytes`` (default: ``DECOMPRESSED_RATIO`` x its size on disk, at least
``MIN_DECOMPRESSED_BYTES``); only regular files are read (a FIFO, a device or a socket is refused:
``/dev/zero`` never ends, a FIFO cannot be opened twice for detection and reading).
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from specgauge.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
#: deepest nesting of arrays / objects accepted in one JSON record (vLLM's own parser stops near 200-1000)
MAX_JSON_DEPTH = 256
#: a compressed workload may decompress to this many times its size on disk (gzip's own maximum is ~1032)
DECOMPRESSED_RATIO = 100
MIN_DECOMPRESSED_BYTES = 256 * 1024 * 1024


class WorkloadError(UserError, ValueError):
    """A problem in a workload file, rendered as ``FILE:LINE: field: what is wrong``."""

    def __init__(self, source: str, message: str, field: str | None = None) -> None:
        self.source, self.field, self.message = source, field, message
        super().__init__(f"{source}: {field}: {message}" if field else f"{source}: {message}")

    def localised(self, tr: Callable[[str], str]) -> str:
        """The same line with its message passed through ``tr`` (the catalogue's ``translate``)."""
        return f"{self.source}: {self.field}: {tr(self.message)}" if self.field else f"{self.source}: {tr(self.message)}"


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def check_file(path: Path) -> os.stat_result:
    """The file's ``stat`` (links followed); a WorkloadError for anything but a readable regular file."""
    try:
        st = os.stat(path)
    except OSError as e:
        why = {errno.ENOENT: "no such file", errno.ELOOP: "a symbolic link loop (the link never reaches a file)",
               errno.EACCES: "permission denied", errno.ENOTDIR: "no such file (a part of the path is not a directory)",
               errno.ENAMETOOLONG: "file name too long"}.get(e.errno or 0, e.strerror or str(e))
        raise WorkloadError(str(path), why) from None
    if stat.S_ISDIR(st.st_mode):
        raise WorkloadError(str(path), "is a directory, not a workload file")
    for test, what in _KINDS:
        if test(st.st_mode):
            raise WorkloadError(str(path), f"is {what}, not a regular file (save the workload to a file first)")
    if not os.access(path, os.R_OK):
        raise WorkloadError(str(path), "permission denied")
    return st


def compression_of(path: Path) -> str:
    check_file(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


def decompressed_cap(path: Path, max_decompressed_bytes: int | None = None) -> int:
    """The decompressed size a compressed ``path`` may reach (the default grows with the file's size)."""
    if max_decompressed_bytes is not None:
        return max_decompressed_bytes
    return max(MIN_DECOMPRESSED_BYTES, DECOMPRESSED_RATIO * check_file(path).st_size)


class _Capped(io.RawIOBase):
    """A decompressed stream that stops with a WorkloadError past ``cap`` bytes (a compression bomb)."""

    def __init__(self, inner: BinaryIO, name: str, cap: int) -> None:
        self._inner, self._name, self._cap, self._n = inner, name, cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._inner.read(min(len(b), self._cap + 1 - self._n) or 1)
        self._n += len(data)
        if self._n > self._cap:
            raise WorkloadError(self._name, f"decompresses to more than {self._cap} bytes ({DECOMPRESSED_RATIO}x its size on "
                                            "disk, or the max_decompressed_bytes given): a compression bomb? Raise "
                                            "max_decompressed_bytes (LoadOptions) to accept it")
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def open_binary(path: Path, max_decompressed_bytes: int | None = None) -> BinaryIO:
    """Open a workload file for streaming reads, decompressing gzip / zstd transparently (capped)."""
    kind = compression_of(path)
    if kind == "none":
        return open(path, "rb")
    cap = decompressed_cap(path, max_decompressed_bytes)
    if kind == "gzip":
        inner: BinaryIO = gzip.open(path, "rb")  # type: ignore[assignment]
    else:
        inner = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)  # type: ignore[assignment]
    return io.BufferedReader(_Capped(inner, str(path), cap), 1 << 16)  # type: ignore[return-value]


def iter_lines(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               max_decompressed_bytes: int | None = None) -> Iterator[tuple[int, str | WorkloadError]]:
    """Yield ``(line_number, line)`` (1-based, without the newline), decoding UTF-8 strictly.

    A line that cannot be read (longer than ``max_line_bytes``, non-UTF-8, NUL bytes) is yielded as a
    ``WorkloadError`` in place of its text, so the caller decides whether to stop or skip it. A
    truncated or corrupt compressed stream, or one past its decompressed cap, raises ``WorkloadError``
    (nothing after it can be read).
    """
    name = str(path)
    with open_binary(path, max_decompressed_bytes) as f:
        n = 0
        while True:
            try:
                raw = f.readline(max_line_bytes + 1)
            except (EOFError, zlib.error, gzip.BadGzipFile, zstandard.ZstdError, OSError) as e:
                raise WorkloadError(f"{name}:{n + 1}", f"compressed stream is truncated or corrupt ({e})") from None
            if not raw:
                return
            n += 1
            where = f"{name}:{n}"
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                _skip_rest_of_line(f)
                yield n, WorkloadError(where, f"line longer than {max_line_bytes} bytes (raise --max-line-bytes to accept it)")
                continue
            if b"\x00" in raw:
                yield n, WorkloadError(where, "binary data (NUL bytes), not a text workload line")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield n, WorkloadError(where, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})")
                continue
            yield n, text.rstrip("\r\n")


def _skip_rest_of_line(f: BinaryIO) -> None:
    while True:
        try:
            chunk = f.readline(1 << 20)
        except (EOFError, zlib.error, zstandard.ZstdError, OSError):
            return
        if not chunk or chunk.endswith(b"\n"):
            return


# ---------------------------------------------------------------- bounded JSON


def _too_deep(where: str) -> WorkloadError:
    return WorkloadError(where, f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels")


def _depth(obj: Any) -> int:
    """Nesting depth of a parsed value (iterative: a deep value cannot overflow the stack here)."""
    deepest, todo = 0, [(obj, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            v = v.values()
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if d > MAX_JSON_DEPTH:
            break
        todo.extend((x, d + 1) for x in v if isinstance(x, (dict, list)))
    return deepest


def loads_bounded(text: str | bytes, where: str) -> Any:
    """``json.loads`` with the nesting bound; a WorkloadError naming ``where`` for bad or too deep JSON."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkloadError(where, f"invalid JSON: {e.msg} at column {e.colno}") from None
    except RecursionError:  # the C parser stops near the interpreter's recursion limit
        raise _too_deep(where) from None
    except UnicodeDecodeError as e:
        raise WorkloadError(where, f"not valid UTF-8 ({e.reason})") from None
    # depth <= number of openers: count them (C speed) before walking anything
    opens = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    if opens > MAX_JSON_DEPTH and _depth(obj) > MAX_JSON_DEPTH:
        raise _too_deep(where)
    return obj


def iter_json_array(f: BinaryIO, where: str) -> Iterator[tuple[int, Any]]:
    """``(index, item)`` of the top-level JSON array in ``f`` (1-based), streamed with ijson's event
    parser and the nesting bound enforced on the events (ijson's own item builder keeps a prefix
    string per level: memory grows with the square of the depth). Errors are WorkloadErrors naming
    ``where:item N``."""
    import ijson

    depth, i = 0, 0
    builder: Any = None
    try:
        for event, value in ijson.basic_parse(f, use_float=True):
            if event in ("start_map", "start_array"):
                depth += 1
                if depth > MAX_JSON_DEPTH + 1:  # the array itself is one level
                    raise _too_deep(f"{where}:item {i + 1}")
                if depth == 1:
                    if event != "start_array":
                        raise WorkloadError(where, "expected a JSON array of records")
                    continue
            elif event in ("end_map", "end_array"):
                depth -= 1
                if depth == 0:
                    continue
            elif depth == 0:
                raise WorkloadError(where, "expected a JSON array of records")
            if builder is None:
                builder = ijson.ObjectBuilder()
            builder.event(event, value)
            if depth == 1:  # an item is complete: a scalar, or a container closed back to the array's level
                i += 1
                yield i, builder.value
                builder = None
    except WorkloadError:
        raise
    except (ijson.JSONError, ValueError, EOFError, OSError, zlib.error, zstandard.ZstdError) as e:
        raise WorkloadError(f"{where}:item {i + 1}", f"invalid JSON array: {e}") from None
