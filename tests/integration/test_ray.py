"""Scale-out on a real local multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head and one
more node on this machine, 1 CPU each): Ray replay equals the single-process replay row for row; a
2-worker bench against the embedded server equals a 1-host bench in requests, tokens and acceptance
counters; a load-generator worker killed mid-run loses only its in-flight requests, and says so."""

from __future__ import annotations

import gzip
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from specgauge.scale import ray_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(ray_available() is not None, reason=f"Ray is not installed here ({ray_available()})"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    import ray
    from ray.cluster_utils import Cluster

    mem = 80 * 1024 * 1024
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": mem, "include_dashboard": False})
    c.add_node(num_cpus=1, object_store_memory=mem)
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c.address
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def tok():
    from specgauge.api import resolve_tokenizer

    return resolve_tokenizer(None)


def _sample_lines(n: int) -> list[str]:
    from specgauge.workload.samples import sample_logged_path

    return sample_logged_path().read_text().splitlines()[:n]


def _run_both(cfg, tok, tmp_path: Path, **ray_kw):
    from specgauge.scale.replay import RayReplayConfig, simulate_on_ray
    from specgauge.simulate.run import simulate

    one = simulate(cfg.model_copy(update={"per_request_out": tmp_path / "single.jsonl"}), tok)
    many, spread = simulate_on_ray(cfg.model_copy(update={"per_request_out": tmp_path / "ray.jsonl"}), tok,
                                   RayReplayConfig(**ray_kw))
    return one, many, spread


def test_ray_replay_equals_single_process(cluster: str, tok, tmp_path: Path) -> None:
    """n-gram (tasks), suffix (ordered streams, one per k) and the draft model (actor pool) on the
    sample log: the same SimulateResult and the same per-request rows in the same order."""
    from specgauge.cli.common import workload_paths
    from specgauge.simulate.run import SimulateConfig
    from specgauge.workload.loaders import LoadOptions

    cfg = SimulateConfig(workload=workload_paths(None), load=LoadOptions(limit=10), ks=[1, 3, 8],
                         methods=["ngram", "suffix", f"draft_model:{MODELS / 'tiny-draft'}"])
    one, many, spread = _run_both(cfg, tok, tmp_path, block_tokens=1024)
    assert spread.record_blocks > 1 and spread.stream_tasks == 3 and "actor pool" in spread.per_request_stage
    assert one.requests_replayed == 10 and all(s.drafts > 0 for s in one.overall.summaries)
    assert many.model_dump() == one.model_dump()
    single_rows = (tmp_path / "single.jsonl").read_text().splitlines()
    assert len(single_rows) == 10 * 3 * 3
    assert (tmp_path / "ray.jsonl").read_text().splitlines() == single_rows


def test_ray_replay_of_a_hidden_state_head_equals_single_process(cluster: str, tok, tmp_path: Path) -> None:
    """The shipped EAGLE-3 head (its target run by transformers in every actor, loaded once per actor;
    CPU actors here, one per GPU with --device cuda), the requests' target passes batched as on a GPU
    (each actor per record block, the single process per its own blocks): the same result and rows as
    without Ray."""
    from specgauge.cli.common import workload_paths
    from specgauge.simulate.run import SimulateConfig
    from specgauge.workload.loaders import LoadOptions

    cfg = SimulateConfig(workload=workload_paths(None), load=LoadOptions(limit=6), ks=[1, 3],
                         methods=[f"eagle3:{MODELS / 'tiny-eagle3'}"], device="cpu", replay_batch_tokens=8192)
    one, many, spread = _run_both(cfg, tok, tmp_path, block_tokens=1024)
    assert "actor pool" in spread.per_request_stage and one.requests_replayed == 6
    assert all(s.accepted_tokens > 0 for s in one.overall.summaries)
    assert many.model_dump() == one.model_dump()
    assert (tmp_path / "ray.jsonl").read_text().splitlines() == (tmp_path / "single.jsonl").read_text().splitlines()


def test_ray_replay_partitions_many_compressed_files_and_measures_a_split(cluster: str, tok, tmp_path: Path) -> None:
    """Two files (gzip, zstd), --partition-by segment: equal to the single-process run with the same
    partitions. A split of each stream into 2 cold pieces is marked approximate, and its error is
    measured against the exact replay of the same requests."""
    from specgauge.simulate.run import SimulateConfig

    lines = _sample_lines(90)
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.zst"
    with gzip.open(a, "wt") as f:
        f.write("\n".join(lines[:50]) + "\n")
    b.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines[50:]) + "\n").encode()))
    cfg = SimulateConfig(workload=[a, b], methods=["ngram", "suffix"], ks=[2, 4], partition_by="segment")
    one, many, spread = _run_both(cfg, tok, tmp_path, block_tokens=8192, stream_groups=2)
    assert spread.files == 2 and spread.stream_tasks == 4
    assert many.model_dump() == one.model_dump()
    assert (tmp_path / "ray.jsonl").read_text() == (tmp_path / "single.jsonl").read_text()

    from specgauge.scale.replay import RayReplayConfig, simulate_on_ray

    split, rep = simulate_on_ray(cfg, tok, RayReplayConfig(split_streams=2, split_check_requests=20, block_tokens=8192))
    assert {(e.method, e.k) for e in rep.split_errors} == {("suffix", 2), ("suffix", 4)}
    rows = [json.loads(x) for x in (tmp_path / "single.jsonl").read_text().splitlines()]
    order = list(dict.fromkeys(r["request_id"] for r in rows))
    for e in rep.split_errors:
        window = order[order.index(e.first_request): order.index(e.last_request) + 1]
        assert e.requests == len(window) == 20
        exact = [r for r in rows if r["method"] == "suffix" and r["k"] == e.k and r["request_id"] in window]
        assert e.exact_acceptance_rate == pytest.approx(sum(r["accepted_tokens"] for r in exact) / sum(r["draft_tokens"] for r in exact))
        assert any(f"suffix k={e.k}: each stream cut into 2 pieces" in n and "APPROXIMATE" in n for n in split.notes)
    ngram = lambda r: [s.model_dump() for s in r.overall.summaries if s.method == "ngram"]
    assert ngram(split) == ngram(one)  # per-request methods are exact whatever the split


