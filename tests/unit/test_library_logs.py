"""Logs that LiteLLM 1.110 and opentelemetry-instrumentation-openai-v2 (2.3b0, 2.4b0) wrote for real
(recorded in tests/data; tests/data/litellm/README.md and tests/data/otlp/README.md say how): imported
with tools, finish reasons and exactness labels right, traces and logs of one call joined, the
per-message events of 2.3b0 read, the console exporters' output recognised. The same checks run on
logs the libraries write during the run in tests/integration/test_library_logs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("specgauge.models")
from tests._library_logs import check_litellm, check_otel_23, check_otel_24  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


def test_litellm_1_110_callback_payloads() -> None:
    check_litellm(DATA / "litellm" / "litellm_1.110_callbacks.jsonl")


def test_opentelemetry_openai_v2_2_4b0_content_modes() -> None:
    check_otel_24(DATA / "otlp" / "openai_v2_2.4b0")


def test_opentelemetry_openai_v2_2_3b0_per_message_events() -> None:
    check_otel_23(DATA / "otlp" / "openai_v2_2.3b0")


def test_the_console_exporter_error_in_korean() -> None:
    """The message comes from the catalogue: FILE kept, the message in the user's language."""
    from typer.testing import CliRunner

    from specgauge.cli import app

    path = DATA / "otlp" / "openai_v2_2.4b0" / "console" / "logs.txt"
    r = CliRunner().invoke(app, ["profile", str(path)], env={"LC_ALL": "ko_KR.UTF-8"})
    assert r.exit_code == 2
    assert f"{path}: OpenTelemetry SDK의 ConsoleLogRecordExporter가 출력한 콘솔 형식이며 OTLP JSON이 아닙니다" in r.output
