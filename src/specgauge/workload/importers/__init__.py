"""Importers: logged traffic from the stacks teams already run, as workload items.

Each importer is a module with ``records(f)`` yielding ``(FILE:LINE, WorkloadItem | WorkloadError)``
from an opened ``WorkloadFile`` in file order, streaming, and ``looks_like(first)`` for format
detection (``specgauge.workload.detect``). The loader (``specgauge.workload.loaders``) registers
them by format name beside its own formats.

| format | module | what it reads |
|---|---|---|
| ``otlp`` | ``otlp``, ``otlp_calls`` | OpenTelemetry GenAI spans / events / per-message log events, OTLP JSON (collector file exporter, OpenLLMetry, OpenLIT, opentelemetry-instrumentation-openai-v2); the exports given together are joined per call |
| ``langfuse`` | ``langfuse`` | Langfuse generations: API / UI / blob-storage exports, ingestion batches |
| ``litellm`` | ``litellm`` | LiteLLM StandardLoggingPayload (callbacks) and spend-log rows |
| ``vllm-log`` | ``vllm_log`` | vLLM's request log (``--enable-log-requests --enable-log-outputs``) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from specgauge.workload.importers import langfuse, litellm, otlp_calls, vllm_log
from specgauge.workload.reader import WorkloadError, WorkloadFile
from specgauge.workload.schema import WorkloadItem

Records = Callable[[WorkloadFile], Iterator[tuple[str, WorkloadItem | WorkloadError]]]
IMPORTERS: dict[str, Records] = {
    "otlp": otlp_calls.records, "langfuse": langfuse.records, "litellm": litellm.records, "vllm-log": vllm_log.records,
}
#: importers whose files given together are read as one (a call's parts may sit in several exports)
JOINED: dict[str, Callable[[list[WorkloadFile]], Iterator[tuple[str, WorkloadItem | WorkloadError]]]] = {
    "otlp": otlp_calls.records_joined,
}


def records(kind: str, files: list[WorkloadFile]) -> Iterator[tuple[str, WorkloadItem | WorkloadError]]:
    """The records of ``files`` (all of format ``kind``): read as one where the format joins its files
    (``JOINED``), else file after file."""
    if kind in JOINED:
        yield from JOINED[kind](files)
        return
    for f in files:
        yield from IMPORTERS[kind](f)
