"""Catalogue entries of bench's replay-vs-live check (``stats/replay_check.py``, ``offline/schedule.py``):
its reasons, notes and gap summaries are stored in English in ``summary.json`` (``en``) and shown with
``translate``; the bench console's lines on it (``report/bench_console.py``) are ``ENTRIES``. Method
names, request ids, flags and the server's own error text stay as they are."""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {
    "rc.not_run": {"en": "Replay check: not run ({why})", "ko": "재생 검사: 실행 안 함 ({why})"},
    "rc.gap": {"en": "Replay check ({method}, k={k}): GAP: {summary}", "ko": "재생 검사 ({method}, k={k}): 차이 있음: {summary}"},
    "rc.match": {"en": "Replay check ({method}, k={k}): {m} of {n} requests equal the replay of their own outputs (server {srv}, replay {rep})",
                 "ko": "재생 검사 ({method}, k={k}): 요청 {n}개 중 {m}개가 자기 출력의 재생과 같음 (서버 {srv}, 재생 {rep})"},
    "rc.totals": {"en": "Replay check ({method}, k={k}): the run's totals agree with the replay of its outputs (server {srv}, replay {rep}); "
                        "not checked per request: the server gave no per-request counts (start it with --per-request-spec-decode-metrics)",
                  "ko": "재생 검사 ({method}, k={k}): 실행 전체 합계가 출력의 재생과 맞음 (서버 {srv}, 재생 {rep}); "
                        "요청별로는 검사하지 않음: 서버가 요청별 카운트를 주지 않음 (--per-request-spec-decode-metrics로 서버를 시작할 것)"},
    "rc.no_counts": {"en": "Replay check ({method}, k={k}): not judged: the server gave neither per-request counts nor spec-decode counters "
                           "(replay {rep}; start it with --per-request-spec-decode-metrics)",
                     "ko": "재생 검사 ({method}, k={k}): 판정하지 않음: 서버가 요청별 카운트도 추측 디코딩 카운터도 주지 않음 "
                           "(재생 {rep}; --per-request-spec-decode-metrics로 서버를 시작할 것)"},
    "rc.unpaired": {"en": "  {n} request(s) came without per-request counts and were not compared",
                    "ko": "  요청 {n}개는 요청별 카운트 없이 와서 비교하지 않음"},
    "rc.uncertain": {"en": "  {n} request(s) the replay cannot vouch for (suffix cache: see notes)",
                     "ko": "  재생이 보증할 수 없는 요청 {n}개 (suffix 캐시: 참고 사항을 볼 것)"},
}

