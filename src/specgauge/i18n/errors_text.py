"""Catalogue entries of the one-line user errors a first run trips over (``bench``'s check that the server
answers, ``serve``'s config check, ``report`` given a workload file, a flag out of range), English and
Korean; merged into ``catalogue.MESSAGES``. They are raised in English (``en``) and shown through
``translate`` by the CLI's error wrapper (``cli.common.user_errors``). URLs, paths and flags stay as written."""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {}

STORED: Entries = {
    # bench: does the server answer at --base-url? (bench/benchmark.py, before anything is written)
    "err.bench.refused": {"en": "connection refused at {url}: nothing listens there (is the server up?); nothing was written",
                          "ko": "{url}에서 연결이 거부됨: 그곳에서 듣는 서버가 없음 (서버가 떠 있는가?); 아무것도 기록하지 않음"},
    "err.bench.unreachable": {"en": "cannot connect to {url}: {why}; nothing was written",
                              "ko": "{url}에 연결할 수 없음: {why}; 아무것도 기록하지 않음"},
    "err.bench.v1": {"en": "--base-url {url} ends in /v1: drop /v1 (bench adds /v1/... to the server root itself): --base-url {root}",
                     "ko": "--base-url {url}이 /v1로 끝남: /v1을 뺄 것 (bench가 서버 루트에 /v1/...을 직접 붙임): --base-url {root}"},
    # report / compare given a workload instead of what specgauge writes (report/runs.py)
    "err.report.workload": {"en": "{path}: a workload file ({format}), not results: pass what specgauge writes — "
                                  "specgauge profile {name} --json > profile.json, specgauge simulate {name} --json > sim.json, "
                                  "or the output directory of specgauge bench -w {name}",
                            "ko": "{path}: 결과가 아니라 워크로드 파일({format})임: specgauge가 쓴 것을 넘길 것 — "
                                  "specgauge profile {name} --json > profile.json, specgauge simulate {name} --json > sim.json, "
                                  "또는 specgauge bench -w {name}의 출력 디렉터리"},
}
