"""Segment ``code_review``: a Python module or a diff (made-up code) -> review comments.

Each snippet below carries one planted problem (the line, why it is wrong, the corrected line). A review
quotes the offending line verbatim and writes the fix, which is mostly the same line again — the high
copy rate that makes prompt-lookup drafting pay off on review traffic.
Placeholders: ``@e@`` entity (``order``), ``@k@`` its Korean name (``주문``), ``@n@`` a number.
"""

from __future__ import annotations

import random
from typing import Any

from ._common import COMPANIES, Example, Lang, pick_lang

ENTITIES = [("order", "주문"), ("invoice", "청구서"), ("user", "사용자"), ("ticket", "티켓"),
            ("shipment", "배송"), ("payment", "결제"), ("booking", "예약")]

SNIPPETS: list[dict[str, Any]] = [
    {"kind": "bug", "imports": ["TAG_CACHE: dict[str, list[str]] = {}"], "bad": 0, "lines": [
        "def add_@e@_tag(@e@_id, tag, tags=[]):",
        "    tags.append(tag)",
        "    TAG_CACHE[@e@_id] = tags",
        "    return tags"],
     "fix": "def add_@e@_tag(@e@_id, tag, tags=None):",
     "fixed": ["def add_@e@_tag(@e@_id, tag, tags=None):", "    tags = [] if tags is None else tags",
               "    tags.append(tag)", "    TAG_CACHE[@e@_id] = tags", "    return tags"],
     "en": "the default list is created once and shared by every call, so tags from one @e@ leak into the next. Default to `None` and build the list inside.",
     "en_short": "the default list is shared by every call, so tags leak between @e@s.",
     "ko": "기본값 리스트는 함수 정의 시 한 번만 만들어져 모든 호출이 공유하므로, 한 @k@ 건의 태그가 다음 @k@ 건에 섞입니다. 기본값을 `None`으로 두고 함수 안에서 리스트를 만드세요.",
     "ko_short": "기본값 리스트를 모든 호출이 공유해서 @k@ 건끼리 태그가 섞입니다."},
    {"kind": "bug", "imports": ["import json"], "bad": 4, "lines": [
        "def load_@e@_config(path):",
        "    try:",
        "        with open(path) as fh:",
        "            return json.load(fh)",
        "    except:",
        "        return {}"],
     "fix": "    except (FileNotFoundError, json.JSONDecodeError):",
     "en": "a bare `except:` also catches `KeyboardInterrupt` and hides a malformed file behind an empty config. Catch the two errors you expect and log them.",
     "en_short": "a bare `except:` also swallows `KeyboardInterrupt` and hides a malformed file.",
     "ko": "맨 `except:`는 `KeyboardInterrupt`까지 잡고, 잘못된 파일을 빈 설정으로 조용히 덮어버립니다. 예상되는 두 예외만 잡고 로그를 남기세요.",
     "ko_short": "맨 `except:`는 `KeyboardInterrupt`까지 삼키고 잘못된 파일을 숨깁니다."},
    {"kind": "bug", "imports": [], "bad": 2, "lines": [
        "def paginate_@e@s(rows, page_size=@n@):",
        "    pages = []",
        "    for start in range(0, len(rows) - 1, page_size):",
        "        pages.append(rows[start:start + page_size])",
        "    return pages"],
     "fix": "    for start in range(0, len(rows), page_size):",
     "en": "`len(rows) - 1` drops the last row whenever `len(rows) % page_size == 1`, and a single row yields no page at all.",
     "en_short": "`len(rows) - 1` drops the last row when `len(rows) % page_size == 1`.",
     "ko": "`len(rows) - 1` 때문에 `len(rows) % page_size == 1`일 때 마지막 행이 빠지고, 행이 하나뿐이면 페이지가 아예 만들어지지 않습니다.",
     "ko_short": "`len(rows) % page_size == 1`이면 `len(rows) - 1` 때문에 마지막 행이 빠집니다."},
    {"kind": "security", "imports": [], "bad": 1, "lines": [
        "def find_@e@s_by_status(conn, status):",
        "    query = f\"SELECT id, total FROM @e@s WHERE status = '{status}'\"",
        "    return conn.execute(query).fetchall()"],
     "fix": "    query = \"SELECT id, total FROM @e@s WHERE status = ?\"",
     "fixed": ["def find_@e@s_by_status(conn, status):", "    query = \"SELECT id, total FROM @e@s WHERE status = ?\"",
               "    return conn.execute(query, (status,)).fetchall()"],
     "en": "`status` is pasted into the SQL string, so a value like `' OR '1'='1` reads every row (SQL injection). Use a placeholder and call `conn.execute(query, (status,))`.",
     "en_short": "`status` is pasted into the SQL string (SQL injection); use a placeholder.",
     "ko": "`status` 값이 SQL 문자열에 그대로 들어가므로 `' OR '1'='1` 같은 값으로 모든 행을 읽을 수 있습니다(SQL 인젝션). 플레이스홀더를 쓰고 `conn.execute(query, (status,))`로 값을 넘기세요.",
     "ko_short": "`status` 값이 SQL 문자열에 그대로 들어갑니다(SQL 인젝션). 플레이스홀더를 쓰세요."},
    {"kind": "nit", "imports": [], "bad": 1, "lines": [
        "def @e@_discount(@e@):",
        "    if @e@.coupon == None:",
        "        return 0",
        "    return @e@.coupon.percent * @e@.subtotal / 100"],
     "fix": "    if @e@.coupon is None:",
     "en": "compare with `is None`; `==` can call a custom `__eq__` and linters flag it.",
     "en_short": "compare with `is None`, not `==`.",
     "ko": "`None` 비교는 `is None`을 쓰세요. `==`는 사용자 정의 `__eq__`를 호출할 수 있고 린터도 경고합니다.",
     "ko_short": "`None` 비교는 `==` 대신 `is None`을 쓰세요."},
    {"kind": "bug", "imports": ["from decimal import Decimal"], "bad": 1, "lines": [
        "def @e@_total_with_tax(items, rate=0.1):",
        "    total = 0.0",
        "    for item in items:",
        "        total += item.price * item.qty",
        "    return round(total * (1 + rate), 2)"],
     "fix": "    total = Decimal(\"0\")",
     "fixed": ["def @e@_total_with_tax(items, rate=Decimal(\"0.1\")):", "    total = Decimal(\"0\")", "    for item in items:",
               "        total += item.price * item.qty", "    return (total * (1 + rate)).quantize(Decimal(\"0.01\"))"],
     "en": "binary floats accumulate rounding error on money (0.1 + 0.2 != 0.3) and `round` hides it inconsistently. Keep amounts in `Decimal` or integer cents.",
     "en_short": "floats accumulate rounding error on money; use `Decimal`.",
     "ko": "이진 부동소수점은 금액 계산에서 오차가 누적되고(0.1 + 0.2 != 0.3), `round`가 이를 일관성 없이 감춥니다. 금액은 `Decimal`이나 정수 센트 단위로 다루세요.",
     "ko_short": "금액을 float로 계산하면 반올림 오차가 쌓입니다. `Decimal`을 쓰세요."},
    {"kind": "bug", "imports": ["import time"], "bad": 1, "lines": [
        "def wait_for_@e@_status(client, @e@_id):",
        "    while True:",
        "        resp = client.get(f\"/@e@s/{@e@_id}/status\")",
        "        if resp.status_code == 200:",
        "            return resp.json()",
        "        time.sleep(1)"],
     "fix": "    for attempt in range(5):",
     "fixed": ["def wait_for_@e@_status(client, @e@_id):", "    for attempt in range(5):",
               "        resp = client.get(f\"/@e@s/{@e@_id}/status\")", "        if resp.status_code == 200:",
               "            return resp.json()", "        time.sleep(2 ** attempt)",
               "    raise TimeoutError(f\"@e@ {@e@_id}: no status after 5 attempts\")"],
     "en": "this loops forever on a permanent error such as 404, and the fixed 1 s sleep keeps hammering the service. Bound the retries and back off with `time.sleep(2 ** attempt)`.",
     "en_short": "this retries forever, even on a 404; bound it and back off.",
     "ko": "404 같은 영구 오류에서도 무한 반복하고, 1초 고정 대기로 서비스에 계속 부하를 줍니다. 재시도 횟수를 제한하고 `time.sleep(2 ** attempt)`로 간격을 늘리세요.",
     "ko_short": "404에서도 무한 재시도합니다. 횟수를 제한하고 대기 간격을 늘리세요."},
    {"kind": "bug", "imports": ["import requests"], "bad": 1, "lines": [
        "def notify_@e@_webhook(url, payload):",
        "    resp = requests.post(url, json=payload)",
        "    resp.raise_for_status()",
        "    return resp.status_code"],
     "fix": "    resp = requests.post(url, json=payload, timeout=10)",
     "en": "`requests.post` has no default timeout, so one hung webhook blocks this worker forever.",
     "en_short": "no timeout, so a hung webhook blocks the worker forever.",
     "ko": "`requests.post`에는 기본 타임아웃이 없어서 웹훅 서버가 응답하지 않으면 워커가 영원히 멈춥니다.",
     "ko_short": "타임아웃이 없어서 웹훅이 응답하지 않으면 워커가 멈춥니다."},
    {"kind": "bug", "imports": [], "bad": 1, "lines": [
        "def drop_expired_@e@s(sessions, now):",
        "    for key, expires_at in sessions.items():",
        "        if expires_at < now:",
        "            del sessions[key]",
        "    return sessions"],
     "fix": "    for key, expires_at in list(sessions.items()):",
     "en": "deleting from `sessions` while iterating over `sessions.items()` raises `RuntimeError: dictionary changed size during iteration` as soon as one entry has expired.",
     "en_short": "deleting while iterating `sessions.items()` raises `RuntimeError`.",
     "ko": "`sessions.items()`를 순회하는 중에 `del sessions[key]`로 항목을 지우면, 만료된 항목이 하나라도 있을 때 `RuntimeError`가 발생합니다.",
     "ko_short": "`sessions.items()`를 순회하면서 삭제하면 `RuntimeError`가 납니다."},
    {"kind": "nit", "imports": [], "bad": 1, "lines": [
        "def read_@e@_ids(path):",
        "    fh = open(path)",
        "    ids = [line.strip() for line in fh]",
        "    return [i for i in ids if i]"],
     "fix": "    with open(path, encoding=\"utf-8\") as fh:",
     "fixed": ["def read_@e@_ids(path):", "    with open(path, encoding=\"utf-8\") as fh:",
               "        ids = [line.strip() for line in fh]", "    return [i for i in ids if i]"],
     "en": "the file is never closed and its encoding depends on the locale. Use a `with` block and an explicit encoding.",
     "en_short": "the file is never closed; use `with` and an explicit encoding.",
     "ko": "파일을 닫지 않고, 인코딩도 시스템 로캘에 따라 달라집니다. `with` 블록과 명시적 인코딩을 쓰세요.",
     "ko_short": "파일을 닫지 않습니다. `with`와 명시적 인코딩을 쓰세요."},
    {"kind": "bug", "imports": ["from datetime import datetime, timezone"], "bad": 1, "lines": [
        "def is_@e@_overdue(@e@):",
        "    return datetime.now() > @e@.due_at"],
     "fix": "    return datetime.now(timezone.utc) > @e@.due_at",
     "en": "`datetime.now()` is naive local time; if `due_at` is stored timezone-aware the comparison raises `TypeError`, and if it is naive UTC the answer is off by the server's offset.",
     "en_short": "naive `datetime.now()` vs. a UTC `due_at`: `TypeError` or a wrong answer.",
     "ko": "`datetime.now()`는 타임존 정보가 없는 로컬 시간입니다. `due_at` 값이 UTC aware이면 `TypeError`가 나고, naive UTC이면 서버 시차만큼 결과가 틀어집니다.",
     "ko_short": "타임존 없는 `datetime.now()`와 UTC `due_at`을 비교하면 오류나 오차가 생깁니다."},
    {"kind": "security", "imports": ["import logging", "from . import auth", "logger = logging.getLogger(__name__)"], "bad": 1, "lines": [
        "def login_@e@_admin(username, password):",
        "    logger.info(f\"login attempt user={username} password={password}\")",
        "    return auth.verify(username, password)"],
     "fix": "    logger.info(\"login attempt user=%s\", username)",
     "en": "this writes the plaintext password to the logs. Never log credentials; log the username only, with lazy `%s` formatting.",
     "en_short": "this logs the plaintext password.",
     "ko": "비밀번호가 평문으로 로그에 남습니다. 자격 증명은 절대 로그에 남기지 말고, 사용자 이름만 `%s` 지연 포매팅으로 기록하세요.",
     "ko_short": "비밀번호가 평문으로 로그에 남습니다."},
]

