"""Streaming line reader for workload files: plain, gzip or zstd, detected by magic bytes.

Yields ``(line_number, text)`` one line at a time and never holds more than one line (capped by
``max_line_bytes``) in memory, so a multi-GB log streams in constant memory. Every problem is a
``WorkloadError`` naming ``FILE:LINE``.
"""

from __future__ import annotations

from specgauge.errors import UserError

import gzip
import io
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024


class WorkloadError(UserError, ValueError):
    """A problem in a workload file, rendered as ``FILE:LINE: field: what is wrong``."""

    def __init__(self, source: str, message: str, field: str | None = None) -> None:
        self.source, self.field, self.message = source, field, message
        super().__init__(f"{source}: {field}: {message}" if field else f"{source}: {message}")


def compression_of(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


def open_binary(path: Path) -> BinaryIO:
    """Open a workload file for streaming reads, decompressing gzip / zstd transparently."""
    if not path.exists():
        raise WorkloadError(str(path), "no such file")
    if path.is_dir():
        raise WorkloadError(str(path), "is a directory, not a workload file")
    kind = compression_of(path)
    if kind == "gzip":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        raw = open(path, "rb")
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True))  # type: ignore[arg-type]
    return open(path, "rb")


def iter_lines(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[int, str | WorkloadError]]:
    """Yield ``(line_number, line)`` (1-based, without the newline), decoding UTF-8 strictly.

    A line that cannot be read (longer than ``max_line_bytes``, non-UTF-8, NUL bytes) is yielded as a
    ``WorkloadError`` in place of its text, so the caller decides whether to stop or skip it. A
    truncated or corrupt compressed stream raises ``WorkloadError`` (nothing after it can be read).
    """
    name = str(path)
    with open_binary(path) as f:
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
