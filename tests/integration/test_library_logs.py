"""Logs written during the run by the real libraries teams log with, against the real embedded server
(the shipped tiny-target on a free loopback port), then imported by specgauge and checked as the
recorded copies are (``tests/_library_logs.py``):

- LiteLLM 1.110: its StandardLoggingPayload, as a CustomLogger callback receives it;
- opentelemetry-instrumentation-openai-v2 2.4b0 on the official openai client, OTLP JSON written by
  opentelemetry-exporter-otlp-json-file, in each content mode, with ``true``, and to the console;
- the same instrumentation at 2.3b0 (per-message log events), installed by scripts/test.sh beside the
  venv (``$SPECGAUGE_CACHE/otel-openai-v2-2.3b0``, with the wrapt 1.x it needs) and put first on the
  producer's PYTHONPATH: two versions of one package cannot share the venv.

The libraries come from the ``logs`` extra (scripts/test.sh installs it); each test skips, saying so,
where its library is not installed. Each producer runs in a subprocess: the libraries patch the openai
client and read their switches from the environment.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("uvicorn")
pytest.importorskip("specgauge.models")
from specgauge.engine.serve import build_app  # noqa: E402
from specgauge.models import target_dir  # noqa: E402
from tests._library_logs import check_litellm, check_otel_23, check_otel_24  # noqa: E402
from tests.integration._http import serve_in_thread  # noqa: E402
from tests.integration._log_producers import KEY, MODEL  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SPECGAUGE_CACHE", Path.home() / ".cache" / "specgauge"))
OTEL_23 = CACHE / "otel-openai-v2-2.3b0"


def _have(*modules: str) -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:
        return False


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    app = build_app(Path(target_dir()), None, api_key=KEY, max_batch=4, max_model_len=1024, served_model_name=MODEL)
    with serve_in_thread(app, log_level="warning") as url:
        yield url


def _produce(which: str, url: str, out: Path, first_on_path: Path | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LITELLM_"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (first_on_path, ROOT) if p is not None)
    r = subprocess.run([sys.executable, "-m", "tests.integration._log_producers", which, url, str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow  # importing LiteLLM alone takes seconds
@pytest.mark.skipif(not _have("litellm"), reason="LiteLLM is not installed (pip install -e '.[logs]')")
def test_litellm_callback_payloads_from_a_live_server(server: str, tmp_path: Path) -> None:
    _produce("litellm", server, tmp_path)
    check_litellm(tmp_path / "litellm.jsonl")


@pytest.mark.slow  # five content modes, three calls each, in one subprocess: ~9-11 s here
@pytest.mark.skipif(not _have("opentelemetry.instrumentation.openai_v2", "opentelemetry.exporter.otlp.json.file"),
                    reason="opentelemetry-instrumentation-openai-v2 / -exporter-otlp-json-file are not installed "
                           "(pip install -e '.[logs]')")
def test_opentelemetry_openai_v2_2_4b0_from_a_live_server(server: str, tmp_path: Path) -> None:
    _produce("otel", server, tmp_path)
    assert (tmp_path / "version.txt").read_text() == "2.4b0"
    check_otel_24(tmp_path)


@pytest.mark.skipif(not (OTEL_23 / "opentelemetry" / "instrumentation" / "openai_v2").is_dir(),
                    reason=f"opentelemetry-instrumentation-openai-v2 2.3b0 is not installed at {OTEL_23} "
                           "(scripts/test.sh installs it there)")
def test_opentelemetry_openai_v2_2_3b0_from_a_live_server(server: str, tmp_path: Path) -> None:
    _produce("otel", server, tmp_path, first_on_path=OTEL_23)
    assert (tmp_path / "version.txt").read_text() == "2.3b0"
    check_otel_23(tmp_path)