CLEAN = [
    ["def format_@e@_label(@e@_id, region):", "    return f\"{region.upper()}-{@e@_id}\""],
    ["def chunked(seq, size):", "    for i in range(0, len(seq), size):", "        yield seq[i:i + size]"],
    ["def @e@_is_active(@e@):", "    return @e@.status in {\"open\", \"pending\"}"],
]
PATHS = ["services/@e@_service.py", "app/@e@s/utils.py", "billing/@e@_jobs.py", "workers/@e@_sync.py"]

TEXT = {
    "en": {
        "system": "You are a senior Python reviewer at {company}. Be specific: quote the exact line, say why it is wrong, and give the corrected line.",
        "file": ["Review this Python module. For each problem, quote the offending line, explain the issue, and suggest a fix.",
                 "Can you review `{path}` before I merge it? Quote each line you comment on."],
        "diff": ["Please review this diff. List each problem with the line it is on and a suggested fix.",
                 "Review the change below; quote the code you are talking about and propose the corrected line."],
        "tag": {"bug": "[bug]", "security": "[security]", "nit": "[nit]"},
        "suggest": "Suggested:", "where": "{path} line {n}",
        "verdict_bad": "Verdict: request changes ({counts}).", "verdict_ok": "Verdict: approve with nits ({counts}).",
        "count": {"bug": "{n} bug", "security": "{n} security issue", "nit": "{n} nit"},
        "rest": ["The rest of the change looks fine.", "Everything else reads well.", ""],
    },
    "ko": {
        "system": "당신은 {company}의 시니어 파이썬 코드 리뷰어입니다. 문제가 되는 줄을 정확히 인용하고, 왜 문제인지 설명한 뒤 수정된 코드를 제시하세요.",
        "file": ["이 파이썬 모듈을 리뷰해 주세요. 문제마다 해당 줄을 그대로 인용하고, 이유와 수정 방법을 알려주세요.",
                 "`{path}` 머지 전에 리뷰 부탁드립니다. 코멘트하는 줄은 그대로 인용해 주세요."],
        "diff": ["이 diff를 리뷰해 주세요. 문제마다 해당 줄과 수정 제안을 적어 주세요.",
                 "아래 변경 사항을 검토해 주세요. 지적하는 코드를 인용하고 고친 줄을 제안해 주세요."],
        "tag": {"bug": "[버그]", "security": "[보안]", "nit": "[사소함]"},
        "suggest": "제안:", "where": "{path} {n}행",
        "verdict_bad": "결론: 수정 요청 ({counts}).", "verdict_ok": "결론: 사소한 수정 후 승인 ({counts}).",
        "count": {"bug": "버그 {n}건", "security": "보안 {n}건", "nit": "개선 제안 {n}건"},
        "rest": ["나머지 변경 사항은 문제없어 보입니다.", "그 외에는 깔끔합니다.", ""],
    },
}


