"""Hostile workload files (issue 26, items 1, 4 and 8): deep nesting, compression bombs in Batch API
output files, over-long output lines, FIFOs, devices and symlink loops. Each gives one WorkloadError
naming the file, in bounded memory and time. The issue's reproductions run in a subprocess under
RLIMIT_AS (and a wall-clock timeout), so a regression fails the test instead of taking the machine."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgauge.workload.loaders import LoadOptions, load_workload
from specgauge.workload.reader import MAX_JSON_DEPTH, WorkloadError, decompressed_cap, loads_bounded

ROOT = Path(__file__).resolve().parents[2]
AS_LIMIT = 3 << 30  # bytes of address space for a subprocess (torch-free imports need < 1 GiB)


def bounded_run(code: str, cwd: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run python ``code`` in ``cwd`` with RLIMIT_AS and a timeout: a memory blow-up is a MemoryError there."""
    pre = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({AS_LIMIT}, {AS_LIMIT}))\n"
    return subprocess.run([sys.executable, "-c", pre + textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def chat(i: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 4}


# ---------------------------------------------------------------- 1. nesting


@pytest.mark.parametrize("name,text", [
    ("na.json", "[" * 100_000 + "]" * 100_000),  # the issue's file: ~20 GB before the fix
    ("nb.jsonl", '{"messages":' + "[" * 100_000 + "]" * 100_000 + "}\n"),  # a RecursionError traceback before
    ("nc.jsonl", json.dumps(chat(0)) + "\n" + '{"messages":' + "[" * 5000 + "]" * 5000 + "}\n"),
])
def test_deep_nesting_is_one_line_in_bounded_memory(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    r = bounded_run(f"""
        from specgauge.workload.loaders import load_workload
        from specgauge.workload.reader import WorkloadError
        try:
            load_workload([{name!r}])
        except WorkloadError as e:
            print("ERR", e)
        """, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"ERR {name}:") and f"nested deeper than {MAX_JSON_DEPTH} levels" in r.stdout, r.stdout
    assert len(r.stdout.strip().splitlines()) == 1


def test_profile_cli_on_the_issue_file(tmp_path: Path) -> None:
    """``specgauge profile na.json``: exit 2 and one line naming the file (RLIMIT_AS on the CLI process)."""
    (tmp_path / "na.json").write_text("[" * 100_000 + "]" * 100_000)
    r = bounded_run("""
        import sys
        from specgauge.cli import main
        sys.argv = ["specgauge", "profile", "na.json"]
        main()
        """, tmp_path, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "na.json:item 1" in r.stderr and "nested deeper" in r.stderr, r.stderr


def nested(depth: int, leaf: object, kind: str) -> object:
    v = leaf
    for _ in range(depth):
        v = [v] if kind == "list" else {"k": v}
    return v


SENTINEL = "@@DEEP@@"


def nested_text(depth: int, kind: str) -> str:
    """JSON text of ``depth`` levels around "x" (json.dumps cannot write what is deeper than ~1000)."""
    return ("[" * depth + '"x"' + "]" * depth) if kind == "list" else ('{"k":' * depth + '"x"' + "}" * depth)


FILE_KINDS = ("jsonl", "jsonl.gz", "jsonl.zst", "array", "array.gz", "batch-output.gz")


def write_kind(d: Path, kind: str, rows: list[object], deep: str = "") -> list[Path]:
    """``rows`` (JSON values) as a file of ``kind`` with ``deep`` in place of the SENTINEL string; the
    paths to load (a batch input goes with its output)."""
    if kind.startswith("array"):
        raw = json.dumps(rows).encode()
    else:
        raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
    if kind.startswith("batch-output"):
        inp = d / "in.jsonl"
        inp.write_text("".join(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                                           "body": chat(i)}) + "\n" for i in range(len(rows))))
        raw = "".join(json.dumps({"custom_id": f"c{i}", "response": {"status_code": 200, "body": r}}) + "\n"
                      for i, r in enumerate(rows)).encode()
    raw = raw.replace(json.dumps(SENTINEL).encode(), deep.encode())
    if kind.endswith(".gz"):
        raw = gzip.compress(raw, compresslevel=1)
    elif kind.endswith(".zst"):
        raw = zstandard.ZstdCompressor().compress(raw)
    p = d / f"w.{kind}"
    p.write_bytes(raw)
    return [d / "in.jsonl", p] if kind.startswith("batch-output") else [p]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(FILE_KINDS), depth=st.integers(0, 3 * MAX_JSON_DEPTH) | st.integers(1100, 4000),
       shape=st.sampled_from(["list", "dict"]), where=st.integers(0, 2))
def test_nesting_fuzz_over_file_kinds(kind: str, depth: int, shape: str, where: int) -> None:
    """Any nesting depth in any file kind: it loads (depth within the bound) or is one WorkloadError
    naming the file that says the bound; never a RecursionError or another exception."""
    with tempfile.TemporaryDirectory() as td:
        d = Path(td)
        row = (lambda i: {"id": f"s{i}", "conversations": [{"from": "human", "value": f"hi {i}"}]}) if kind.startswith("array") else chat
        rows: list[object] = [row(i) for i in range(3)]
        deep = SENTINEL
        rows[where] = {**row(where), "metadata": {"deep": deep}}  # type: ignore[dict-item]
        if kind.startswith("batch-output"):
            rows = [{"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "ok"}}]}] * 3
            rows[where] = {**rows[where], "extra": deep}  # type: ignore[dict-item]
        paths = write_kind(d, kind, rows, nested_text(depth, shape))
        total = depth + 3 + (kind.startswith("batch-output"))  # levels above the leaf in the record as parsed
        try:
            items = load_workload(paths)
        except WorkloadError as e:
            assert str(e).startswith(str(paths[-1])), str(e)
            assert "nested deeper" in str(e), str(e)
            assert total > MAX_JSON_DEPTH - 2, (total, str(e))
            return
        assert len(items) == 3
        assert total <= MAX_JSON_DEPTH + 2, total


def test_loads_bounded_edges() -> None:
    ok = json.dumps(nested(MAX_JSON_DEPTH - 1, 1, "list"))
    assert loads_bounded(ok, "w") is not None
    with pytest.raises(WorkloadError, match="nested deeper"):
        loads_bounded(json.dumps(nested(MAX_JSON_DEPTH + 1, 1, "dict")), "w")
    with pytest.raises(WorkloadError, match="nested deeper"):
        loads_bounded("[" * 50_000 + "]" * 50_000, "w")
    # many brackets inside strings are not nesting
    assert loads_bounded(json.dumps({"s": "[" * 10_000}), "w") == {"s": "[" * 10_000}


# ---------------------------------------------------------------- 4. Batch API output files


def batch_pair(d: Path, out_raw: bytes, n: int = 1) -> list[Path]:
    inp = d / "in.jsonl"
    inp.write_text("".join(json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                                       "body": chat(i)}) + "\n" for i in range(n)))
    out = d / "out.jsonl.gz"
    out.write_bytes(out_raw)
    return [inp, out]


def test_batch_output_bomb_is_refused_and_the_spool_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    line = json.dumps({"custom_id": "c0", "response": {"status_code": 200, "body": {"object": "chat.completion", "choices": [
        {"message": {"role": "assistant", "content": "ok"}}]}}}) + "\n"
    bomb = gzip.compress((line + " " * (8 << 20) + "\n").encode(), compresslevel=9)  # ~8 MiB from a few KiB
    paths = batch_pair(tmp_path, bomb)
    with pytest.raises(WorkloadError, match=r"out\.jsonl\.gz: decompresses to more than 1048576 bytes"):
        load_workload(paths, LoadOptions(max_decompressed_bytes=1 << 20))
    assert list(spool.iterdir()) == []  # the temp file is gone with the error
    # the default cap grows with the file: 100x its size, at least 256 MiB
    assert decompressed_cap(paths[1]) == 256 << 20
    assert decompressed_cap(paths[1], 5) == 5
    (item,) = load_workload(paths, LoadOptions(max_decompressed_bytes=16 << 20))  # within a raised cap it loads
    assert item.request.id == "c0"
    assert list(spool.iterdir()) == []


def test_default_decompressed_cap_applies_to_workload_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import specgauge.workload.reader as reader

    monkeypatch.setattr(reader, "MIN_DECOMPRESSED_BYTES", 1 << 20)
    p = tmp_path / "w.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(("\n" * (4 << 20) + json.dumps(chat(0)) + "\n").encode()))
    with pytest.raises(WorkloadError, match="decompresses to more than"):
        load_workload([p])


def test_batch_output_long_line_is_bounded(tmp_path: Path) -> None:
    """Before: the output's lines were read whole (a 1.68 GB line, then a MemoryError traceback)."""
    def out(i: int, pad: int) -> str:
        return json.dumps({"custom_id": f"c{i}", "response": {"status_code": 200, "body": {"object": "chat.completion", "choices": [
            {"message": {"role": "assistant", "content": "ok"}}], "pad": "x" * pad}}}) + "\n"

    paths = batch_pair(tmp_path, gzip.compress((out(0, 10) + out(1, 100_000)).encode()), n=2)  # line 1 short: detection passes
    with pytest.raises(WorkloadError, match=r"out\.jsonl\.gz:2: line longer than 4096 bytes"):
        load_workload(paths, LoadOptions(max_line_bytes=4096))
    assert [it.request.id for it in load_workload(paths)] == ["c0", "c1"]


def test_batch_output_bomb_bounded_memory_at_defaults(tmp_path: Path) -> None:
    """The issue's shape at the defaults: an output file whose one line decompresses to 300 MB. Under
    RLIMIT_AS the load is one WorkloadError (the 16 MiB line bound), and nothing is left in the spool."""
    spool = tmp_path / "spool"
    spool.mkdir()
    first = json.dumps({"custom_id": "c0", "response": {"status_code": 200, "body": {"object": "chat.completion", "choices": [
        {"message": {"role": "assistant", "content": "ok"}}]}}}) + "\n"
    c = zlib_bomb(300 << 20, first.encode())  # line 1 a good record (detection reads it), line 2 the bomb
    batch_pair(tmp_path, c)
    r = bounded_run(f"""
        import tempfile
        tempfile.tempdir = {str(spool)!r}
        from specgauge.workload.loaders import load_workload
        from specgauge.workload.reader import WorkloadError
        try:
            load_workload(["in.jsonl", "out.jsonl.gz"])
        except WorkloadError as e:
            print("ERR", e)
        """, tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ERR out.jsonl.gz") and ("line longer" in r.stdout or "decompresses" in r.stdout), r.stdout
    assert list(spool.iterdir()) == []


def zlib_bomb(n: int, head: bytes = b"") -> bytes:
    """gzip of ``head`` and one line of ``n`` spaces, streamed (never ``n`` bytes in memory here)."""
    import io

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6) as g:
        g.write(head)
        block = b" " * (1 << 20)
        for _ in range(n >> 20):
            g.write(block)
        g.write(b"\n")
    return buf.getvalue()


# ---------------------------------------------------------------- 8. file kinds


def load_with_timeout(path: Path, timeout: float = 10.0) -> BaseException | None:
    """load_workload in a thread: a hang (a FIFO opened twice, /dev/zero) fails the test, not the run."""
    box: list[BaseException | None] = []

    def go() -> None:
        try:
            load_workload([path])
            box.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box.append(e)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert box, f"loading {path} hung for {timeout} s"
    return box[0]


def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "w.jsonl"
    os.mkfifo(fifo)
    e = load_with_timeout(fifo)
    assert isinstance(e, WorkloadError) and "FIFO" in str(e) and str(e).startswith(str(fifo)), e


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_refused() -> None:
    e = load_with_timeout(Path("/dev/zero"))
    assert isinstance(e, WorkloadError) and "character device" in str(e), e


def test_symlink_loop_says_so(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.symlink_to(b)
    b.symlink_to(a)
    e = load_with_timeout(a)
    assert isinstance(e, WorkloadError) and "symbolic link loop" in str(e), e
    dangling = tmp_path / "d.jsonl"
    dangling.symlink_to(tmp_path / "nowhere")
    e = load_with_timeout(dangling)
    assert isinstance(e, WorkloadError) and "no such file" in str(e), e
