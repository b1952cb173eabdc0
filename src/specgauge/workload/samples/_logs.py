"""Segment ``agent_logs``: an application / agent log excerpt -> root-cause analysis.

The logs (timestamps, levels, request ids, tracebacks) are invented incidents with background noise.
The analysis names the root cause, quotes the decisive log lines verbatim as evidence, gives the time
of the first warning and error, and proposes a fix: long verbatim copies of whole log lines.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ._common import Example, Lang, hex_id

Event = tuple[str, str, bool]  # (level or "TB" for a traceback line, message, is evidence)


def _db_pool(rng: random.Random) -> dict[str, Any]:
    pool, job = rng.choice([20, 32, 50]), f"exp-{hex_id(rng, 4)}"
    return {"service": "checkout-api", "slots": {"pool": pool, "job": job}, "events": [
        ("INFO", f"report.export started job={job} rows=1.2M batch=500", True),
        ("WARN", f"db.pool: in_use={pool - 4}/{pool} waiters=3", False),
        ("WARN", f"db.pool: in_use={pool}/{pool} waiters=27", False),
        ("ERROR", f"db.pool: acquire timed out after 30.0s (in_use={pool}/{pool}, waiters=112)", True),
        ("TB", "Traceback (most recent call last):", False),
        ("TB", '  File "/app/checkout/handlers.py", line 212, in create_order', False),
        ("TB", "    with db.session() as s:", False),
        ("TB", "PoolTimeout: acquire timed out after 30.0s", False),
        ("ERROR", "POST /api/v1/checkout 503 30012ms", True),
    ], "root": (
        "the connection pool ({pool}/{pool} in use) was exhausted by the report export job {job}, which holds connections for its whole run; checkout requests then waited 30 s for a connection and failed with 503.",
        "리포트 내보내기 작업 {job}이 실행 내내 커넥션을 점유하면서 커넥션 풀({pool}/{pool} 사용 중)이 고갈되었고, 체크아웃 요청이 커넥션을 30초 동안 기다리다 503으로 실패했습니다.",
    ), "fix": (
        "run exports on a read replica or a separate small pool, set a statement timeout, and alert when pool waiters stay above 0 for a minute.",
        "내보내기 작업은 읽기 전용 복제본이나 별도의 작은 풀에서 실행하고, 쿼리 타임아웃을 설정하며, 풀 대기자가 1분 이상 0보다 크면 알림을 보내도록 하세요.",
    )}


def _upstream_timeout(rng: random.Random) -> dict[str, Any]:
    fails = rng.choice([10, 20, 50])
    return {"service": "payments-svc", "slots": {"fails": fails}, "events": [
        ("WARN", "paygate client: slow response 4870ms (budget 2000ms)", True),
        ("ERROR", "paygate client: read timeout after 5000ms host=paygate.internal:8443", True),
        ("ERROR", "POST /v2/charges 504 5003ms code=UPSTREAM_TIMEOUT", False),
        ("WARN", f"circuit breaker 'paygate' state=OPEN failures={fails}/{fails} window=60s", True),
        ("ERROR", "POST /v2/charges 502 2ms code=CIRCUIT_OPEN", True),
        ("INFO", "circuit breaker 'paygate' state=HALF_OPEN probe=1", False),
    ], "root": (
        "the upstream payment gateway paygate.internal became slow and then timed out at 5000 ms; after {fails} failures in 60 s the circuit breaker opened and charges failed fast with 502. The service itself is healthy, the fault is upstream.",
        "상위 결제 게이트웨이 paygate.internal의 응답이 느려지다가 5000ms 타임아웃이 발생했고, 60초 동안 {fails}회 실패하자 서킷 브레이커가 열려 결제 요청이 즉시 502로 실패했습니다. 서비스 자체는 정상이며 문제는 상위 시스템에 있습니다.",
    ), "fix": (
        "escalate to the gateway provider, make sure retried charges carry idempotency keys so nothing is billed twice, and queue charges while the breaker is open.",
        "게이트웨이 제공사에 문의하고, 재시도되는 결제에 멱등성 키를 붙여 이중 청구를 막으며, 서킷이 열려 있는 동안에는 결제 요청을 큐에 쌓아 두세요.",
    )}


def _oom(rng: random.Random) -> dict[str, Any]:
    b, pid = rng.randint(100, 900), rng.randint(1000, 9999)
    return {"service": "ingest-worker", "slots": {"pid": pid}, "events": [
        ("INFO", f"batch b-{b} loaded rows=50000 rss=1.1GiB", True),
        ("INFO", f"batch b-{b + 1} loaded rows=50000 rss=1.9GiB", False),
        ("WARN", "memory high watermark: rss=3.2GiB limit=4.0GiB", True),
        ("INFO", f"batch b-{b + 2} loaded rows=50000 rss=3.7GiB", False),
        ("ERROR", f"oom-killer: killed pid {pid} (ingest-worker) rss=4.0GiB limit=4.0GiB", True),
        ("INFO", "supervisor: restarting ingest-worker (restart 3/5)", False),
    ], "root": (
        "memory grows by about 0.8 GiB per batch and is never released, because the worker keeps every loaded batch in memory; at the 4.0 GiB container limit the kernel kills pid {pid} and the supervisor restarts it, so the cycle repeats.",
        "워커가 읽어 들인 배치를 모두 메모리에 쌓아 두기 때문에 배치마다 메모리가 약 0.8GiB씩 늘고 해제되지 않습니다. 컨테이너 한도 4.0GiB에 도달하면 커널이 pid {pid}를 종료하고 supervisor가 재시작하면서 같은 일이 반복됩니다.",
    ), "fix": (
        "release each batch once it is written (stream rows instead of accumulating them), or lower the batch size, and export rss per batch as a metric.",
        "배치를 기록한 뒤 바로 해제하거나(누적하지 말고 스트리밍 처리) 배치 크기를 줄이고, 배치별 rss를 메트릭으로 수집하세요.",
    )}


def _schema_keyerror(rng: random.Random) -> dict[str, Any]:
    evt = f"evt_{hex_id(rng, 10)}"
    return {"service": "webhook-handler", "slots": {"evt": evt}, "events": [
        ("INFO", "POST /webhooks/payments 200 12ms api_version=2024-11", False),
        ("INFO", f"received event {evt} type=charge.succeeded api_version=2025-06", True),
        ("ERROR", f"unhandled exception while processing event {evt}", False),
        ("TB", "Traceback (most recent call last):", False),
        ("TB", '  File "/app/handlers/webhook.py", line 88, in handle_event', True),
        ("TB", '    amount = payload["data"]["amount"]', True),
        ("TB", "KeyError: 'amount'", True),
        ("ERROR", "POST /webhooks/payments 500 9ms", False),
        ("WARN", f"partner retry: event {evt} attempt 4/8", False),
    ], "root": (
        "events sent with api_version=2025-06 no longer carry data.amount, so handle_event raises KeyError: 'amount' at webhook.py line 88 and answers 500; the partner keeps retrying {evt}.",
        "api_version=2025-06으로 전송된 이벤트에는 data.amount 필드가 없어서 webhook.py 88행의 handle_event에서 KeyError: 'amount'가 발생하고 500을 반환합니다. 파트너는 {evt} 이벤트를 계속 재전송하고 있습니다.",
    ), "fix": (
        "read the amount according to api_version (the new version calls it amount_minor) and pin the webhook API version in the partner dashboard until the handler supports it.",
        "api_version에 따라 금액 필드를 읽도록 수정하고(새 버전은 amount_minor), 핸들러가 대응할 때까지 파트너 대시보드에서 웹훅 API 버전을 고정하세요.",
    )}


def _rate_limited(rng: random.Random) -> dict[str, Any]:
    depth = rng.randint(9000, 40000)
    return {"service": "notify-worker", "slots": {"depth": depth}, "events": [
        ("INFO", "sent email template=order_shipped to=***@example.com", False),
        ("WARN", "mailrelay responded 429 Too Many Requests retry_after=30s", True),
        ("WARN", "retrying immediately (attempt 2/10)", True),
        ("WARN", "mailrelay responded 429 Too Many Requests retry_after=60s", False),
        ("WARN", "retrying immediately (attempt 3/10)", False),
        ("ERROR", f"giving up after 10 attempts: queue=emails depth={depth}", True),
    ], "root": (
        "the worker retries immediately instead of honouring retry_after, so every 429 from mailrelay turns into more requests and the provider lengthens its back-off; the email queue backs up to {depth}.",
        "워커가 retry_after를 지키지 않고 즉시 재시도하기 때문에 mailrelay의 429 응답이 더 많은 요청으로 이어지고 제공사는 대기 시간을 늘립니다. 그 결과 이메일 큐가 {depth}건까지 쌓였습니다.",
    ), "fix": (
        "honour retry_after with jitter, cap concurrency per provider, and add a token bucket that matches the plan's rate limit.",
        "retry_after를 지터와 함께 준수하고, 제공사별 동시 요청 수를 제한하며, 요금제 한도에 맞춘 토큰 버킷을 추가하세요.",
    )}


def _cert_expired(rng: random.Random) -> dict[str, Any]:
    day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return {"service": "api-gateway", "slots": {"day": day}, "events": [
        ("WARN", "cert-renewer: renewal for ledger-svc.internal failed: DNS challenge timeout", True),
        ("INFO", "GET /health 200 1ms", False),
        ("ERROR", f"upstream ledger-svc: TLS handshake failed: certificate expired at {day}T00:00:00Z", True),
        ("ERROR", "GET /api/v1/ledger/balances 502 14ms upstream=ledger-svc", True),
        ("ERROR", "GET /api/v1/ledger/entries 502 11ms upstream=ledger-svc", False),
    ], "root": (
        "the TLS certificate of ledger-svc.internal expired at {day}T00:00:00Z; its automatic renewal had failed with a DNS challenge timeout, so the gateway rejects the handshake and returns 502 for every ledger route.",
        "ledger-svc.internal의 TLS 인증서가 {day}T00:00:00Z에 만료되었습니다. 자동 갱신이 DNS 챌린지 타임아웃으로 실패했기 때문에 게이트웨이가 핸드셰이크를 거부하고 모든 ledger 경로에 502를 반환합니다.",
    ), "fix": (
        "renew the certificate by hand now, fix the DNS challenge for cert-renewer, and alert on certificates that expire within 14 days.",
        "지금 인증서를 수동으로 갱신하고, cert-renewer의 DNS 챌린지 문제를 해결하며, 만료 14일 전부터 알림이 가도록 설정하세요.",
    )}


def _disk_full(rng: random.Random) -> dict[str, Any]:
    seg = f"seg_{rng.randint(100, 9999):04d}"
    return {"service": "search-indexer", "slots": {"seg": seg}, "events": [
        ("INFO", "snapshot job: 0 snapshots pruned (retention policy disabled)", True),
        ("WARN", "disk usage /var/lib/indexer 91%", False),
        ("WARN", "disk usage /var/lib/indexer 97%", True),
        ("ERROR", f"segment merge failed: [Errno 28] No space left on device: '/var/lib/indexer/{seg}.tmp'", True),
        ("ERROR", "index write rejected: read-only mode engaged (disk watermark 95% exceeded)", True),
    ], "root": (
        "the data volume filled up because old snapshots are no longer pruned (retention policy disabled); above the 95% watermark the index went read-only and the merge of {seg} failed with errno 28.",
        "보존 정책이 꺼져 있어 오래된 스냅숏이 삭제되지 않으면서 데이터 볼륨이 가득 찼습니다. 사용률이 95% 기준을 넘자 인덱스가 읽기 전용으로 전환되었고 {seg} 병합이 errno 28로 실패했습니다.",
    ), "fix": (
        "re-enable snapshot retention and delete old snapshots, then lift read-only mode; alert on disk usage at 85%.",
        "스냅숏 보존 정책을 다시 켜고 오래된 스냅숏을 삭제한 뒤 읽기 전용 모드를 해제하세요. 디스크 사용률 85%에서 알림이 가도록 설정하세요.",
    )}


def _agent_loop(rng: random.Random) -> dict[str, Any]:
    run, mt = f"r-{hex_id(rng, 6)}", rng.choice([48, 64, 96])
    return {"service": "support-agent", "slots": {"run": run, "mt": mt}, "events": [
        ("INFO", f"agent run {run} step 1 tool=search_orders ok 230ms", False),
        ("INFO", f"llm call run={run} step=2 finish_reason=length completion_tokens={mt} max_tokens={mt}", True),
        ("WARN", f"agent run {run} step 2 tool=create_ticket arguments not valid JSON: Unterminated string starting at: line 1 column 48", True),
        ("INFO", f"agent run {run} step 3 re-prompting model with parser error", False),
        ("INFO", f"llm call run={run} step=4 finish_reason=length completion_tokens={mt} max_tokens={mt}", False),
        ("ERROR", f"agent run {run} aborted: max_steps=8 reached without final answer", True),
    ], "root": (
        "the model's tool-call arguments are cut off at max_tokens={mt} (finish_reason=length), so create_ticket receives truncated JSON; the agent re-prompts, hits the same limit, and run {run} aborts at max_steps=8.",
        "모델의 도구 호출 인자가 max_tokens={mt}에서 잘려(finish_reason=length) create_ticket에 불완전한 JSON이 전달됩니다. 에이전트가 다시 프롬프트를 보내도 같은 한도에 걸려 실행 {run}은 max_steps=8에서 중단됩니다.",
    ), "fix": (
        "raise max_tokens for tool-calling steps (for example to 256) or use JSON-constrained decoding, and treat finish_reason=length as its own error instead of retrying.",
        "도구 호출 단계의 max_tokens를 늘리거나(예: 256) JSON 제약 디코딩을 사용하고, finish_reason=length는 재시도하지 말고 별도 오류로 처리하세요.",
    )}


def _config_missing(rng: random.Random) -> dict[str, Any]:
    ver, pod = f"2025.{rng.randint(1, 12)}.{rng.randint(0, 9)}", f"orders-api-{hex_id(rng, 4)}"
    return {"service": "orders-api", "slots": {"ver": ver, "pod": pod}, "events": [
        ("INFO", f"deploy: orders-api version {ver} rolled out to 3/3 pods", True),
        ("ERROR", "startup failed: KeyError: 'REDIS_URL'", True),
        ("TB", "Traceback (most recent call last):", False),
        ("TB", '  File "/app/orders/settings.py", line 41, in <module>', False),
        ("TB", '    REDIS_URL = os.environ["REDIS_URL"]', True),
        ("WARN", f"pod {pod} restarted (CrashLoopBackOff, restarts=6)", True),
    ], "root": (
        "version {ver} reads REDIS_URL at import time, but the variable is not set in the deployment, so every pod (e.g. {pod}) crashes on start and ends in CrashLoopBackOff.",
        "버전 {ver}은 import 시점에 REDIS_URL을 읽는데 배포 환경에 이 변수가 없어서, 모든 파드(예: {pod})가 시작하자마자 종료되고 CrashLoopBackOff 상태가 됩니다.",
    ), "fix": (
        "add REDIS_URL to the deployment's environment or secret (or roll back), and check required settings in CI before a rollout.",
        "배포 환경 변수나 시크릿에 REDIS_URL을 추가하고(또는 롤백하고), 배포 전에 CI에서 필수 설정을 검사하세요.",
    )}


SCENARIOS: list[Callable[[random.Random], dict[str, Any]]] = [
    _db_pool, _upstream_timeout, _oom, _schema_keyerror, _rate_limited, _cert_expired, _disk_full,
    _agent_loop, _config_missing,
]
NOISE = [
    "GET /healthz 200 1ms", "GET /api/v1/orders/{oid} 200 43ms", "cache hit ratio=0.93 keys=18211",
    "scheduler: 0 jobs pending", "GET /metrics 200 4ms", "POST /api/v1/events 202 8ms",
    "config reloaded from /etc/app/config.yaml", "gc pause 12ms heap=512MiB",
]

TEXT = {
    "en": {
        "system": "You are an on-call assistant for the platform team. You read logs carefully and quote the exact lines you rely on.",
        "ask": ["Here are logs from {service} around the incident {inc}. What is the root cause? Quote the relevant lines.",
                "We got paged for {service} ({inc}). Can you find the root cause in these logs and suggest a fix? Please quote the log lines.",
                "Analyse this log excerpt from {service}. Explain the root cause, cite the evidence verbatim, and propose a fix."],
        "answer": "Root cause: {root}\n\nEvidence:\n{evidence}\n\nTimeline: {timeline}\n\nFix: {fix}",
        "timeline_w": "first warning at {w}, first error at {e}.", "timeline": "first error at {e}.",
        "cap": lambda s: s[:1].upper() + s[1:],
    },
    "ko": {
        "system": "당신은 플랫폼팀의 온콜 보조 AI입니다. 로그를 꼼꼼히 읽고, 근거로 삼은 줄은 그대로 인용합니다.",
        "ask": ["{service} 장애({inc}) 시간대의 로그입니다. 근본 원인이 무엇인지 분석하고, 근거가 되는 로그 줄을 그대로 인용해 주세요.",
                "{service}에서 알림({inc})이 왔습니다. 아래 로그에서 근본 원인을 찾고 해결 방법을 제안해 주세요. 로그 줄은 그대로 인용해 주세요.",
                "{service} 로그 발췌본입니다. 근본 원인을 설명하고, 근거 로그를 원문 그대로 인용한 뒤 조치 방안을 알려주세요."],
        "answer": "근본 원인: {root}\n\n근거 로그:\n{evidence}\n\n타임라인: {timeline}\n\n조치: {fix}",
        "timeline_w": "{w}에 첫 경고, {e}에 첫 오류가 발생했습니다.", "timeline": "{e}에 첫 오류가 발생했습니다.",
        "cap": lambda s: s,
    },
}


def _stamp(t_ms: int, style: int) -> str:
    s, ms = divmod(t_ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    if style == 0:
        return f"2025-06-14T{h % 24:02d}:{m:02d}:{s:02d}.{ms:03d}Z"
    return f"2025-06-14 {h % 24:02d}:{m:02d}:{s:02d},{ms:03d}"


def build(rng: random.Random, lang: Lang) -> Example:
    txt = TEXT[lang]
    sc = rng.choice(SCENARIOS)(rng)
    style = rng.randrange(2)
    t = rng.randint(0, 80_000_000)
    service = sc["service"]
    rendered: list[str] = []
    evidence: list[str] = []
    first: dict[str, str] = {}
    incident_req = hex_id(rng)
    for level, msg, key in sc["events"]:
        if level != "TB":  # a traceback line belongs to the line before it, at the same instant
            for _ in range(rng.choice([0, 0, 1, 1, 2])):
                t += rng.randint(50, 4000)
                noise = rng.choice(NOISE).replace("{oid}", str(rng.randint(2400000, 2599999)))
                rendered.append(_line(_stamp(t, style), "INFO", service, hex_id(rng), noise, style))
            t += rng.randint(20, 9000)
        stamp = _stamp(t, style)
        req = incident_req if rng.random() < 0.7 else hex_id(rng)  # most incident lines share a request id
        line = msg if level == "TB" else _line(stamp, level, service, req, msg, style)
        rendered.append(line)
        if level in ("WARN", "ERROR") and level not in first:
            first[level] = stamp
        if key:
            evidence.append(line.strip())

    inc = f"INC-{rng.randint(1000, 9999)}"
    ask = rng.choice(txt["ask"]).format(service=service, inc=inc)
    user = f"{ask}\n\n```\n" + "\n".join(rendered) + "\n```"
    timeline = (txt["timeline_w"].format(w=first["WARN"], e=first["ERROR"]) if "WARN" in first and "ERROR" in first
                and first["WARN"] < first["ERROR"] else txt["timeline"].format(e=first.get("ERROR", first.get("WARN"))))
    i = 1 if lang == "ko" else 0
    answer = txt["answer"].format(
        root=txt["cap"](sc["root"][i].format(**sc["slots"])),
        evidence="\n".join(f"- `{e}`" for e in evidence),
        timeline=timeline if lang == "ko" else timeline[0].upper() + timeline[1:],
        fix=txt["cap"](sc["fix"][i]),
    )
    messages = [{"role": "system", "content": txt["system"]}, {"role": "user", "content": user}]
    return Example(messages=messages, answer=answer, info={"scenario": sc["service"]})


def _line(stamp: str, level: str, service: str, req: str, msg: str, style: int) -> str:
    if style == 0:
        return f"{stamp} {level:<5} {service} [req={req}] {msg}"
    return f"[{stamp}] {level.replace('WARN', 'WARNING')} {service} req_id={req} - {msg}"