def _sub(text: str, ent: tuple[str, str], n: int) -> str:
    return text.replace("@e@", ent[0]).replace("@k@", ent[1]).replace("@n@", str(n))


def build(rng: random.Random, lang: Lang) -> Example:
    txt = TEXT[lang]
    ent = rng.choice(ENTITIES)
    n = rng.choice([20, 25, 50, 100])
    path = _sub(rng.choice(PATHS), ent, n)
    chosen = rng.sample(SNIPPETS, rng.choice([2, 2, 3]))
    blocks: list[tuple[list[str], dict[str, Any] | None]] = [(s["lines"], s) for s in chosen]
    if rng.random() < 0.5:
        blocks.insert(rng.randrange(len(blocks) + 1), (rng.choice(CLEAN), None))
    imports = sorted({imp for s in chosen for imp in s["imports"]}, key=lambda x: (not x.startswith(("import", "from")), x))

    # the new file: imports, then functions two blank lines apart; remember each planted line's number
    body: list[str] = list(imports)
    found: list[tuple[int, str, dict[str, Any]]] = []
    for lines, snip in blocks:
        if body:
            body += ["", ""]
        start = len(body)
        body += [_sub(line, ent, n) for line in lines]
        if snip is not None:
            found.append((start + snip["bad"] + 1, body[start + snip["bad"]], snip))

    company = pick_lang(rng.choice(COMPANIES), lang)
    if rng.random() < 0.5:
        shown = f"`{path}`:\n```python\n" + "\n".join(body) + "\n```"
        ask = rng.choice(txt["file"]).replace("{path}", path)
    else:
        old_ctx = len(imports)
        hunk = f"@@ -1,{old_ctx} +1,{len(body)} @@"
        diff = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}", hunk]
        diff += [(" " if i < old_ctx else "+") + line for i, line in enumerate(body)]
        shown = "```diff\n" + "\n".join(diff) + "\n```"
        ask = rng.choice(txt["diff"])
    user = f"{ask}\n\n{shown}"

    # reviewers either explain at length and name the corrected line, or say it in one sentence and
    # paste the corrected function as a suggestion block (the common case)
    as_block = rng.random() < 0.85
    out: list[str] = []
    for i, (lineno, bad, snip) in enumerate(found, 1):
        why = _sub(snip[f"{lang}_short" if as_block else lang], ent, n)
        out.append(f"{i}. {txt['tag'][snip['kind']]} {txt['where'].format(path=path, n=lineno)}: `{bad.strip()}` — {why}")
        if as_block:
            fixed = snip.get("fixed") or [snip["fix"] if j == snip["bad"] else x for j, x in enumerate(snip["lines"])]
            out.append("```suggestion\n" + "\n".join(_sub(x, ent, n) for x in fixed) + "\n```")
        else:
            out.append(f"   {txt['suggest']} `{_sub(snip['fix'], ent, n).strip()}`")
    kinds = [s["kind"] for _, _, s in found]
    counts = ", ".join(txt["count"][k].format(n=kinds.count(k)) + ("s" if lang == "en" and kinds.count(k) > 1 else "")
                       for k in ("bug", "security", "nit") if k in kinds)
    verdict = txt["verdict_ok" if set(kinds) == {"nit"} else "verdict_bad"].format(counts=counts)
    rest = rng.choice(txt["rest"])
    answer = "\n".join(out) + "\n\n" + (f"{rest} {verdict}" if rest else verdict)
    messages = [{"role": "system", "content": txt["system"].format(company=company)},
                {"role": "user", "content": user}]
    return Example(messages=messages, answer=answer, info={"snippets": len(found)})
