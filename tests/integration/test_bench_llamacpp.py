"""specgauge bench against real llama.cpp ``llama-server`` (b11434, scripts/build_llama_server.sh).

The shipped tiny target/draft pair is converted to GGUF with the sdist's own
``convert_hf_to_gguf.py``; the server runs draft-model and n-gram speculation. Asserted: the
per-response ``timings.draft_n`` / ``draft_n_accepted`` summed over the run equal the server's
``llamacpp:spec_decode_*`` counter diff exactly, and per-chunk token counts (``timings_per_token``)
add up to ``usage``. Skips, saying why, where the binary or the models are absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specgauge.bench import BenchConfig, run_bench
from specgauge.records import ResultsFile
from specgauge.report.bench_console import format_summary
from specgauge.servers import llamacpp_server

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

MODELS = Path(__file__).resolve().parents[2] / "src" / "specgauge" / "models"
TARGET, DRAFT = MODELS / "tiny-target", MODELS / "tiny-draft"
CACHE = Path(os.environ.get("SPECGAUGE_CACHE", Path.home() / ".cache" / "specgauge"))
PREFIX = Path(os.environ.get("SPECGAUGE_LLAMA_SERVER_DIR", CACHE / "llama-server-b11434"))
BIN = PREFIX / "bin" / "llama-server"
PROMPTS = [
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the",
    "one two three four five one two three four five one two three",
    "hello world hello world hello world hello world hello",
    "red green blue red green blue red green blue red green",
]


def _gguf(model: Path, out_dir: Path) -> Path:
    """Converts once per model (cached by the model's config + weights mtime)."""
    weights = sorted(model.glob("*.safetensors")) or sorted(model.glob("*.bin"))
    stamp = int(max(p.stat().st_mtime for p in [model / "config.json", *weights]))
    out = out_dir / f"{model.name}-{stamp}.f16.gguf"
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, str(PREFIX / "src" / "convert_hf_to_gguf.py"), str(model), "--outtype", "f16",
                        "--outfile", str(out) + ".tmp"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"convert_hf_to_gguf.py could not convert {model.name}: {r.stderr.strip().splitlines()[-1:]}")
    Path(str(out) + ".tmp").replace(out)
    return out


@pytest.fixture(scope="module")
def ggufs() -> tuple[Path, Path | None]:
    if not BIN.exists():
        pytest.skip(f"no llama-server at {BIN}: run scripts/build_llama_server.sh")
    if not (TARGET / "config.json").exists():
        pytest.skip(f"tiny target model not found at {TARGET}")
    gdir = CACHE / "gguf"
    return _gguf(TARGET, gdir), _gguf(DRAFT, gdir) if (DRAFT / "config.json").exists() else None


SPEC_ARGS = {
    "draft": ["--spec-type", "draft-simple", "--spec-draft-n-max", "4"],
    "ngram": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"],
}


@pytest.fixture(scope="module", params=list(SPEC_ARGS))
def server(request: pytest.FixtureRequest, ggufs: tuple[Path, Path | None], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    target, draft = ggufs
    args = list(SPEC_ARGS[request.param])
    if request.param == "draft":
        if draft is None:
            pytest.skip("no tiny draft model")
        args = ["-md", str(draft), *args]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llamacpp_server(BIN, target, log, args, nice=10) as srv:
        yield srv.base_url, request.param


def test_acceptance_equals_the_servers_counters(server: tuple[str, str], tmp_path: Path) -> None:
    url, kind = server
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"id": f"p{i}", "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 32,
                                     "temperature": 0.0, "ignore_eos": True}) + "\n" for i in range(8)))
    res = run_bench(BenchConfig(base_url=url, workload=[w], output_dir=tmp_path / "o", max_concurrency=1,
                                progress=False, timeout=300, warmup=1))
    s = res.summary
    print(f"\n[llama.cpp {kind}]\n" + format_summary(s))
    assert s["failed"] == 0 and s["completed"] == 8
    assert s["specgauge"]["dialect"] == "llamacpp"
    acc = s["specgauge"]["acceptance"]
    assert acc["counters"]["available"] and acc["per_request_total"]["available"], acc
    ag = acc["agreement"]
    assert ag["compared"] and {"draft_tokens", "accepted_tokens"} <= set(ag["fields"]), ag
    assert ag["equal"], json.dumps(ag, indent=1)
    recs = ResultsFile(tmp_path / "o" / "results.jsonl").existing()
    for r in recs:
        assert sum(c.n for c in r.chunks) == r.output_tokens, (r.id, r.token_counts)
