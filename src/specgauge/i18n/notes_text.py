"""Catalogue entries of the notes ``profile`` and ``simulate`` compute (``workload/profile.py``,
``simulate/run.py``, ``simulate/replay.py``): stored in English in the results (``en``), shown with
``translate``. Names (tokenizers, files, methods, flags) stay as they are."""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {}

STORED: Entries = {
    "notes.list": {"en": "{a}; {b}", "ko": "{a}; {b}"},
    # where a comparison's figures came from (stats/compare.AcceptanceStats.basis, stats/equivalence, report/runs)
    "acc.basis.counters": {"en": "the run's /metrics counter diff", "ko": "실행의 /metrics 카운터 차이"},
    "acc.basis.counters_src": {"en": "the run's /metrics counter diff ({src})", "ko": "실행의 /metrics 카운터 차이 ({src})"},
    "acc.basis.requests": {"en": "per-request counts of {n} request(s)", "ko": "요청 {n}개의 요청별 카운트"},
    "acc.basis.requests_src": {"en": "per-request counts of {n} request(s) ({src})", "ko": "요청 {n}개의 요청별 카운트 ({src})"},
    # loadgen/memory.py: why device memory was not measured (tool errors stay as the tool wrote them)
    "mem.r.no_tool": {"en": "none of {tools} found on PATH: device memory not measured",
                      "ko": "PATH에 {tools} 중 어느 것도 없음: 장치 메모리를 측정하지 않음"},
    "mem.r.no_sample": {"en": "no sample succeeded: {errors}", "ko": "성공한 샘플 없음: {errors}"},
    "eq.src.flag": {"en": "--temperature flag", "ko": "--temperature 옵션"},
    "eq.src.unknown": {"en": "unknown", "ko": "알 수 없음"},
    "eq.src.run_json": {"en": "the workload named in run.json", "ko": "run.json에 적힌 워크로드"},
    "profile.n.approx": {"en": "token counts approximate: {reason}", "ko": "토큰 수 근사치: {reason}"},
    "profile.r.log": {"en": "every token count came from the log (token ids or usage)",
                      "ko": "모든 토큰 수를 로그에서 얻었습니다 (토큰 ID 또는 usage)"},
    "profile.r.words": {"en": "{n} request(s) counted by {who}, an approximation (words and punctuation), not a model's "
                              "tokenizer; pass --tokenizer DIR of the serving model",
                        "ko": "요청 {n}개를 {who}(으)로 셌습니다: 모델의 토크나이저가 아닌 근사치 (단어와 문장 부호)입니다. "
                              "서빙하는 모델의 --tokenizer DIR을 넘기세요"},
    "profile.r.own": {"en": "{n} request(s) counted by {who}, the tokenizer of the model they name ({models})",
                      "ko": "요청 {n}개를 {who}(으)로 셌습니다: 요청이 명시한 모델의 토크나이저입니다 ({models})"},
    "profile.r.mixed": {"en": "{n} request(s) counted by {who}: {parts}. Pass --tokenizer DIR of the serving model (and "
                              "keep the requests' model field) for exact counts",
                        "ko": "요청 {n}개를 {who}(으)로 셌습니다: {parts}. 정확한 수를 원하면 서빙하는 모델의 --tokenizer DIR을 "
                              "넘기세요 (요청의 model 필드는 그대로 두고)"},
    "profile.r.other": {"en": "{n} name another model ({others}) than the one {tok} belongs to",
                        "ko": "{n}개는 {tok}이(가) 속한 모델이 아닌 다른 모델을 명시 ({others})"},
    "profile.r.unknown": {"en": "{n} name no model, so nothing says {tok} is their model's tokenizer",
                          "ko": "{n}개는 모델을 명시하지 않음: {tok}이(가) 그 모델의 토크나이저라는 근거가 없습니다"},
    "profile.n.no_responses": {"en": "no logged responses: output tokens, tool calls and copy overlap need them",
                               "ko": "기록된 응답 없음: 출력 토큰, 도구 호출, 복사 겹침은 응답이 있어야 셉니다"},
    "simulate.n.no_drafts": {"en": "no drafts were proposed: acceptance is undefined (not 0)",
                             "ko": "제안된 초안 없음: 수락률은 정의되지 않습니다 (0이 아님)"},
    "simulate.n.open_tails": {
        "en": "{n} of {total} outputs end while the final draft still matched: a live suffix server would also learn up "
              "to {tail} tokens past those ends (accepted past the cut or the EOS, and the token after them) that no log "
              "holds; {after} request(s) were replayed without them in the cache, so their figures are exact only if "
              "those tokens change no draft",
        "ko": "출력 {total}개 중 {n}개가 마지막 초안이 아직 일치하는 채로 끝납니다: 실제 suffix 서버는 그 끝 너머의 토큰을 "
              "최대 {tail}개 더 학습합니다 (잘린 곳이나 EOS 너머에서 수락된 토큰과 그다음 토큰). 어떤 로그에도 없는 "
              "토큰입니다. 요청 {after}개는 그 토큰 없이 캐시에서 재생되었으므로, 그 토큰이 어떤 초안도 바꾸지 않을 때만 "
              "수치가 정확합니다"},
    "simulate.n.approx": {
        "en": "{n} request(s) had no logged token ids ({whose}): re-tokenised with {tok}; acceptance APPROXIMATE — log "
              "token ids (vLLM return_token_ids) for exact figures",
        "ko": "요청 {n}개에 기록된 토큰 ID가 없습니다 ({whose}): {tok}(으)로 다시 토큰화했습니다. 수락률은 근사치입니다 — "
              "정확한 수치를 원하면 토큰 ID를 기록하세요 (vLLM return_token_ids)"},
    "simulate.n.whose_own": {"en": "{n} name its model", "ko": "{n}개는 이 모델을 명시"},
    "simulate.n.whose_other": {"en": "{n} name another model: its ids are not their model's, so their acceptance says little",
                               "ko": "{n}개는 다른 모델을 명시: 이 id는 그 모델의 것이 아니므로 수락률이 말해 주는 바가 적습니다"},
    "simulate.n.whose_unknown": {"en": "{n} name no model, so whether it is their model's tokenizer is unknown",
                                 "ko": "{n}개는 모델을 명시하지 않음: 그 모델의 토크나이저인지 알 수 없습니다"},
    "simulate.n.nothing": {"en": "no request had a logged response with output: nothing to replay",
                           "ko": "출력이 있는 기록된 응답이 없습니다: 재생할 것이 없습니다"},
    "simulate.n.fitted": {
        "en": "predicted speedup: the calibrated step-cost law of cost profile {file} (server {model}, {shape} "
              "verification), each batch size simulated as a closed-loop bench of these requests; band from the law's bootstrap",
        "ko": "예측 속도 향상: 비용 프로파일 {file}의 보정된 스텝 비용 법칙 (서버 {model}, {shape} 검증), 배치 크기마다 "
              "이 요청들의 폐루프 벤치마크로 시뮬레이션; 범위는 법칙의 부트스트랩에서"},
    "simulate.n.uncalibrated": {
        "en": "predicted speedup: UNCALIBRATED cost model ({what}; not fitted on a live server); fit your server's "
              "law with `specgauge calibrate` and pass its cost_profile.json as --cost-profile",
        "ko": "예측 속도 향상: 보정되지 않은 비용 모델 ({what}; 실제 서버에 적합하지 않음). "
              "`specgauge calibrate`로 서버의 법칙을 적합하고 그 cost_profile.json을 --cost-profile로 넘기세요"},
    "simulate.n.ratio_file": {"en": "the cost-ratio file {file}", "ko": "비용 비율 파일 {file}"},
    "simulate.n.guessed": {"en": "guessed costs", "ko": "추정 비용"},
    "simulate.n.stream": {
        "en": "--partition-by {by}: one cache per value of {by} (as one server each), each replayed in arrival order "
              "({what}); per-request methods do not depend on it",
        "ko": "--partition-by {by}: {by} 값마다 캐시 하나 (각각 서버 하나처럼), 각각 도착 순서대로 재생 ({what}); "
              "요청별 방법은 이에 영향받지 않습니다"},
    "simulate.n.no_stateful": {"en": "no method here", "ko": "해당 방법 없음"},
}
