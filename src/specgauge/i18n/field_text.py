"""Catalogue entries of the field-failure checks (``docs/field-failures.md``): structured outputs
checked against the request's schema (``structured.py``, ``stats/field.py``), stalls, acceptance
collapse against the replay, the TTFT split; in bench, compare, the canary and the report.

``STORED``: messages written into results in English (``en``) and shown with ``translate``: the
output-check errors of each record, the verdict's reasons, the canary's check reasons. ``ENTRIES``:
what the console and the report print with ``t``. Tool and function names, JSON pointers and the
``jsonschema`` library's own messages stay as they are (parameters).
"""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {
    # console (bench, compare) and the HTML report
    "field.h.outputs": {"en": "Structured outputs (tool calls, JSON) checked against each request's schema",
                        "ko": "구조화 출력 (도구 호출, JSON): 요청마다 자기 스키마로 검사"},
    "field.h.compare": {"en": "Field failures per segment: share of requests, baseline against candidate (Fisher exact, one-sided)",
                        "ko": "세그먼트별 현장 장애: 요청 비율, 기준 대 후보 (피셔 정확 검정, 단측)"},
    "field.check.outputs": {"en": "invalid structured outputs", "ko": "무효 구조화 출력"},
    "field.check.stalls": {"en": "stalled requests", "ko": "멈춘 요청"},
    "field.c.check": {"en": "check", "ko": "검사"},
    "field.c.group": {"en": "segment", "ko": "세그먼트"},
    "field.c.kind": {"en": "kind", "ko": "종류"},
    "field.c.baseline": {"en": "baseline", "ko": "기준"},
    "field.c.candidate": {"en": "candidate", "ko": "후보"},
    "field.c.p": {"en": "p (one-sided)", "ko": "p (단측)"},
    "field.c.first": {"en": "first problem (candidate)", "ko": "첫 문제 (후보)"},
    "field.c.invalid": {"en": "invalid", "ko": "무효"},
    "field.c.checked": {"en": "checked", "ko": "검사함"},
    "field.kind.tool_call": {"en": "tool calls", "ko": "도구 호출"},
    "field.kind.json": {"en": "JSON", "ko": "JSON"},
    "field.kind.all": {"en": "all", "ko": "전체"},
    "field.bench.outputs": {"en": "Structured outputs: {k} of {n} invalid ({kinds})", "ko": "구조화 출력: {n}개 중 {k}개 무효 ({kinds})"},
    "field.bench.stalls": {"en": "Stalls: {k} of {n} requests with a gap above {thr} ms (reference TPOT {ref} ms); longest gap p95 {p95} ms, max {mx} ms",
                           "ko": "멈춤: 요청 {n}개 중 {k}개에 {thr} ms 넘는 공백 (기준 TPOT {ref} ms); 가장 긴 공백 p95 {p95} ms, 최대 {mx} ms"},
    "field.bench.stall": {"en": "  {id}: {gap} ms ({x} × TPOT), ended by {text}", "ko": "  {id}: {gap} ms (TPOT의 {x}배), 끝낸 출력 {text}"},
    "field.compare.stalls": {"en": "The candidate's longest stalls (gap above {thr} ms, the baseline's TPOT {ref} ms):",
                             "ko": "후보의 가장 긴 멈춤 ({thr} ms 넘는 공백, 기준 TPOT {ref} ms):"},
    "field.unknown": {"en": "(not recorded)", "ko": "(기록 없음)"},
    "field.bench.first": {"en": "  first: {id}: {error}", "ko": "  첫 사례: {id}: {error}"},
}

