"""Catalogue entries of ``specgauge audit`` (console: ``report/audit_console.py``), English and Korean;
merged into ``catalogue.MESSAGES``.

``STORED``: the verdict reasons ``audit/analysis.judge`` writes into ``audit.json`` and the progress
lines ``audit/run.py`` reports, in English; shown with ``translate``.
"""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {
    "audit.servers": {"en": "candidate {cand} ({cm}) vs reference {ref} ({rm}); tokens from {src}, n per request: {n_cand}/{n_ref}",
                      "ko": "후보 {cand} ({cm}) 대 참조 {ref} ({rm}); 토큰 출처 {src}, 요청당 n 지원: {n_cand}/{n_ref}"},
    "audit.title": {"en": "token distributions at temperature {temp} (first {pos} positions)",
                    "ko": "temperature {temp}에서의 토큰 분포 (처음 {pos}개 위치)"},
    "audit.c.prompt": {"en": "prompt", "ko": "프롬프트"},
    "audit.c.pos": {"en": "pos", "ko": "위치"},
    "audit.c.cols": {"en": "cols", "ko": "열"},
    "audit.c.n": {"en": "n ref/cand", "ko": "n 참조/후보"},
    "audit.c.dof": {"en": "dof", "ko": "자유도"},
    "audit.c.p_holm": {"en": "p Holm", "ko": "p (Holm)"},
    "audit.c.detects": {"en": "detects TV", "ko": "검출 가능 TV"},
    "audit.more_tests": {"en": "({n} more tests in audit.json)", "ko": "(검정 {n}개 더 있음: audit.json)"},
    "audit.greedy": {"en": "greedy in batches mixed with sampled requests: {same} of {n} identical to the reference's greedy output sent alone",
                     "ko": "샘플링 요청과 섞인 배치의 그리디 출력: {n}개 중 {same}개가 참조 서버에 단독으로 보낸 그리디 출력과 동일"},
    "audit.greedy_control": {"en": "; control (reference, same mixed batches): {same} of {n}", "ko": "; 대조군 (참조 서버, 같은 혼합 배치): {n}개 중 {same}개"},
    "audit.example": {"en": "  {side} prompt {prompt} round {round}: first difference at token {d}: expected {exp}, got {got}",
                      "ko": "  {side} 프롬프트 {prompt} 라운드 {round}: 토큰 {d}에서 처음 달라짐: 기대 {exp}, 실제 {got}"},
    "audit.side.candidate": {"en": "candidate", "ko": "후보"},
    "audit.side.reference": {"en": "reference", "ko": "참조"},
    "audit.verdict.PASS": {"en": "PASS", "ko": "통과"},
    "audit.verdict.FAIL": {"en": "FAIL", "ko": "실패"},
    "audit.verdict.INCONCLUSIVE": {"en": "INCONCLUSIVE", "ko": "판단 유보"},
    "audit.evidence": {"en": "evidence: {audit}, samples: {samples}", "ko": "근거: {audit}, 샘플: {samples}"},
    "audit.yes": {"en": "yes", "ko": "예"},
    "audit.no": {"en": "no", "ko": "아니오"},
}

STORED: Entries = {
    # audit/analysis.judge
    "audit.r.differ": {"en": "token distributions differ at temperature > 0 in {k} of {n} tests ({where}); strongest: prompt {prompt} position {pos}, Holm-adjusted p = {p}, TV distance {tv}, Cramér's V {v}",
                       "ko": "temperature > 0에서 토큰 분포가 검정 {n}개 중 {k}개에서 다름 ({where}); 가장 강한 것: 프롬프트 {prompt} 위치 {pos}, Holm 보정 p = {p}, TV 거리 {tv}, Cramér's V {v}"},
    "audit.r.where": {"en": "prompt {prompt} position {pos}", "ko": "프롬프트 {prompt} 위치 {pos}"},
    "audit.r.few": {"en": "too few samples: {k} of {n} tests cannot detect a TV distance of {tv} with {power} power (prompt {prompt} position {pos} detects only {dtv} with {nr}/{nc} samples); about {need} per side and prompt would (--samples {need})",
                    "ko": "샘플이 너무 적음: 검정 {n}개 중 {k}개가 검정력 {power}로 TV 거리 {tv}를 검출할 수 없음 (프롬프트 {prompt} 위치 {pos}는 샘플 {nr}/{nc}개로 {dtv}까지만 검출함); 쪽마다 프롬프트당 약 {need}개면 충분함 (--samples {need})"},
    "audit.r.ok": {"en": "no distribution test rejects at family-wise alpha = {alpha} ({n} tests, Holm); each detects a TV distance >= {tv} with power >= {power}",
                   "ko": "전체 유의수준 alpha = {alpha}에서 기각된 분포 검정 없음 (검정 {n}개, Holm); 각 검정은 검정력 {power} 이상으로 TV 거리 {tv} 이상을 검출함"},
    "audit.r.no_tests": {"en": "no distribution tests (no samples)", "ko": "분포 검정 없음 (샘플 없음)"},
    "audit.r.no_greedy": {"en": "greedy check: no greedy outputs recorded", "ko": "그리디 검사: 기록된 그리디 출력 없음"},
    "audit.r.greedy_changed": {"en": "greedy outputs changed under speculation in batches mixed with sampled requests: {k} of {n} differ from the reference's greedy output sent alone",
                               "ko": "샘플링 요청과 섞인 배치에서 추측 디코딩으로 그리디 출력이 바뀜: {n}개 중 {k}개가 참조 서버에 단독으로 보낸 그리디 출력과 다름"},
    "audit.r.first_at": {"en": "first at token {d} of prompt {prompt}", "ko": "처음은 프롬프트 {prompt}의 토큰 {d}"},
    "audit.r.not_invariant": {"en": "but the reference itself changed {k} of {n} in the same mixed batches (not batch-invariant), so speculation is not shown to be the cause",
                              "ko": "하지만 참조 서버도 같은 혼합 배치에서 {n}개 중 {k}개를 바꿈 (배치 불변이 아님): 추측 디코딩이 원인이라고 볼 수 없음"},
    "audit.r.ref_kept": {"en": "the reference kept {k} of {n} in the same mixed batches", "ko": "참조 서버는 같은 혼합 배치에서 {n}개 중 {k}개를 유지함"},
    "audit.r.greedy_ok": {"en": "greedy: {k} of {n} identical to the reference in batches mixed with sampled requests",
                          "ko": "그리디: 샘플링 요청과 섞인 배치에서 {n}개 중 {k}개가 참조와 동일"},
    # audit/run.py progress
    "audit.p.prompt": {"en": "prompt {i}: {nc} candidate and {nr} reference samples", "ko": "프롬프트 {i}: 후보 샘플 {nc}개, 참조 샘플 {nr}개"},
    "audit.p.greedy": {"en": "greedy in mixed batches on the {side}: {n} rounds", "ko": "{side}의 혼합 배치 그리디: {n} 라운드"},
    "audit.p.starting": {"en": "starting the reference server (no speculation) and the candidate server",
                         "ko": "참조 서버(추측 디코딩 없음)와 후보 서버를 시작함"},
}
