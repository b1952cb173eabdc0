"""Batch API output files: each response found by its request's ``custom_id``.

The output file is read once, in one pass, into an index of where each line lies; a request of the
input file then reads its response's line alone (``os.pread``), so memory holds offsets, not responses.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from typing import Any, BinaryIO

import zstandard

from specgauge.workload.reader import DEFAULT_MAX_LINE_BYTES, WorkloadError, WorkloadFile, loads_bounded


class BatchOutputIndex:
    """custom_id -> where its line lies in a Batch API output file, built in one pass over it: in the
    file itself when it is plain, in a decompressed copy (an anonymous temp file, gone when closed)
    when it is compressed.

    As bounded as any read: a compressed output stops at its decompressed cap, every line at
    ``max_line_bytes``; the copies are dropped by ``close`` and when building the index fails."""

    def __init__(self, files: list[WorkloadFile], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        #: custom_id -> (the file holding its line, offset, length)
        self.offsets: dict[str, tuple[WorkloadFile | BinaryIO, int, int]] = {}
        self._spools: list[BinaryIO] = []
        try:
            for f in files:
                self._index(f)
        except BaseException:
            self.close()
            raise

    def _index(self, f: WorkloadFile) -> None:
        cap = self.max_line_bytes
        spool: BinaryIO | None = None
        if f.compression != "none":
            spool = tempfile.TemporaryFile(prefix="specgauge-batch-", suffix=".jsonl")  # noqa: SIM115 - closed by close()
            self._spools.append(spool)
        src = f.stream()
        n, pos = 0, 0
        try:
            while raw := src.readline(cap + 1):
                n += 1
                if len(raw) > cap and not raw.endswith(b"\n"):
                    raise WorkloadError(f"{f.name}:{n}", f"line longer than {cap} bytes (raise --max-line-bytes to accept it)")
                if spool is not None:
                    spool.write(raw)
                if raw.strip():
                    obj = loads_bounded(raw, f"{f.name}:{n}")  # bad or too deep JSON: its own error
                    try:
                        cid = obj["custom_id"]
                    except (KeyError, TypeError, IndexError):
                        raise WorkloadError(f"{f.name}:{n}", "batch output line without a readable custom_id") from None
                    self.offsets[str(cid)] = (spool if spool is not None else f, pos, len(raw))
                pos += len(raw)
        except (EOFError, OSError, zlib.error, zstandard.ZstdError) as e:
            raise WorkloadError(f.name, f"compressed stream is truncated or corrupt ({e})") from None
        if spool is not None:
            spool.flush()

    def get(self, cid: str) -> dict[str, Any] | None:
        hit = self.offsets.get(cid)
        if hit is None:
            return None
        holder, offset, size = hit
        return loads_bounded(os.pread(holder.fileno(), size, offset), cid)  # type: ignore[no-any-return]

    def close(self) -> None:
        for s in self._spools:
            s.close()
        self._spools.clear()
