"""A workload file, opened once: plain, gzip or zstd (by its magic bytes), read as lines or JSON.

``WorkloadFile(path)`` is the one open of a file. Format detection looks at its head and parsing then
reads it from the start through the same handle (``stream()`` rewinds; what the look read is replayed
from memory). Lines are yielded one at a time and never more than one (capped by ``max_line_bytes``)
is held, so a multi-GB log streams in constant memory. Every problem is a ``WorkloadError`` naming
``FILE:LINE``.

Bounds (docs/reliability.md): a line at most ``max_line_bytes`` (16 MiB); JSON nested at
most ``MAX_JSON_DEPTH`` (256) levels, in a JSON line and in a JSON array file alike (checked while
parsing, so a file of ``[[[[...`` costs bounded memory and time); a compressed file decompresses to
at most ``max_decompressed_bytes`` (default: ``DECOMPRESSED_RATIO`` x its size on disk, at least
``MIN_DECOMPRESSED_BYTES``); only regular files are read (a FIFO, a device or a socket is refused:
``/dev/zero`` never ends, a FIFO cannot be rewound for a second look).
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
from dataclasses import dataclass
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
#: bytes of a file's start kept in memory, so a look at its head costs no second read
PEEK_BYTES = 1 << 20


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


def _cap(size: int, max_decompressed_bytes: int | None) -> int:
    return max_decompressed_bytes if max_decompressed_bytes is not None else max(MIN_DECOMPRESSED_BYTES, DECOMPRESSED_RATIO * size)


def decompressed_cap(path: Path, max_decompressed_bytes: int | None = None) -> int:
    """The decompressed size a compressed ``path`` may reach (the default grows with the file's size)."""
    if max_decompressed_bytes is not None:
        return max_decompressed_bytes
    return _cap(check_file(path).st_size, None)


# ---------------------------------------------------------------- one file, opened once


class WorkloadFile:
    """A workload file opened once, for format detection and parsing alike (``with WorkloadFile(p) as f``).

    ``stream()`` gives its bytes (decompressed) from the start, rewinding: the bytes read since the
    start are kept while they stay under ``PEEK_BYTES``, so what a look at the head read is replayed
    from memory, not read or decompressed again; a rewind from further on seeks the file back to 0 and
    decompresses anew (a format read in two passes does that once). One stream at a time: a stream
    taken before a rewind raises if read. ``head`` and ``top_keys()`` are the first looks, taken once.
    """

    def __init__(self, path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 max_decompressed_bytes: int | None = None) -> None:
        self.path, self.name, self.max_line_bytes = Path(path), str(path), max_line_bytes
        size = check_file(self.path).st_size
        self._fh: io.FileIO | None = None
        magic = self._file().read(4)
        self.compression = "gzip" if magic.startswith(GZIP_MAGIC) else "zstd" if magic.startswith(ZSTD_MAGIC) else "none"
        #: decompressed bytes allowed (None: a plain file)
        self.cap = None if self.compression == "none" else _cap(size, max_decompressed_bytes)
        self._inner: Any = None  # where the bytes come from: the file itself, or its decompressor
        self._pos = 0  # bytes taken from _inner so far (= where _inner stands in the decompressed bytes)
        self._at = 0  # where the current stream stands: _at < _pos while it replays _kept
        self._kept: bytearray | None = None  # bytes [0, _pos) while _pos <= PEEK_BYTES, else None
        self._gen = 0  # the current stream's number
        self._head: Head | None = None
        self._keys: dict[str, Any] | None = None

    def _file(self) -> io.FileIO:
        if self._fh is None:
            self._fh = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed by close() / park()
        return self._fh

    def stream(self) -> BinaryIO:
        """The file's bytes from the start (gzip / zstd decompressed, under ``cap``)."""
        self._gen += 1
        if self._kept is not None and self._inner is not None:
            self._at = 0  # replay the kept bytes, then read on
        else:
            self._restart()
        return io.BufferedReader(_Stream(self, self._gen), 1 << 16)  # type: ignore[return-value]

    def _restart(self) -> None:
        fh = self._file()
        self._close_inner()
        fh.seek(0)
        if self.compression == "gzip":
            self._inner = gzip.GzipFile(fileobj=fh, mode="rb")
        elif self.compression == "zstd":
            self._inner = zstandard.ZstdDecompressor().stream_reader(fh, closefd=False)
        else:
            self._inner = fh
        self._pos = self._at = 0
        self._kept = bytearray()

    def _readinto(self, gen: int, b: memoryview) -> int:
        if gen != self._gen:
            raise RuntimeError(f"{self.name}: a stream read after the file was rewound")
        if self._at < self._pos:  # replaying: [_at, _pos) is in _kept
            assert self._kept is not None
            n = min(len(b), self._pos - self._at)
            b[:n] = self._kept[self._at:self._at + n]
            self._at += n
            return n
        want = len(b) if self.cap is None else max(1, min(len(b), self.cap + 1 - self._pos))
        data = self._inner.read(want)
        self._pos += len(data)
        self._at = self._pos
        if self.cap is not None and self._pos > self.cap:
            raise WorkloadError(self.name, f"decompresses to more than {self.cap} bytes ({DECOMPRESSED_RATIO}x its size on "
                                           "disk, or the max_decompressed_bytes given): a compression bomb? Raise "
                                           "max_decompressed_bytes (LoadOptions) to accept it")
        b[: len(data)] = data
        if self._kept is not None:
            if self._pos <= PEEK_BYTES:
                self._kept += data
            else:
                self._kept = None  # past the head: a rewind from here reads the file again
        return len(data)

    def lines(self) -> Iterator[tuple[int, str | WorkloadError]]:
        """``(line_number, line)`` from the start (see ``iter_lines``)."""
        return iter_lines(self.stream(), self.name, self.max_line_bytes)

    def text_lines(self) -> Iterator[tuple[str, str | WorkloadError]]:
        """(``FILE:LINE``, text or the error) per non-blank or unreadable line."""
        for n, line in self.lines():
            if isinstance(line, WorkloadError) or line.strip():
                yield f"{self.name}:{n}", line

    def json_lines(self) -> Iterator[tuple[str, Any]]:
        """(``FILE:LINE``, parsed JSON value or the error) per non-blank line."""
        for n, line in self.lines():
            where = f"{self.name}:{n}"
            if isinstance(line, WorkloadError):
                yield where, line
            elif line.strip():
                try:
                    yield where, loads_bounded(line, where)
                except WorkloadError as e:
                    yield where, e

    def array_items(self) -> Iterator[tuple[str, Any]]:
        """(``FILE:item N``, value or the error) per item of the top-level JSON array the file holds,
        streamed (bounded nesting); nothing after a broken array can be read."""
        try:
            for i, obj in iter_json_array(self.stream(), self.name):
                yield f"{self.name}:item {i}", obj
        except WorkloadError as e:
            yield e.source, e

    @property
    def head(self) -> Head:
        """The first look: the first non-blank line, read once."""
        if self._head is None:
            self._head = Head.read(self.lines(), self.name)
        return self._head

    def top_keys(self, limit: int = 20000) -> dict[str, Any]:
        """Top-level keys of a pretty-printed JSON object (scalar values kept), read until ``limit``
        events, once; {} where the file holds no object."""
        if self._keys is None:
            self._keys = _top_keys(self.stream(), limit)
        return self._keys

    def fileno(self) -> int:
        """The open file's descriptor (for ``os.pread`` on a plain file)."""
        return self._file().fileno()

    def park(self) -> None:
        """Close the descriptor (many files given at once); what was looked at is kept, and the next
        ``stream()`` opens the file again."""
        self._close_inner()
        self._inner, self._kept = None, None
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        """Close the file (as ``park``: a later ``stream()`` would open it again)."""
        self.park()

    def _close_inner(self) -> None:
        if self._inner is not None and self._inner is not self._fh:
            self._inner.close()  # a decompressor over the file: the file stays open

    def __enter__(self) -> WorkloadFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stream(io.RawIOBase):
    """One pass over a ``WorkloadFile``'s bytes (buffered by ``stream()``)."""

    def __init__(self, owner: WorkloadFile, gen: int) -> None:
        self._owner, self._gen = owner, gen

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        return self._owner._readinto(self._gen, memoryview(b).cast("B"))


def iter_lines(f: BinaryIO, name: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[int, str | WorkloadError]]:
    """Yield ``(line_number, line)`` of stream ``f`` (1-based, without the newline), decoding UTF-8 strictly.

    A line that cannot be read (longer than ``max_line_bytes``, non-UTF-8, NUL bytes) is yielded as a
    ``WorkloadError`` in place of its text, so the caller decides whether to stop or skip it. A
    truncated or corrupt compressed stream, or one past its decompressed cap, raises ``WorkloadError``
    (nothing after it can be read).
    """
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


NOT_JSON: Any = object()  #: ``Head.value`` of a first line that is not one JSON value


@dataclass(frozen=True)
class Head:
    """A file's first non-blank readable line (stripped), that line parsed as JSON (``NOT_JSON`` when it
    is not one value), the first unreadable line met before it, and the fault that ended the look
    when the stream broke before it (truncated, corrupt, past its cap)."""

    first: str | None = None
    value: Any = NOT_JSON
    unreadable: WorkloadError | None = None
    broken: WorkloadError | None = None

    @classmethod
    def read(cls, lines: Iterator[tuple[int, str | WorkloadError]], name: str) -> Head:
        unreadable = None
        try:
            for _, line in lines:
                if isinstance(line, WorkloadError):
                    unreadable = unreadable or line
                    continue
                s = line.strip()
                if s:
                    try:
                        return cls(s, loads_bounded(s, name), unreadable)
                    except WorkloadError:
                        return cls(s, NOT_JSON, unreadable)
        except WorkloadError as e:
            return cls(None, NOT_JSON, unreadable, e)
        return cls(None, NOT_JSON, unreadable)

    def layout(self) -> tuple[str, Any]:
        """How the file's JSON documents lie: ('lines', first document) when the first non-blank line is a
        whole JSON value, ('array' | 'object', None) for a pretty-printed document, ('text', first line)
        otherwise, ('empty', None). An unreadable line before it is raised, as is a broken stream."""
        if self.unreadable is not None:
            raise self.unreadable
        if self.broken is not None:
            raise self.broken
        if self.first is None:
            return "empty", None
        if self.value is not NOT_JSON:
            return "lines", self.value
        if self.first[0] in "[{":
            return ("array" if self.first[0] == "[" else "object"), None
        return "text", self.first


def _top_keys(f: BinaryIO, limit: int) -> dict[str, Any]:
    import ijson

    keys: dict[str, Any] = {}
    depth, key = 0, None
    try:
        for n, (event, value) in enumerate(ijson.basic_parse(f, use_float=True)):
            if n > limit:
                break
            if event in ("start_map", "start_array"):
                depth += 1
            elif event in ("end_map", "end_array"):
                depth -= 1
            elif depth == 1 and event == "map_key":
                key = value
                keys[key] = None
            elif depth == 1 and key is not None:
                keys[key] = value
    except (ijson.JSONError, ValueError, EOFError, OSError, WorkloadError):
        pass
    return keys


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
