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
    # bench/foreign.py: other tools' results read as runs
    "foreign.n.vllm_unpaired": {"en": "{file}: vllm bench serve result: its requests carry no id another run shares: compared unpaired",
                                "ko": "{file}: vllm bench serve 결과: 요청에 다른 실행과 공유하는 ID가 없음: 짝짓지 않고 비교함"},
    "foreign.n.vllm_itl": {"en": "{file}: output token counts are vllm bench's (usage, else its tokenizer), spread over chunks: ITL approximate",
                           "ko": "{file}: 출력 토큰 수는 vllm bench의 것(usage, 없으면 그 토크나이저)을 청크에 나눈 것: ITL은 근사치"},
    "foreign.n.vllm_counts": {"en": "vllm bench serve --save-result spec_decode_* (its /metrics diff over the run)",
                              "ko": "vllm bench serve --save-result의 spec_decode_* (실행 동안의 /metrics 차이)"},
    "foreign.n.vllm_no_counts": {"en": "the vllm bench serve result has no spec_decode_* keys (baseline run, or a vLLM before they were saved)",
                                 "ko": "vllm bench serve 결과에 spec_decode_* 키가 없음 (기준 실행이거나 그 키를 저장하기 전의 vLLM)"},
    "foreign.n.aiperf_paired": {"en": "{file}: AIPerf records: paired with another run by conversation_id:turn_index (same input dataset only)",
                                "ko": "{file}: AIPerf 기록: 다른 실행과 conversation_id:turn_index로 짝지음 (같은 입력 데이터셋일 때만)"},
    "foreign.n.aiperf_itl": {"en": "{file}: output tokens spread over AIPerf's chunks: ITL approximate",
                             "ko": "{file}: 출력 토큰을 AIPerf의 청크에 나눔: ITL은 근사치"},
    "foreign.n.no_counts": {"en": "{file}: {tool} logs no speculative counts: acceptance unknown for this run",
                            "ko": "{file}: {tool}은(는) 추측 디코딩 카운트를 기록하지 않음: 이 실행의 수락률은 알 수 없음"},
    "foreign.n.guidellm_unpaired": {"en": "{file}: GuideLLM benchmark {bench}: request ids are per run: compared unpaired",
                                    "ko": "{file}: GuideLLM 벤치마크 {bench}: 요청 ID가 실행마다 다름: 짝짓지 않고 비교함"},
    "foreign.n.guidellm_itl": {"en": "{file}: GuideLLM keeps first and last token times only: ITL is the mean gap, not per token",
                               "ko": "{file}: GuideLLM은 첫 토큰과 마지막 토큰 시각만 남김: ITL은 토큰별이 아닌 평균 간격"},
    # stats/compare.py, stats/equivalence.py: why a figure is absent, how runs were paired
    "stats.r.no_success": {"en": "no successful request", "ko": "성공한 요청 없음"},
    "stats.r.zero_denominator": {"en": "undefined on this data (a zero denominator)", "ko": "이 데이터로는 정의되지 않음 (분모가 0)"},
    "stats.r.no_pair_tokens": {"en": "no successful request with output tokens and an end time on both sides",
                               "ko": "양쪽 모두에서 출력 토큰과 종료 시각이 있는 성공한 요청이 없음"},
    "stats.r.empty_run": {"en": "a run has no requests", "ko": "요청이 없는 실행이 있음"},
    "stats.n.no_shared_ids": {"en": "the runs share no request id: samples resampled independently (unpaired)",
                              "ko": "두 실행이 공유하는 요청 ID가 없음: 표본을 따로 재표집함 (짝짓지 않음)"},
    "stats.n.no_both_ok": {"en": "no request id succeeded in both runs: samples resampled independently (unpaired)",
                           "ko": "두 실행 모두에서 성공한 요청 ID가 없음: 표본을 따로 재표집함 (짝짓지 않음)"},
    "stats.r.run_level_only": {"en": "the server gave run-level /metrics counters only: no per-segment acceptance",
                               "ko": "서버가 실행 단위 /metrics 카운터만 줌: 세그먼트별 수락률 없음"},
    "stats.r.no_greedy_pair": {"en": "no temperature-0 pair", "ko": "temperature-0 쌍 없음"},
    "stats.r.sample_empty": {"en": "a sample is empty", "ko": "빈 표본이 있음"},
    "stats.r.ks_one_each": {"en": "one value on each side: the Kolmogorov distribution has no sample size to be read at (n·m/(n+m) rounds to 0)",
                            "ko": "양쪽에 값이 하나씩뿐: 콜모고로프 분포를 읽을 표본 크기가 없음 (n·m/(n+m)을 반올림하면 0)"},
    "stats.r.no_sampled_pair": {"en": "no temperature > 0 pair", "ko": "temperature > 0 쌍 없음"},
    "stats.r.all_empty": {"en": "all outputs are empty", "ko": "모든 출력이 비어 있음"},
    "stats.r.one_empty": {"en": "one run's outputs are all empty", "ko": "한 실행의 출력이 모두 비어 있음"},
    "stats.r.no_score_pair": {"en": "no pair to score", "ko": "채점할 쌍 없음"},
    # report/runs.py, report/html.py
    "report.n.workload_missing": {"en": "{label}: workload {path} not found: prompts and temperatures unknown",
                                  "ko": "{label}: 워크로드 {path}를 찾을 수 없음: 프롬프트와 temperature를 알 수 없음"},
    "report.n.workload_bad": {"en": "{label}: workload not readable ({error}): prompts and temperatures unknown",
                              "ko": "{label}: 워크로드를 읽을 수 없음 ({error}): 프롬프트와 temperature를 알 수 없음"},
    "report.r.accepts_fewer": {"en": "the server accepts fewer draft tokens than its own outputs allow (replay check): its draft verification is wrong, or bench was given another --speculative-config than it runs",
                               "ko": "서버가 자기 출력이 허용하는 것보다 드래프트 토큰을 적게 수락함 (재생 검사): 드래프트 검증이 틀렸거나, bench에 서버가 쓰는 것과 다른 --speculative-config를 줌"},
    "report.n.second_profile": {"en": "{path}: a second workload profile; the report shows the first",
                                "ko": "{path}: 두 번째 워크로드 프로파일; 보고서는 첫 번째를 보임"},
    # why acceptance is absent (stats/compare.AcceptanceStats, stats/summary, stats/acceptance, report/runs)
    "acc.r.none": {"en": "no per-request speculative counts (speculation off, or not exposed)",
                   "ko": "요청별 추측 디코딩 카운트 없음 (추측 디코딩이 꺼졌거나 노출되지 않음)"},
    "acc.r.none_zero": {"en": "no per-request speculative counts and the /metrics counters show no draft token (speculation off?)",
                        "ko": "요청별 추측 디코딩 카운트가 없고 /metrics 카운터에도 드래프트 토큰이 없음 (추측 디코딩이 꺼졌나?)"},
    "acc.r.none_because": {"en": "no per-request speculative counts; no /metrics counters either: {why}",
                           "ko": "요청별 추측 디코딩 카운트 없음; /metrics 카운터도 없음: {why}"},
    "acc.r.no_session": {"en": "no session ran", "ko": "실행된 세션 없음"},
    "acc.r.interrupted": {"en": "a session was interrupted before its after-run /metrics snapshot: counters do not cover the run",
                          "ko": "실행 후 /metrics 스냅숏 전에 중단된 세션이 있음: 카운터가 실행 전체를 다루지 않음"},
    "acc.r.no_counters": {"en": "no speculative counters in /metrics (speculation off, or not exposed)",
                          "ko": "/metrics에 추측 디코딩 카운터 없음 (추측 디코딩이 꺼졌거나 노출되지 않음)"},
    "acc.r.no_sessions": {"en": "no run.json sessions or summary.json counters beside the records",
                          "ko": "기록 옆에 run.json 세션도 summary.json 카운터도 없음"},
    "acc.r.not_exposed": {"en": "the server exposed no speculative counts", "ko": "서버가 추측 디코딩 카운트를 노출하지 않음"},
    "acc.r.no_per_request": {"en": "the server returned no per-request speculative counts", "ko": "서버가 요청별 추측 디코딩 카운트를 돌려주지 않음"},
    "acc.r.no_drafted": {"en": "no request drafted a token", "ko": "토큰을 드래프트한 요청 없음"},
    "acc.r.no_drafts": {"en": "no request reported drafts", "ko": "드래프트를 알린 요청 없음"},
    "acc.r.need_both": {"en": "need both per-request counts and counters", "ko": "요청별 카운트와 카운터가 모두 필요함"},
    "demo.n.backend": {"en": "suffix replayed with the {backend} backend on every request", "ko": "모든 요청에서 suffix를 {backend} 백엔드로 재생함"},
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
    "profile.r.prompt_gap": {"en": "{n} re-tokenised prompt(s) differ from the prompt_tokens the server logged beside "
                                    "them (e.g. {got} vs {logged}): the log does not hold the whole prompt as the "
                                    "server saw it (OpenTelemetry's instrumentations record no tool definitions)",
                             "ko": "다시 토큰화한 프롬프트 {n}개가 서버가 함께 기록한 prompt_tokens와 다릅니다 (예: {got} 대 "
                                   "{logged}): 로그에 서버가 본 프롬프트 전체가 없습니다 (OpenTelemetry 계측은 도구 정의를 "
                                   "기록하지 않음)"},
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
    "simulate.n.open_tails_extremes": {
        "en": "{n} of {total} outputs end while the final draft still matched: a live suffix server would also learn up "
              "to {tail} tokens past those ends (accepted past the cut or the EOS, and the token after them) that no log "
              "holds; replayed at both extremes of what it learned there, the acceptance lies in [{lo}, {hi}]: the "
              "replay's extremes, not a guarantee (a server that accepted part of a tail can lie outside). {inexact} of "
              "{total} requests' counts differ between the extremes (mean width {width} accepted tokens); {extremes} "
              "request(s) from the first such unpinned end on carry the extremes as their bounds and are never labelled "
              "exact (simulate --per-request: each row's bounds and bounds_kind); a log with vLLM's per-request counters "
              "(--per-request-spec-decode-metrics detailed) makes the bounds guaranteed",
        "ko": "출력 {total}개 중 {n}개가 마지막 초안이 아직 일치하는 채로 끝납니다: 실제 suffix 서버는 그 끝 너머의 토큰을 "
              "최대 {tail}개 더 학습합니다 (잘린 곳이나 EOS 너머에서 수락된 토큰과 그다음 토큰). 어떤 로그에도 없는 "
              "토큰입니다. 서버가 거기서 학습한 것의 두 극단으로 재생하면 수락률은 [{lo}, {hi}] 안에 있습니다: 재생의 두 "
              "극단일 뿐 보장이 아닙니다 (꼬리의 일부만 수락한 서버는 그 밖에 있을 수 있음). 요청 {total}개 중 "
              "{inexact}개의 카운트가 두 극단 사이에서 다르고 (평균 폭: 수락 토큰 {width}개), 카운터가 정해 주지 않은 첫 "
              "끝부터의 요청 {extremes}개는 두 극단을 범위로 가지며 정확으로 표시되지 않습니다 (simulate --per-request: "
              "행마다 범위와 그 종류). vLLM의 요청별 카운터(--per-request-spec-decode-metrics detailed)가 있는 로그라면 "
              "범위가 보장됩니다"},
    "simulate.n.open_tails_guaranteed": {
        "en": "{n} of {total} outputs end while the final draft still matched: the server's final-step counts say what it "
              "accepted and learned past those ends, but for the token after each ({tail} in all), which no log holds; the "
              "acceptance lies in [{lo}, {hi}] (guaranteed bounds: the server's counts lie inside), and {inexact} of "
              "{total} requests' counts are not exact (mean width {width} accepted tokens) (simulate --per-request: each "
              "row's bounds)",
        "ko": "출력 {total}개 중 {n}개가 마지막 초안이 아직 일치하는 채로 끝납니다: 서버의 마지막 스텝 카운트가 그 끝 "
              "너머에서 수락하고 학습한 것을 알려 주지만, 각 끝 다음의 토큰 (모두 {tail}개)은 어떤 로그에도 없습니다. "
              "수락률은 [{lo}, {hi}] 안에 있고 (보장된 범위: 서버의 카운트가 그 안에 있음), 요청 {total}개 중 "
              "{inexact}개의 카운트는 정확하지 않습니다 (평균 폭: 수락 토큰 {width}개) (simulate --per-request: 행마다 범위)"},
    "simulate.n.target_mismatch": {
        "en": "{n} of {total} greedy logged outputs are not what the target as loaded emits (the median first "
              "difference at output token {first}): the log was made by another model, or by other numerics (a "
              "kernel, a dtype); those rows are not exact (simulate --per-request: target_mismatch)",
        "ko": "그리디로 기록된 출력 {total}개 중 {n}개는 불러온 타깃이 내는 출력과 다릅니다 (처음 달라지는 출력 토큰 위치의 "
              "중앙값: {first}): 로그를 다른 모델이나 다른 수치 계산(커널, dtype)이 만들었습니다. 그 행들은 정확하지 "
              "않습니다 (simulate --per-request: target_mismatch)"},
    "simulate.n.final_bounds": {
        "en": "{n} of {total} outputs end inside a draft that still matched: a server also counts the draft tokens it "
              "accepted past the end, which no log shows, so the acceptance lies in [{lo}, {hi}] (guaranteed bounds; the "
              "figures above are the low end; simulate --per-request: each row's bounds)",
        "ko": "출력 {total}개 중 {n}개가 아직 일치하는 초안 안에서 끝납니다: 서버는 끝 너머에서 수락한 초안 토큰도 세는데 "
              "어떤 로그에도 보이지 않으므로, 수락률은 [{lo}, {hi}] 안에 있습니다 (보장된 범위; 위의 수치는 하한; "
              "simulate --per-request: 행마다 범위)"},
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
    "simulate.n.tool_calls_template": {
        "en": "{n} logged response(s) held OpenAI tool_calls: replayed as the text {tok}'s chat template writes those calls "
              "(approximate unless the log has output token ids)",
        "ko": "기록된 응답 {n}개에 OpenAI tool_calls가 있습니다: {tok}의 채팅 템플릿이 그 호출을 쓰는 텍스트로 재생했습니다 "
              "(로그에 출력 토큰 ID가 없으면 근사치)"},
    "simulate.n.tool_calls_hermes": {
        "en": "{n} logged response(s) held OpenAI tool_calls: replayed as <tool_call> JSON text ({tok} has no chat template; "
              "approximate unless the log has output token ids — pass --tokenizer with your model's directory)",
        "ko": "기록된 응답 {n}개에 OpenAI tool_calls가 있습니다: <tool_call> JSON 텍스트로 재생했습니다 ({tok}에 채팅 템플릿이 "
              "없음; 로그에 출력 토큰 ID가 없으면 근사치 — 모델 디렉터리를 --tokenizer로 넘기세요)"},
    "simulate.e.nothing": {
        "en": "nothing to replay in {files} ({why}): simulate replays the outputs a model logged, so it needs each "
              "request's response (OpenAI JSONL with a response, a Batch API output file, ShareGPT with assistant turns, "
              "a trace export; see specgauge simulate --help); a file of prompts only is for specgauge bench",
        "ko": "{files}에 재생할 것이 없습니다 ({why}): simulate는 모델이 기록한 출력을 재생하므로 요청마다 응답이 필요합니다 "
              "(응답이 있는 OpenAI JSONL, Batch API 출력 파일, assistant 턴이 있는 ShareGPT, 트레이스 내보내기; "
              "specgauge simulate --help 참고). 프롬프트만 있는 파일은 specgauge bench용입니다"},
    "simulate.e.no_requests": {"en": "no requests", "ko": "요청 없음"},
    "simulate.e.skips": {"en": "{n} request(s) with {why}", "ko": "{why}인 요청 {n}개"},
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
