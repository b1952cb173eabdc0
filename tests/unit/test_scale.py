"""Scale-out pieces that need no cluster: the schedule split, the single-process --partition-by
semantics the Ray replay must equal, the file reader's in-order error rows, and the messages when
Ray is missing or flags are combined wrongly. The Ray runs themselves are in
tests/integration/test_ray.py."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.records import FailureKind, RequestRecord
from specgauge.scale import ScaleError, ray_available, require_ray
from specgauge.simulate.run import SimulateConfig, simulate
from specgauge.workload.loaders import LoadOptions
from specgauge.workload.samples import sample_logged_path
from specgauge.workload.schema import Request

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _req(i: int) -> Request:
    return Request.model_validate({"id": f"r{i}", "api": "completion", "prompt": "x"})


def test_deal_keeps_the_global_schedule_round_robin() -> None:
    from specgauge.scale.loadgen import deal, shares

    plan = [(i, _req(i), 0.1 * i) for i in range(7)]
    shards = deal(plan, 3)
    assert [[i for i, _, _ in s] for s in shards] == [[0, 3, 6], [1, 4], [2, 5]]
    assert all(at == pytest.approx(0.1 * i) for s in shards for i, _, at in s)  # global times kept
    assert shares(None, 3) == [None, None, None]
    assert shares(10, 3) == [4, 3, 3] and sum(shares(10, 3)) == 10  # the global cap stays the same
    with pytest.raises(ScaleError, match="--max-concurrency 2 is below --ray-workers 3"):
        shares(2, 3)


def test_send_lags_per_worker_and_lost_record() -> None:
    from specgauge.scale.loadgen import _lost_record, _WorkerState, send_lags

    recs = [RequestRecord(id=f"r{i}", index=i, scheduled_s=1.0, ready_s=1.0 + 0.01 * i, sent_s=1.0 + 0.01 * i,
                          started_at=0.0, ok=True, extra={"loadgen_worker": i % 2}) for i in range(6)]
    lags = send_lags(recs)
    assert set(lags) == {"0", "1"} and lags["0"]["n"] == 3
    assert lags["1"]["max_s"] == pytest.approx(0.05) and lags["0"]["p50_s"] == pytest.approx(0.02)
    st = _WorkerState(worker=1, actor=None, share=2, node={"node_ip": "10.0.0.2"})
    lost = _lost_record(_req(3), 3, 0.5, 0.6, 0.55, 1000.0, st)
    assert not lost.ok and lost.failure is FailureKind.worker_lost and lost.sent_s == 0.6 and lost.started_at == 1000.6
    assert "worker 1 (10.0.0.2) died while this request was in flight" in (lost.error or "")


def _split_by_segment(src: Path, tmp: Path, n: int) -> dict[str, Path]:
    rows = [json.loads(line) for line in src.read_text().splitlines()[:n]]
    out: dict[str, Path] = {}
    for seg in sorted({r["request"].get("segment") or r["request"]["metadata"].get("segment", "") for r in rows}):
        p = tmp / f"{seg}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows
                             if (r["request"].get("segment") or r["request"]["metadata"].get("segment", "")) == seg))
        out[seg] = p
    return out


def test_partition_by_gives_each_value_its_own_suffix_cache(tmp_path: Path) -> None:
    """--partition-by segment: suffix acceptance of each segment equals a replay of that segment's
    requests alone (its own cache); n-gram, per request, does not change."""
    from specgauge.api import resolve_tokenizer

    tok = resolve_tokenizer(None)
    src = sample_logged_path()
    first = json.loads(src.read_text().splitlines()[0])
    if "request" not in first:
        pytest.skip("the shipped sample log has another layout")
    n = 60
    base = SimulateConfig(workload=[src], load=LoadOptions(limit=n), methods=["ngram", "suffix"], ks=[2, 4])
    whole = simulate(base, tok)
    parted = simulate(base.model_copy(update={"partition_by": "segment"}), tok)
    assert any("--partition-by segment" in note for note in parted.notes)
    for seg, path in _split_by_segment(src, tmp_path, n).items():
        alone = simulate(SimulateConfig(workload=[path], methods=["ngram", "suffix"], ks=[2, 4]), tok)
        got = {(s.method, s.k): s for s in parted.segments[seg].summaries}
        for s in alone.overall.summaries:
            assert got[(s.method, s.k)].accepted_tokens == s.accepted_tokens, (seg, s.method, s.k)
            assert got[(s.method, s.k)].draft_tokens == s.draft_tokens
    ngram = lambda r: [(s.k, s.accepted_tokens, s.draft_tokens) for s in r.overall.summaries if s.method == "ngram"]
    assert ngram(whole) == ngram(parted)
    suffix = lambda r: [s.accepted_tokens for s in r.overall.summaries if s.method == "suffix"]
    assert suffix(whole) != suffix(parted)  # separate caches learn less: the option really changes the replay


def test_require_ray_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as where it is not installed
    with pytest.raises(ScaleError, match=r"Ray is not installed .*pip install 'specgauge\[ray\]'"):
        require_ray()
    assert ray_available() is not None


def test_cli_flag_combinations_are_user_errors() -> None:
    r = CliRunner().invoke(app, ["simulate", "--split-streams", "2", "--limit", "2"])
    assert r.exit_code == 2 and "--split-streams: only with --ray" in r.output
    r = CliRunner().invoke(app, ["simulate", "--ray-address", "10.0.0.1:6379", "--limit", "2"])
    assert r.exit_code == 2 and "--ray-address: only with --ray" in r.output
    r = CliRunner().invoke(app, ["bench", "--base-url", "http://127.0.0.1:9", "--ray-address", "x:1"])
    assert r.exit_code == 2 and "--ray-address: only with --ray-workers" in r.output


needs_ray = pytest.mark.skipif(ray_available() is not None, reason=f"Ray missing: {ray_available()}")


@needs_ray
def test_reader_rows_keep_workload_order_and_errors_in_place(tmp_path: Path) -> None:
    """The Ray reader (specgauge's loader per file, gzip and zstd) emits records and bad lines in
    file order with FILE:LINE, so the driver raises or counts them where a single pass would."""
    import pyarrow as pa

    from specgauge.scale.replay_tasks import SEQ_SHIFT, read_files, rebuild_error

    good = {"request": {"id": "a1", "prompt": [1, 2, 3, 1, 2]}, "response": {"output_token_ids": [3, 1, 2, 3], "prompt_token_ids": [1, 2, 3, 1, 2]}}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "request": {**good["request"], "id": "a2"}}),
             json.dumps({"request": {"id": "a3", "prompt": "hi"}})]
    gz = tmp_path / "one.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write("\n".join(lines) + "\n")
    zst = tmp_path / "two.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines[:1]) + "\n").replace("a1", "b1").encode()))
    files = pa.table({"file_index": [0, 1], "path": [str(gz), str(zst)], "kind": ["openai", "openai"]})

    def rows(skip: bool) -> list[dict]:
        cfg = SimulateConfig(workload=[gz, zst], load=LoadOptions(skip_invalid=skip), methods=["ngram"], ks=[2])
        return [r for t in read_files(files, cfg.model_dump_json(), [], block_tokens=4) for r in t.to_pylist()]

    strict = rows(False)
    assert [r["kind"] for r in strict] == ["item", "error", "item"]  # file 0 stops at its bad line; file 1 goes on
    assert [r["seq"] >> SEQ_SHIFT for r in strict] == [0, 0, 1]
    err = rebuild_error(strict[1])
    assert str(err).startswith(f"{gz}:2: invalid JSON")
    skipped = rows(True)
    assert [r["kind"] for r in skipped] == ["item", "skip", "item", "noresp", "item"]
    assert [r["seq"] for r in skipped] == sorted(r["seq"] for r in skipped)
    assert skipped[0]["out"] == [3, 1, 2, 3] and skipped[0]["exact"] is True
