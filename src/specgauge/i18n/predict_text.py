"""Catalogue entries of ``specgauge calibrate`` and ``specgauge predict`` (console:
``report/predict_console.py``), English and Korean; merged into ``catalogue.MESSAGES``.

``STORED``: the step-cost law's parameter descriptions (``predict.law.DESCRIPTIONS``) and the notes the
fit and the predictor write into ``cost_profile.json`` / predictions in English; shown with
``translate``. Parameter names (``a``, ``host[ngram]``) and the shape names stay as they are.
"""

from __future__ import annotations

from specgauge.i18n.entries import Entries

ENTRIES: Entries = {
    "predict.law_title": {"en": "Step-cost law (verification shape: {shape}); milliseconds, 95 % band from {n} refits on resampled requests",
                          "ko": "스텝 비용 법칙 (검증 형태: {shape}); 단위 ms, 재표본 요청으로 {n}번 다시 적합한 95 % 범위"},
    "predict.c.parameter": {"en": "parameter", "ko": "매개변수"},
    "predict.c.value": {"en": "value", "ko": "값"},
    "predict.c.meaning": {"en": "meaning", "ko": "의미"},
    "predict.ell": {"en": "HTTP round trip: request sent -> admitted, and last chunk -> client", "ko": "HTTP 왕복: 요청 전송 -> 수락, 마지막 청크 -> 클라이언트"},
    "predict.shapes": {"en": "shapes (squared error, lower fits better): {shapes}", "ko": "형태별 제곱 오차 (낮을수록 잘 맞음): {shapes}"},
    "predict.shape_conf": {"en": "; {shape} fits better in {conf} of resamples", "ko": "; 재표본의 {conf}에서 {shape}가 더 잘 맞음"},
    "predict.residuals": {"en": "residuals: {rows} rows ({ttft} TTFT), {dropped} dropped as outliers; step RMSE {rmse} ms on a mean step of {mean} ms (relative {rel})",
                          "ko": "잔차: {rows}행 (TTFT {ttft}행), 이상치로 {dropped}행 제외; 평균 스텝 {mean} ms에 대해 스텝 RMSE {rmse} ms (상대 {rel})"},
    "predict.per_run": {"en": "  {run}: predicted / measured decode time {ratio} over {n} requests", "ko": "  {run}: 요청 {n}개의 예측 / 실측 디코드 시간 {ratio}"},
    "predict.range": {"en": "measured range: up to {tpf} tokens per forward, batch up to {b}, concurrency {cs}; methods {methods}",
                      "ko": "측정 범위: forward당 최대 {tpf} 토큰, 배치 최대 {b}, 동시성 {cs}; 방법 {methods}"},
    "predict.replay_check": {"en": "  replay vs server {run}: acceptance {rep} replayed, {live} live; {same}/{n} requests identical",
                             "ko": "  재생 대 서버 {run}: 수락률 재생 {rep}, 실측 {live}; 요청 {n}개 중 {same}개 동일"},
    "predict.note": {"en": "note: {text}", "ko": "참고: {text}"},
    "predict.cal_title": {"en": "Calibration cells: predicted beside measured speedup (compare's statistic vs no speculation)",
                          "ko": "보정 셀: 예측 속도 향상과 실측 속도 향상 (compare의 통계량, 추측 디코딩 없음 대비)"},
    "predict.c.config": {"en": "config", "ko": "구성"},
    "predict.c.concurrency": {"en": "concurrency", "ko": "동시성"},
    "predict.c.predicted": {"en": "predicted", "ko": "예측"},
    "predict.c.band": {"en": "band", "ko": "범위"},
    "predict.c.measured": {"en": "measured", "ko": "실측"},
    "predict.c.ci": {"en": "95 % CI", "ko": "95 % 신뢰구간"},
    "predict.c.error": {"en": "error", "ko": "오차"},
    "predict.profile_path": {"en": "cost profile: {path}", "ko": "비용 프로파일: {path}"},
    "predict.title": {"en": "Predicted from the calibrated step-cost law ({shape} verification; server {model}, calibrated {date})",
                      "ko": "보정된 스텝 비용 법칙으로 예측 ({shape} 검증; 서버 {model}, 보정 {date})"},
    "predict.c.speedup": {"en": "speedup", "ko": "속도 향상"},
    "predict.c.acceptance": {"en": "acceptance", "ko": "수락률"},
    "predict.c.tok_forward": {"en": "tok/forward", "ko": "토큰/forward"},
    "predict.extrapolated": {"en": "extrapolated", "ko": "외삽"},
    "predict.cell_note": {"en": "note ({label}, C={c}): {text}", "ko": "참고 ({label}, C={c}): {text}"},
}