def test_ray_replay_raises_the_first_bad_line_in_workload_order(cluster: str, tok, tmp_path: Path) -> None:
    from specgauge.scale.replay import RayReplayConfig, simulate_on_ray
    from specgauge.simulate.run import SimulateConfig, simulate
    from specgauge.workload.loaders import LoadOptions
    from specgauge.workload.reader import WorkloadError

    lines = _sample_lines(6)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines[:3]) + "\n")
    b.write_text(lines[3] + "\n" + '{"request": {"id": "x", "prompt": ""}}\n' + "\n".join(lines[4:]) + "\n")
    cfg = SimulateConfig(workload=[a, b], methods=["ngram"], ks=[3])
    with pytest.raises(WorkloadError) as single:
        simulate(cfg, tok)
    with pytest.raises(WorkloadError) as distributed:
        simulate_on_ray(cfg, tok, RayReplayConfig())
    assert str(distributed.value) == str(single.value) and str(single.value).startswith(f"{b}:2:")
    lenient = cfg.model_copy(update={"load": LoadOptions(skip_invalid=True)})
    assert simulate_on_ray(lenient, tok, RayReplayConfig())[0].model_dump() == simulate(lenient, tok).model_dump()


# ------------------------------------------------------------------------------------------- bench


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The embedded engine with n-gram speculation, one request at a time (so outputs and counters do
    not depend on how the client interleaves requests)."""
    if not (MODELS / "tiny-target" / "config.json").exists():
        pytest.skip("the shipped tiny target is absent")
    pytest.importorskip("torch")
    from specgauge.servers import embedded_server

    log = tmp_path_factory.mktemp("srv") / "server.log"
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}
    with embedded_server(MODELS / "tiny-target", log, spec, max_batch=1) as srv:
        yield srv.base_url


def _workload(tmp_path: Path, n: int, max_tokens: int) -> Path:
    from specgauge.workload.samples import sample_path

    rows = [json.loads(x) for x in sample_path().read_text().splitlines()[:n]]
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({**r, "max_tokens": max_tokens, "temperature": 0}) + "\n" for r in rows))
    return w


def test_two_ray_workers_equal_one_host(cluster: str, server: str, tmp_path: Path) -> None:
    from specgauge.bench import BenchConfig, run_bench
    from specgauge.records import ResultsFile

    w = _workload(tmp_path, 16, 24)
    base = {"base_url": server, "workload": [w], "max_concurrency": 4, "progress": False}
    one = run_bench(BenchConfig(output_dir=tmp_path / "one", **base)).summary
    two = run_bench(BenchConfig(output_dir=tmp_path / "two", ray_workers=2, **base)).summary
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens", "spec_decode_num_drafts",
                "spec_decode_draft_tokens", "spec_decode_accepted_tokens"):
        assert two[key] == one[key], key
    assert one["completed"] == 16 and one["spec_decode_num_drafts"] > 0
    assert two["specgauge"]["acceptance"]["counters"]["available"]
    assert set(two) == set(one) and set(two["specgauge"]) == set(one["specgauge"])  # the same summary form
    recs = {r.id: r for r in ResultsFile(tmp_path / "two" / "results.jsonl").existing()}
    ref = {r.id: r for r in ResultsFile(tmp_path / "one" / "results.jsonl").existing()}
    assert {i: r.output_tokens for i, r in recs.items()} == {i: r.output_tokens for i, r in ref.items()}
    assert {r.extra["loadgen_worker"] for r in recs.values()} == {0, 1}
    assert all(sum(c.n for c in r.chunks) == r.output_tokens for r in recs.values())  # tokens, not chunks
    info = json.loads((tmp_path / "two" / "run.json").read_text())["sessions"][-1]["ray"]
    assert info["workers"] == 2 and len({w["node_id"] for w in info["per_worker"]}) == 2  # SPREAD over both nodes
    for wk in info["per_worker"]:
        assert wk["requests_assigned"] == 8 and wk["max_concurrency"] == 2 and wk["send_lag"]["n"] == 8
        assert isinstance(wk["clock_offset_s"], float) and wk["died"] is None
    again = run_bench(BenchConfig(output_dir=tmp_path / "two", ray_workers=2, resume=True, **base)).summary
    assert again["completed"] == 16 and len(ResultsFile(tmp_path / "two" / "results.jsonl").existing()) == 16


def test_a_killed_worker_loses_only_its_in_flight_requests(cluster: str, server: str, tmp_path: Path) -> None:
    import ray

    from specgauge.bench import BenchConfig, arrival_process, run_bench
    from specgauge.records import FailureKind, ResultsFile
    from specgauge.scale.loadgen import ACTOR_PREFIX

    n = 20
    out = tmp_path / "killed"
    killed: dict[str, int] = {}

    def kill_worker_1() -> None:  # a real death: SIGKILL of the actor's process once records flow
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            names = [a["name"] if isinstance(a, dict) else a for a in ray.util.list_named_actors()]
            target = [x for x in names if x.startswith(ACTOR_PREFIX) and x.endswith("-w1")]
            done = len((out / "results.jsonl").read_text().splitlines()) if (out / "results.jsonl").exists() else 0
            if target and done >= 3:
                pid = ray.get(ray.get_actor(target[0]).hello.remote())["pid"]
                os.kill(pid, signal.SIGKILL)
                killed["pid"] = pid
                return
            time.sleep(0.05)

    th = threading.Thread(target=kill_worker_1, daemon=True)
    th.start()
    cfg = BenchConfig(base_url=server, workload=[_workload(tmp_path, n, 16)], output_dir=out, max_concurrency=4,
                      request_rate=5.0, ray_workers=2, progress=False)
    res = run_bench(cfg)
    th.join(5)
    assert killed, "the test could not kill worker 1"
    recs = ResultsFile(out / "results.jsonl").existing()
    assert sorted(r.index for r in recs) == list(range(n))  # every request accounted for, none twice
    times = arrival_process(cfg, []).times(n, cfg.seed)  # taken-over requests keep their global schedule
    assert [r.scheduled_s for r in sorted(recs, key=lambda r: r.index)] == pytest.approx(times)
    lost = [r for r in recs if not r.ok]
    assert all(r.failure is FailureKind.worker_lost and r.extra["loadgen_worker"] == 1 for r in lost)
    info = json.loads((out / "run.json").read_text())["sessions"][-1]["ray"]["per_worker"]
    assert info[1]["died"] and sorted(info[1]["lost_in_flight"]) == sorted(r.id for r in lost)
    assert len(lost) <= 2  # at most worker 1's share of --max-concurrency was in flight
    assert info[1]["handed_over"] > 0 and info[0]["taken_over"] == info[1]["handed_over"]  # the rest went to worker 0
    assert res.summary["completed"] == n - len(lost) and res.summary["failed"] == len(lost)
    warn = [x for x in res.summary["specgauge"]["warnings"] if "worker 1" in x]
    assert warn and f"{len(lost)} request(s) in flight lost" in warn[0] and "sent by the other workers" in warn[0]
