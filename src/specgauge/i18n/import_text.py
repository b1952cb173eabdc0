"""Catalogue entries of the log importers' messages (``workload/importers``): made in English where the
problem is found (``en``), shown with ``translate``. Names (environment variables, their values, exporter
classes, event names) stay as they are."""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {}

STORED: Entries = {
    "import.otlp.no_content": {
        "en": "a model call without its prompt: no content on this span nor in a log record of the same call. If a "
              "logs export holds it (event_only, or the per-message events gen_ai.user.message / gen_ai.choice), "
              "pass it beside the traces; else turn content capture on: "
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only, event_only or span_and_event for "
              "opentelemetry-instrumentation-openai-v2 2.4b0 and later (with "
              "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental), =true for earlier versions; OpenLLMetry: "
              "TRACELOOP_TRACE_CONTENT=true",
        "ko": "프롬프트가 없는 모델 호출: 이 스팬에도, 같은 호출의 로그 레코드에도 내용이 없습니다. 로그 내보내기에 "
              "내용이 있다면 (event_only, 또는 메시지별 이벤트 gen_ai.user.message / gen_ai.choice) 트레이스와 함께 "
              "넘기세요. 아니면 내용 수집을 켜세요: opentelemetry-instrumentation-openai-v2 2.4b0 이상은 "
              "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only, event_only 또는 span_and_event "
              "(OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental와 함께), 이전 버전은 =true; OpenLLMetry는 "
              "TRACELOOP_TRACE_CONTENT=true"},
    "import.otlp.console": {
        "en": "this is what the OpenTelemetry SDK's {exporter} prints (its console format), not OTLP JSON: export "
              "OTLP JSON instead (the collector's file exporter, or FileSpanExporter / FileLogExporter of "
              "opentelemetry-exporter-otlp-json-file) and pass that file",
        "ko": "OpenTelemetry SDK의 {exporter}가 출력한 콘솔 형식이며 OTLP JSON이 아닙니다: 대신 OTLP JSON으로 "
              "내보내고 (컬렉터의 file exporter, 또는 opentelemetry-exporter-otlp-json-file의 FileSpanExporter / "
              "FileLogExporter) 그 파일을 넘기세요"},
    "import.otlp.event_without_span": {
        "en": "a per-message event (gen_ai.*.message / gen_ai.choice) without traceId and spanId: nothing tells "
              "which model call it belongs to",
        "ko": "traceId와 spanId가 없는 메시지별 이벤트 (gen_ai.*.message / gen_ai.choice): 어느 모델 호출에 "
              "속하는지 알 수 없습니다"},
}