STORED: Entries = {
    # predict/law.DESCRIPTIONS
    "predict.law.a": {"en": "per step", "ko": "스텝당"},
    "predict.law.r": {"en": "per request in the decode batch", "ko": "디코드 배치의 요청당"},
    "predict.law.b": {"en": "per token through the target's decode forward", "ko": "대상 모델 디코드 forward를 지나는 토큰당"},
    "predict.law.c": {"en": "per context token in the decode batch", "ko": "디코드 배치의 문맥 토큰당"},
    "predict.law.p": {"en": "per prefill token", "ko": "프리필 토큰당"},
    "predict.law.q": {"en": "per prefilled request", "ko": "프리필한 요청당"},
    "predict.law.e": {"en": "per token emitted by a decode step (B + accepted drafts)", "ko": "디코드 스텝이 내보낸 토큰당 (B + 수락된 드래프트)"},
    "predict.law.v": {"en": "per step that verifies drafts", "ko": "드래프트를 검증하는 스텝당"},
    "predict.law.g": {"en": "per sampled (T > 0) request in the decode batch", "ko": "디코드 배치의 샘플링(T > 0) 요청당"},
    "predict.law.gv": {"en": "per sampled request whose drafts a step verifies", "ko": "스텝이 드래프트를 검증하는 샘플링 요청당"},
    "predict.law.gd": {"en": "per draft token of a sampled request", "ko": "샘플링 요청의 드래프트 토큰당"},
    "predict.law.host": {"en": "per request per step (drafter lookup on the host)", "ko": "스텝마다 요청당 (호스트의 드래프터 조회)"},
    "predict.law.host_step": {"en": "per decode step of a speculative server (its proposer's call, whatever the batch)",
                              "ko": "추측 디코딩 서버의 디코드 스텝당 (배치와 무관한 제안기 호출)"},
    "predict.law.draft_step": {"en": "per draft position per step", "ko": "스텝마다 드래프트 위치당"},
    "predict.law.draft_req": {"en": "per draft position per request", "ko": "요청마다 드래프트 위치당"},
    "predict.law.draft_prefill": {"en": "per prefill token (the draft model's own prefill)", "ko": "프리필 토큰당 (드래프트 모델 자체 프리필)"},
    "predict.law.draft_fixed": {"en": "per drafting step, whatever k is", "ko": "k와 무관하게 드래프트 스텝당"},
    "predict.law.b2": {"en": "per token through the target's forward past the knee", "ko": "무릎점을 넘은 대상 모델 forward의 토큰당"},
    "predict.law.knee": {"en": "tokens per forward where the forward's cost starts to grow (not a cost)",
                         "ko": "forward 비용이 늘기 시작하는 forward당 토큰 수 (비용이 아님)"},
    "predict.law.host_par": {"en": "per request per step, host proposer overlapping the device step (counts where it exceeds it)",
                             "ko": "스텝마다 요청당, 장치 스텝과 겹치는 호스트 제안기 (장치 스텝을 넘는 부분만 셈)"},
    "predict.law.host_par0": {"en": "per step, host proposer overlapping the device step (its fixed part)",
                              "ko": "스텝당, 장치 스텝과 겹치는 호스트 제안기 (고정 부분)"},
}