STORED: Entries = {
    # structured.py: one record's output check (error field)
    "out.e.unclosed": {"en": "tool call {n}: <tool_call> without </tool_call>", "ko": "도구 호출 {n}: </tool_call> 없는 <tool_call>"},
    "out.e.block_json": {"en": "tool call {n}: not JSON ({error})", "ko": "도구 호출 {n}: JSON이 아님 ({error})"},
    "out.e.block_shape": {"en": "tool call {n}: not an object with a name and arguments",
                          "ko": "도구 호출 {n}: name과 arguments를 가진 객체가 아님"},
    "out.e.unknown_tool": {"en": "tool call {n}: {name} is not an offered tool", "ko": "도구 호출 {n}: {name}은(는) 제공된 도구가 아님"},
    "out.e.args_json": {"en": "tool call {n} ({name}): arguments are not JSON ({error})",
                        "ko": "도구 호출 {n} ({name}): 인자가 JSON이 아님 ({error})"},
    "out.e.args_schema": {"en": "tool call {n} ({name}): arguments break the schema: {error}",
                          "ko": "도구 호출 {n} ({name}): 인자가 스키마를 어김: {error}"},
    "out.e.no_call": {"en": "no tool call though the request required one", "ko": "요청이 도구 호출을 요구했으나 호출 없음"},
    "out.e.not_json": {"en": "the output is not JSON ({error})", "ko": "출력이 JSON이 아님 ({error})"},
    "out.e.schema": {"en": "the output breaks the schema: {error}", "ko": "출력이 스키마를 어김: {error}"},
    "out.e.cut": {"en": "{why} (cut at max_tokens)", "ko": "{why} (max_tokens에서 잘림)"},
    # stats/verdict.py: compare's reasons and notes on structured outputs
    "verdict.outputs_worse": {"en": "the candidate breaks more structured outputs: {kc} of {nc} invalid against {kb} of {nb} in the baseline (Fisher one-sided p={p} < {alpha}); first: {first}",
                              "ko": "후보가 구조화 출력을 더 많이 깨뜨림: 기준 {nb}개 중 {kb}개에 비해 {nc}개 중 {kc}개 무효 (피셔 단측 검정 p={p} < {alpha}); 첫 사례: {first}"},
    "verdict.outputs_more": {"en": "structured outputs: {kc} of {nc} invalid against {kb} of {nb} in the baseline, not significantly more (Fisher one-sided p={p})",
                             "ko": "구조화 출력: 기준 {nb}개 중 {kb}개에 비해 {nc}개 중 {kc}개 무효, 유의하게 많지 않음 (피셔 단측 검정 p={p})"},
    "verdict.outputs_same": {"en": "structured outputs: {kc} of {nc} invalid, {kb} of {nb} in the baseline",
                             "ko": "구조화 출력: {nc}개 중 {kc}개 무효, 기준은 {nb}개 중 {kb}개"},
    # canary/field_checks.py: the guardrails' reasons (decisions.jsonl)
    "canary.j.outputs_alone": {"en": "structured outputs: candidate {kc} of {nc} invalid; no baseline requests to compare with",
                               "ko": "구조화 출력: 후보 {nc}개 중 {kc}개 무효; 비교할 기준 요청 없음"},
    "canary.j.outputs_ok": {"en": "structured outputs: candidate {kc} of {nc} invalid, baseline {kb} of {nb} (Fisher one-sided p={p})",
                            "ko": "구조화 출력: 후보 {nc}개 중 {kc}개 무효, 기준 {nb}개 중 {kb}개 (피셔 단측 검정 p={p})"},
    "canary.j.outputs_bad": {"en": "structured outputs break on the candidate: {kc} of {nc} invalid, baseline {kb} of {nb} (Fisher one-sided p={p} < {alpha})",
                             "ko": "후보에서 구조화 출력이 깨짐: {nc}개 중 {kc}개 무효, 기준 {nb}개 중 {kb}개 (피셔 단측 검정 p={p} < {alpha})"},
    "verdict.stalls_worse": {"en": "more candidate requests stall: {kc} of {nc} with a gap above {thr} ms against {kb} of {nb} in the baseline (Fisher one-sided p={p} < {alpha}); longest: {first}",
                             "ko": "후보 요청이 더 많이 멈춤: 기준 {nb}개 중 {kb}개에 비해 {nc}개 중 {kc}개에 {thr} ms 넘는 공백 (피셔 단측 검정 p={p} < {alpha}); 가장 긴 것: {first}"},
    "verdict.stalls_note": {"en": "stalls (gap above {thr} ms): candidate {kc} of {nc}, baseline {kb} of {nb} (Fisher one-sided p={p})",
                            "ko": "멈춤 ({thr} ms 넘는 공백): 후보 {nc}개 중 {kc}개, 기준 {nb}개 중 {kb}개 (피셔 단측 검정 p={p})"},
    "canary.j.stalls_alone": {"en": "stalls: {nc} candidate requests; no baseline requests to compare with",
                              "ko": "멈춤: 후보 요청 {nc}개; 비교할 기준 요청 없음"},
    "canary.j.stalls_ok": {"en": "stalls (gap above {thr} ms): candidate {kc} of {nc}, baseline {kb} of {nb} (Fisher one-sided p={p})",
                           "ko": "멈춤 ({thr} ms 넘는 공백): 후보 {nc}개 중 {kc}개, 기준 {nb}개 중 {kb}개 (피셔 단측 검정 p={p})"},
    "canary.j.stalls_bad": {"en": "the candidate stalls: {kc} of {nc} requests with a gap above {thr} ms, baseline {kb} of {nb} (Fisher one-sided p={p} < {alpha}); longest: {first}",
                            "ko": "후보가 멈춤: 요청 {nc}개 중 {kc}개에 {thr} ms 넘는 공백, 기준 {nb}개 중 {kb}개 (피셔 단측 검정 p={p} < {alpha}); 가장 긴 것: {first}"},
    "out.e.bad_schema": {"en": "the request's schema is not a JSON Schema ({error}): not judged",
                         "ko": "요청의 스키마가 JSON Schema가 아님 ({error}): 판정하지 않음"},
}