STORED: Entries = {
    # why the check did not run
    "rc.r.no_config": {"en": "the speculative config is unknown: the server does not state it; pass bench --speculative-config '<the JSON the server runs with>'",
                       "ko": "추측 디코딩 설정을 알 수 없음: 서버가 밝히지 않음; bench --speculative-config '<서버가 쓰는 JSON>'을 줄 것"},
    "rc.r.bad_config": {"en": "speculative config ({source}) not understood: {error}", "ko": "추측 디코딩 설정({source})을 이해하지 못함: {error}"},
    "rc.r.hidden": {"en": "method {method} drafts from the target's hidden states or by sampling: no replay from outputs alone",
                    "ko": "방법 {method}는 대상 모델의 은닉 상태나 샘플링으로 드래프트함: 출력만으로는 재생할 수 없음"},
    "rc.r.synthetic": {"en": "the server accepts drafts at a set rate (rejection_sample_method: synthetic): its acceptance measures the cost side, not the drafter; nothing to check against the replay",
                       "ko": "서버가 정해진 비율로 드래프트를 수락함 (rejection_sample_method: synthetic): 수락률은 드래프터가 아니라 비용 쪽을 잼; 재생과 비교할 것이 없음"},
    "rc.r.no_draft_dir": {"en": "the draft model {model} is not a directory here: copy it here to replay it",
                          "ko": "드래프트 모델 {model}이(가) 여기의 디렉터리가 아님: 재생하려면 여기로 복사할 것"},
    "rc.r.no_ids": {"en": "the server returned no token ids (vLLM >= 0.10.2 returns them for return_token_ids; the embedded server does): nothing to replay",
                    "ko": "서버가 토큰 ID를 돌려주지 않음 (vLLM >= 0.10.2는 return_token_ids에 돌려주고 내장 서버도 돌려줌): 재생할 것이 없음"},
    "rc.r.no_drafter": {"en": "cannot build the {method} drafter: {error}", "ko": "{method} 드래프터를 만들 수 없음: {error}"},
    "rc.r.failed": {"en": "request {id}: the {method} replay failed: {error}", "ko": "요청 {id}: {method} 재생 실패: {error}"},
    # notes
    "rc.n.no_ids": {"en": "{n} successful request(s) came without token ids and were not replayed",
                    "ko": "성공한 요청 {n}개가 토큰 ID 없이 와서 재생하지 않음"},
    "rc.n.engine_order": {"en": "suffix replayed in the embedded engine's own call order over all {n} requests it admitted (warm-ups included): exact, overlapping requests too",
                          "ko": "suffix를 내장 엔진 자체의 호출 순서로, 엔진이 받은 요청 {n}개 전부(워밍업 포함)에 걸쳐 재생함: 겹친 요청까지 정확함"},
    "rc.n.warmup_no_ids": {"en": "warm-up {id} left no token ids: what it taught the server's cache is unknown",
                           "ko": "워밍업 {id}이(가) 토큰 ID를 남기지 않음: 서버 캐시가 그로부터 배운 것을 알 수 없음"},
    "rc.n.uncertain_why": {"en": "{why}; suffix rows are uncertain (never a gap)", "ko": "{why}; suffix 행은 불확실함 (차이로 보지 않음)"},
    "rc.n.overlap": {"en": "requests overlapped in time: the server's suffix cache saw their tokens interleaved step by step, the replay request by request, so suffix rows are uncertain (never a gap)",
                     "ko": "요청이 시간상 겹침: 서버의 suffix 캐시는 토큰을 스텝마다 섞어서 보았고 재생은 요청 단위로 보았으므로 suffix 행은 불확실함 (차이로 보지 않음)"},
    "rc.n.no_counts": {"en": "the server gave no per-request counts (vLLM: --per-request-spec-decode-metrics): only the run's totals can be compared",
                       "ko": "서버가 요청별 카운트를 주지 않음 (vLLM: --per-request-spec-decode-metrics): 실행 전체 합계만 비교할 수 있음"},
    # gap summaries
    "rc.g.requests": {"en": "the server's acceptance falls short of what its own outputs allow on {k} of {n} requests: it accepted {srv} of its draft tokens, the replay of the same outputs through the same drafter {rep}",
                      "ko": "요청 {n}개 중 {k}개에서 서버의 수락이 자기 출력이 허용하는 것에 못 미침: 서버는 드래프트 토큰의 {srv}를 수락했고, 같은 출력을 같은 드래프터로 재생하면 {rep}"},
    "rc.g.totals": {"en": "the run's counters ({acc} of {d} draft tokens accepted) differ from the replay of its outputs ({racc} of {rd}, + at most {b} past the outputs' ends)",
                    "ko": "실행의 카운터(드래프트 토큰 {d}개 중 {acc}개 수락)가 출력의 재생({rd}개 중 {racc}개, 출력 끝 너머 최대 {b}개 추가)과 다름"},
    # one request (rows' detail)
    "rc.d.step": {"en": "step {j}: server drafted/accepted {server}, replay {replay}", "ko": "스텝 {j}: 서버 드래프트/수락 {server}, 재생 {replay}"},
    "rc.d.counts": {"en": "server {sd} drafts / {st} draft tokens / {sa} accepted; replay {rd} / {rt} / {ra} (+ at most {b} past the output's end)",
                    "ko": "서버 드래프트 {sd}회 / 드래프트 토큰 {st}개 / 수락 {sa}개; 재생 {rd} / {rt} / {ra} (출력 끝 너머 최대 {b}개 추가)"},
    "rc.d.nothing": {"en": "nothing", "ko": "없음"},
    # offline/schedule.py: why the engine's order cannot be replayed
    "rc.s.no_schedule": {"en": "request {id} carries no engine schedule (only the embedded server reports it)",
                         "ko": "요청 {id}에 엔진 스케줄이 없음 (내장 서버만 알림)"},
    "rc.s.no_ids": {"en": "request {id} came without token ids", "ko": "요청 {id}이(가) 토큰 ID 없이 옴"},
    "rc.s.none": {"en": "no request to schedule", "ko": "스케줄할 요청이 없음"},
    "rc.s.shared": {"en": "two requests share an admission number (records of different servers)",
                    "ko": "두 요청의 접수 번호가 같음 (서로 다른 서버의 기록)"},
    "rc.s.missing": {"en": "the server admitted {n} request(s) these records do not hold (earlier runs, failed or aborted requests): what they taught its cache is unknown",
                     "ko": "서버가 이 기록에 없는 요청 {n}개를 받았음 (이전 실행, 실패했거나 중단된 요청): 그 요청들이 캐시에 가르친 것을 알 수 없음"},
}
