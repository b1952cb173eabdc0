"""bench on hostile flags and files (issue 26, item 8): credentials in --base-url with --api-key, an
unwritable run.json, --resume onto another workload's results. Each is one BenchError line, and no
finished request is lost. Against the scripted streaming server (real loopback HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.bench import BenchConfig, BenchError, run_bench
from specgauge.cli import app
from specgauge.testing.fakeserver import FakeServer
from specgauge.records import ResultsFile


def workload(tmp: Path, name: str, prefix: str, n: int = 3) -> Path:
    p = tmp / name
    p.write_text("".join(json.dumps({"id": f"{prefix}{i}", "prompt": f"tokens:{3 + i}", "max_tokens": 16}) + "\n" for i in range(n)))
    return p


def cfg(url: str, w: Path, out: Path, **kw: object) -> BenchConfig:
    return BenchConfig(base_url=url, workload=[w], output_dir=out, progress=False, timeout=5.0, **kw)  # type: ignore[arg-type]


def test_url_credentials_with_api_key_is_one_line(tmp_path: Path) -> None:
    w = workload(tmp_path, "w.jsonl", "q")
    with FakeServer() as srv:
        url = srv.base_url.replace("http://", "http://u:p@")
        with pytest.raises(BenchError, match="carries user:password and --api-key") as e:
            run_bench(cfg(url, w, tmp_path / "o", api_key="K", model="m"))
        assert "u:p" not in str(e.value)  # the password is not echoed
        r = CliRunner().invoke(app, ["bench", "--base-url", url, "--api-key", "K", "--model", "m", "-o", str(tmp_path / "o2"),
                                     "--workload", str(w)])
        assert r.exit_code == 2 and "Traceback" not in r.output and "--api-key" in r.output, r.output
        res = run_bench(cfg(url, w, tmp_path / "o3", model="m"))  # credentials alone: sent as Basic auth
        assert res.summary["completed"] == 3


def test_unwritable_run_json_keeps_the_results(tmp_path: Path) -> None:
    w = workload(tmp_path, "w.jsonl", "q")
    out = tmp_path / "o"
    (out / "run.json").mkdir(parents=True)  # cannot be replaced by a file (root ignores permissions)
    with FakeServer() as srv:
        with pytest.raises(BenchError, match=r"run\.json: cannot write .* every finished request is kept") as e:
            run_bench(cfg(srv.base_url, w, out))
    assert "\n" not in str(e.value)
    assert sorted(r.id for r in ResultsFile(out / "results.jsonl").existing()) == ["q0", "q1", "q2"]


def test_resume_with_another_workload_is_refused(tmp_path: Path) -> None:
    a, b = workload(tmp_path, "a.jsonl", "a"), workload(tmp_path, "b.jsonl", "b")
    out = tmp_path / "o"
    with FakeServer() as srv:
        run_bench(cfg(srv.base_url, a, out))
        before = (out / "results.jsonl").read_bytes()
        sent = srv.requests
        with pytest.raises(BenchError, match="--resume: .*another"):
            run_bench(cfg(srv.base_url, b, out, resume=True))
        assert srv.requests == sent  # nothing was sent
        (out / "run.json").unlink()  # without run.json the records themselves tell
        with pytest.raises(BenchError, match="records this workload does not plan"):
            run_bench(cfg(srv.base_url, b, out, resume=True))
    assert (out / "results.jsonl").read_bytes() == before
