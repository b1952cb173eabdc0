"""Catalogue entries of the ``profile`` and ``simulate`` console tables (``report/console.py``),
English and Korean; merged into ``catalogue.MESSAGES`` (one catalogue, kept in two files for size).
Column names that are figures' own names (k, MAL, T=0, top_p<1, B=…) stay as written."""

from __future__ import annotations

from specgauge.i18n.entries import Entries

WORKLOAD: Entries = {
    "profile.title.lengths": {"en": "Workload profile: lengths in tokens (p50/p95/max)",
                              "ko": "워크로드 프로파일: 토큰 길이 (p50/p95/최대)"},
    "profile.title.mix": {"en": "Workload profile: mix (share of requests; copy overlap: share of output tokens)",
                          "ko": "워크로드 프로파일: 구성 (요청 비율; 복사 겹침: 출력 토큰 비율)"},
    "profile.col.segment": {"en": "segment", "ko": "세그먼트"},
    "profile.col.requests": {"en": "requests", "ko": "요청"},
    "profile.col.logged": {"en": "logged", "ko": "기록된 응답"},
    "profile.col.prompt": {"en": "prompt", "ko": "프롬프트"},
    "profile.col.output": {"en": "output", "ko": "출력"},
    "profile.col.max_tokens": {"en": "max_tokens", "ko": "max_tokens"},
    "profile.col.tools": {"en": "tools", "ko": "도구 제공"},
    "profile.col.tool_calls": {"en": "tool calls", "ko": "도구 호출"},
    "profile.col.rag": {"en": "RAG ctx", "ko": "RAG 문맥"},
    "profile.col.copy": {"en": "copy overlap", "ko": "복사 겹침"},
    "profile.col.hangul": {"en": "Hangul", "ko": "한글"},
    "profile.col.languages": {"en": "languages", "ko": "언어"},
    "profile.overall": {"en": "overall", "ko": "전체"},
    "profile.temp_mix": {"en": "temperature mix (overall): {bands}", "ko": "temperature 분포 (전체): {bands}"},
    "profile.exact": {"en": "exact", "ko": "정확"},
    "profile.approx": {"en": "APPROXIMATE", "ko": "근사치"},
    "profile.counts": {"en": "token counts {label}; from {src}; tokenizer {who}",
                       "ko": "토큰 수 {label}; 출처 {src}; 토크나이저 {who}"},
    "profile.tool_calls": {"en": "tool calls: {offer} of requests offer tools; {call} of logged responses call one ({when} where offered): "
                                 "{openai} as OpenAI tool_calls ({openai_ok} with well-formed JSON arguments), "
                                 "{text} as text (<tool_call>…; {parsed} well-formed JSON)",
                           "ko": "도구 호출: 요청의 {offer}가 도구를 제공함; 기록된 응답의 {call}가 도구를 호출함 (제공된 경우 {when}): "
                                 "OpenAI tool_calls로 {openai}개 (인자가 올바른 JSON인 것 {openai_ok}개), "
                                 "텍스트(<tool_call>…)로 {text}개 (올바른 JSON {parsed}개)"},
    "profile.skipped": {"en": "{n} invalid request(s) skipped", "ko": "잘못된 요청 {n}개를 건너뜀"},
    "console.note": {"en": "note:", "ko": "참고:"},
    "simulate.title": {"en": "Offline acceptance replay, all requests ({n} replayed)",
                       "ko": "오프라인 수락 재생, 전체 요청 ({n}개 재생)"},
    "simulate.title.segments": {"en": "Per segment: best k by predicted speedup at batch {b}",
                                "ko": "세그먼트별: 배치 {b}에서 예측 속도 향상이 가장 큰 k"},
    "simulate.title.detail": {"en": "Per segment × method × k", "ko": "세그먼트 × 방법 × k별"},
    "simulate.col.method": {"en": "method", "ko": "방법"},
    "simulate.col.acc_rate": {"en": "acc rate", "ko": "수락률"},
    "simulate.col.per_position": {"en": "per-position acceptance", "ko": "위치별 수락"},
    "simulate.col.per_position_short": {"en": "per-position", "ko": "위치별"},
    "simulate.col.tok_step": {"en": "tok/step", "ko": "토큰/스텝"},
    "simulate.col.req_acc": {"en": "req acc p10/p50/p90", "ko": "요청별 수락 p10/p50/p90"},
    "simulate.col.speedup": {"en": "speedup B={b}", "ko": "속도 향상 B={b}"},
    "simulate.col.best_k": {"en": "best k", "ko": "최적 k"},
    "simulate.col.guess": {"en": "guess B={b}", "ko": "추정 B={b}"},
    "simulate.title_guess": {"en": "Offline acceptance replay, all requests ({n} replayed); guess = speedup from an uncalibrated cost model (~)",
                             "ko": "오프라인 수락 재생, 전체 요청 ({n}개 재생); 추정 = 보정되지 않은 비용 모델의 속도 향상 (~)"},
    "simulate.title.segments_guess": {"en": "Per segment: best k by the uncalibrated speedup guess at batch {b} (fit your server's law: --cost-profile)",
                                      "ko": "세그먼트별: 배치 {b}에서 보정되지 않은 속도 향상 추정이 가장 큰 k (서버의 법칙을 적합해 --cost-profile로 줄 것)"},
    "simulate.fig.tf": {"en": "{label}: {method} k={k} (teacher-forced, optimistic)",
                        "ko": "{label}: {method} k={k} (교사 강제, 낙관적)"},
    "simulate.col.tf_acc": {"en": "teacher-forced (optimistic)", "ko": "교사 강제 (낙관적)"},
    "simulate.tf_note": {"en": "teacher-forced (optimistic): the head's accuracy with every draft position fed the target's "
                               "hidden state, as training tools (EAGLE, SpecForge) print it. No server drafts that way: "
                               "the replayed acc rate beside it is what a server accepts.",
                         "ko": "교사 강제 (낙관적): 모든 초안 위치에 타깃의 은닉 상태를 넣었을 때의 헤드 정확도로, 학습 도구"
                               "(EAGLE, SpecForge)가 출력하는 수치입니다. 서버는 그렇게 초안을 만들지 않습니다: "
                               "옆의 재생 수락률이 서버가 실제로 수락하는 값입니다."},
    "simulate.exact": {"en": "acceptance EXACT (logged token ids)", "ko": "수락 정확 (기록된 토큰 ID)"},
    "simulate.exact_bounded": {"en": "acceptance from logged token ids: EXACT except where a note below gives bounds",
                               "ko": "기록된 토큰 ID로 센 수락: 아래 참고 사항이 범위를 주는 곳 말고는 정확"},
    "simulate.approx": {"en": "acceptance APPROXIMATE (text re-tokenised by {tok}; see the note)",
                        "ko": "수락 근사치 ({tok}로 텍스트를 다시 토큰화함; 참고 사항 확인)"},
    "simulate.skipped": {"en": "skipped {n} request(s): {why}", "ko": "요청 {n}개를 건너뜀: {why}"},
    "simulate.csv": {"en": "CSV written to {path}", "ko": "CSV 저장: {path}"},
    # labels the profile stores in its data (temperature bands, token-count sources, tokenizer origins)
    "data.unset": {"en": "unset", "ko": "미지정"},
    "data.greedy": {"en": "0 (greedy)", "ko": "0 (그리디)"},
    "data.prompt_log": {"en": "prompt: log", "ko": "프롬프트: 로그"},
    "data.prompt_ids": {"en": "prompt: request ids", "ko": "프롬프트: 요청의 토큰 ID"},
    "data.prompt_tok": {"en": "prompt: tokenizer", "ko": "프롬프트: 토크나이저"},
    "data.output_log": {"en": "output: log", "ko": "출력: 로그"},
    "data.output_usage": {"en": "output: usage", "ko": "출력: usage"},
    "data.output_tok": {"en": "output: tokenizer", "ko": "출력: 토크나이저"},
    "data.shipped_tok": {"en": "the shipped tiny model's tokenizer, used by default",
                         "ko": "기본으로 쓰는 동봉된 작은 모델의 토크나이저"},
}

#: ``data.*`` keys, longest English first (a label inside a longer one is replaced after it)
DATA_KEYS: tuple[str, ...] = tuple(sorted((k for k in WORKLOAD if k.startswith("data.")),
                                          key=lambda k: -len(WORKLOAD[k]["en"])))
