"""Segment ``tool_calling``: an agent step with OpenAI ``tools`` and ``tool_choice: "auto"``.

The prompt holds the user's request, an assistant ``tool_calls`` turn and its ``tool`` result (sometimes
two rounds). The reference next action is either the next tool call — written the way chat models emit
it as text, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` — copying ids and values from
the tool result, or the final answer to the user quoting the numbers the tool returned.
Tool schemas and tool results stay in English in both languages, as most deployments keep them.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from typing import Any

from ._common import (
    CARRIERS, CITIES, COMPANIES, PRODUCTS, SHOPS, Example, Lang, hex_id, josa, ko_date, order_id, person,
    pick_lang,
)


def _fn(name: str, desc: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": required}}}


_S = {"type": "string"}
TOOLS: dict[str, dict[str, Any]] = {t["function"]["name"]: t for t in [
    _fn("search_orders", "Search a customer's orders by email, optionally filtered by status.", {
        "customer_email": {**_S, "description": "Email address on the account"},
        "status": {**_S, "enum": ["pending", "shipped", "delivered", "cancelled", "refunded"]}}, ["customer_email"]),
    _fn("get_order_tracking", "Get carrier tracking details for one order.", {
        "order_id": {**_S, "description": "Order id such as ORD-2412345"}}, ["order_id"]),
    _fn("get_weather", "Daily weather forecast for a city.", {
        "city": _S, "date": {**_S, "description": "YYYY-MM-DD"}, "units": {**_S, "enum": ["metric", "imperial"]}}, ["city", "date"]),
    _fn("create_ticket", "Open a support ticket.", {
        "order_id": _S, "summary": {**_S, "description": "One-line summary"},
        "priority": {**_S, "enum": ["low", "normal", "high", "urgent"]},
        "category": {**_S, "enum": ["delivery", "damage", "billing", "account", "other"]}}, ["summary", "priority"]),
    _fn("run_sql", "Run a read-only SQL query and return the rows.", {
        "query": {**_S, "description": "A single SELECT statement"},
        "database": {**_S, "enum": ["orders", "analytics"]}}, ["query"]),
    _fn("lookup_inventory", "Available stock for a SKU per warehouse.", {
        "sku": _S, "warehouse": {**_S, "description": "Warehouse id; omit for all"}}, ["sku"]),
    _fn("issue_refund", "Refund an order, fully or partly.", {
        "order_id": _S, "amount": {"type": "number", "minimum": 0}, "reason": _S}, ["order_id", "amount", "reason"]),
    _fn("send_email", "Send an email to a customer.", {"to": _S, "subject": _S, "body": _S}, ["to", "subject", "body"]),
]}

TEXT = {
    "en": {"system": "You are the assistant of {shop}. Use the tools when you need data and never invent order ids or numbers. Today is {today}.",
           "sql_system": "You are a data assistant for the {co} analytics team. Use run_sql to answer questions; fix your query if it fails. Today is {today}."},
    "ko": {"system": "당신은 {shop}의 AI 상담원입니다. 데이터가 필요하면 도구를 사용하고, 주문번호나 수치를 지어내지 마세요. 오늘은 {today}입니다.",
           "sql_system": "당신은 {co} 분석팀의 데이터 도우미입니다. 질문에는 run_sql로 답하고, 쿼리가 실패하면 고쳐서 다시 실행하세요. 오늘은 {today}입니다."},
}

Round = tuple[str, dict[str, Any], dict[str, Any]]  # (tool name, arguments, result)


def _order_status(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    oid, carrier, tn = order_id(rng), pick_lang(rng.choice(CARRIERS), "en"), str(rng.randint(10**11, 10**12 - 1))
    hub, eta = rng.choice(["Daejeon hub", "Incheon hub", "Busan sort center"]), c["day"](rng.randint(1, 4))
    user = {"en": f"Hi, where is my {c['product']}? I ordered it last week with {c['email']}.",
            "ko": f"지난주에 {c['email']} 계정으로 {c['product']}{josa(c['product'], '을', '를')} 주문했는데 어디쯤 왔나요?"}[lang]
    rounds: list[Round] = [
        ("search_orders", {"customer_email": c["email"]},
         {"orders": [{"order_id": oid, "item": c["product"], "status": "shipped", "carrier": carrier, "shipped_at": c["day"](-2)}]}),
        ("get_order_tracking", {"order_id": oid},
         {"order_id": oid, "carrier": carrier, "tracking_number": tn, "status": "in_transit", "last_scan": hub, "eta": eta}),
    ]
    final = {"en": f"Your {c['product']} (order {oid}) is on its way with {carrier}, tracking number {tn}. The last scan was at the {hub}, and the expected delivery date is {eta}.",
             "ko": f"주문하신 {c['product']}(주문번호 {oid}){josa(c['product'], '은', '는')} {carrier}로 배송 중입니다. 운송장 번호는 {tn}이고, 마지막 스캔 위치는 {hub}, 도착 예정일은 {ko_date(eta)}입니다."}[lang]
    return {"user": user, "rounds": rounds, "final": final, "extra_tools": []}


_COND = {"rain": ("rain", "비"), "showers": ("showers", "소나기"), "clear": ("clear skies", "맑은 날씨"), "cloudy": ("clouds", "흐린 날씨"), "snow": ("snow", "눈")}


def _ro(word: str) -> str:
    """로 after a vowel or ㄹ, otherwise 으로."""
    last = word[-1]
    return "으로" if "가" <= last <= "힣" and (ord(last) - 0xAC00) % 28 not in (0, 8) else "로"


def _weather(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    (c1, c2), day = rng.sample(CITIES, 2), c["day"](rng.randint(1, 5))
    names = [pick_lang(x, "en") for x in (c1, c2)]
    shown = [pick_lang(x, lang) for x in (c1, c2)]

    def forecast(city: str) -> dict[str, Any]:
        cond = rng.choice(list(_COND))
        p = rng.randint(60, 95) if cond in ("rain", "showers", "snow") else rng.randint(0, 20)
        hi = rng.randint(-2, 8) if cond == "snow" else rng.randint(9, 31)
        return {"city": city, "date": day, "condition": cond, "precip_probability": p,
                "precip_mm": round(p / 8 * rng.random(), 1), "high_c": hi, "low_c": hi - rng.randint(4, 10)}

    f1 = forecast(names[0])
    rounds: list[Round] = [("get_weather", {"city": names[0], "date": day}, f1)]
    if rng.random() < 0.4:  # two cities: the next action is the second call
        user = {"en": f"I'm in {shown[0]} and then {shown[1]} on {day}. Will I need an umbrella in either place?",
                "ko": f"{ko_date(day)}에 {shown[0]}에 있다가 {shown[1]}{_ro(shown[1])} 이동해요. 두 곳 중 우산이 필요한 곳이 있을까요?"}[lang]
        return {"user": user, "rounds": rounds, "next": ("get_weather", {"city": names[1], "date": day}), "extra_tools": []}
    wet = f1["condition"] in ("rain", "showers", "snow")
    cond_en, cond_ko = _COND[f1["condition"]]
    user = {"en": f"Do I need an umbrella in {shown[0]} on {day}?", "ko": f"{ko_date(day)}에 {shown[0]}에서 우산이 필요할까요?"}[lang]
    if lang == "en":
        lead = "Yes, take an umbrella." if wet else "You probably won't need one."
        final = (f"{lead} The forecast for {names[0]} on {day} is {cond_en} with a {f1['precip_probability']}% chance of "
                 f"precipitation ({f1['precip_mm']} mm), a high of {f1['high_c']}°C and a low of {f1['low_c']}°C.")
    else:
        lead = "네, 우산을 챙기세요." if wet else "우산은 필요 없을 것 같아요."
        final = (f"{lead} {ko_date(day)} {shown[0]} 예보는 {cond_ko}이고, 강수 확률 {f1['precip_probability']}%"
                 f"(강수량 {f1['precip_mm']}mm), 최고 기온 {f1['high_c']}°C, 최저 기온 {f1['low_c']}°C입니다.")
    return {"user": user, "rounds": rounds, "final": final, "extra_tools": []}


def _damage_ticket(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    oid, tid = order_id(rng), f"TCK-{rng.randint(10000, 99999)}"
    part_en, part_ko = rng.choice([("corner", "모서리"), ("front panel", "앞면"), ("casing", "외관"), ("side", "옆면")])
    user = {"en": f"My {c['product']} from order {oid} arrived with a damaged {part_en}. My email is {c['email']}. Can you open a ticket?",
            "ko": f"주문 {oid}로 받은 {c['product']}의 {part_ko}{josa(part_ko, '이', '가')} 파손된 채로 왔어요. 제 이메일은 {c['email']}입니다. 접수 부탁드려요."}[lang]
    summary = {"en": f"{c['product']} arrived with a damaged {part_en}", "ko": f"{c['product']} {part_ko} 파손 상태로 배송됨"}[lang]
    args = {"order_id": oid, "summary": summary, "priority": "high", "category": "damage"}
    rounds: list[Round] = [
        ("search_orders", {"customer_email": c["email"], "status": "delivered"},
         {"orders": [{"order_id": oid, "item": c["product"], "status": "delivered", "delivered_at": c["day"](-1)}]}),
        ("create_ticket", args, {"ticket_id": tid, "status": "open", "priority": "high", "first_response_hours": 24}),
    ]
    final = {"en": f"I've opened ticket {tid} (priority high) for order {oid}: \"{summary}\". Our team will get back to you within 24 hours; please keep the packaging in case the carrier asks for photos.",
             "ko": f"주문 {oid} 건으로 티켓 {tid}(우선순위 high){josa(tid, '을', '를')} 접수했습니다: \"{summary}\". 24시간 안에 담당팀이 연락드릴 예정이며, 택배사에서 사진을 요청할 수 있으니 포장재는 보관해 주세요."}[lang]
    return {"user": user, "rounds": rounds, "final": final, "extra_tools": []}


def _sql(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    region, since, n = rng.choice(["KR-SEO", "KR-BSN", "KR-JEJ", "US-WEST", "EU-CENTRAL"]), c["day"](-7), rng.randint(12, 480)
    user = {"en": f"How many orders were refunded in the {region} region since {since}?",
            "ko": f"{ko_date(since)} 이후 {region} 지역에서 환불된 주문이 몇 건인가요?"}[lang]
    bad = f"SELECT COUNT(*) FROM orders WHERE status = 'refunded' AND region = '{region}' AND refunded_at >= DATE '{since}'"
    good = bad.replace("AND region =", "AND ship_region =")
    rounds: list[Round] = [
        ("run_sql", {"query": bad, "database": "orders"},
         {"error": 'column "region" does not exist', "hint": "columns: id, customer_id, status, total, refunded_at, ship_region"}),
        ("run_sql", {"query": good, "database": "orders"}, {"columns": ["count"], "rows": [[n]]}),
    ]
    final = {"en": f"{n} orders shipped to {region} were refunded since {since}.\n\nQuery used: `{good}`",
             "ko": f"{ko_date(since)} 이후 {region} 지역으로 배송된 주문 중 환불된 주문은 {n}건입니다.\n\n사용한 쿼리: `{good}`"}[lang]
    return {"user": user, "rounds": rounds, "final": final, "extra_tools": [], "sql": True}


def _inventory(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    sku, q = f"{c['sku_prefix']}-{rng.randint(1000, 9999)}", rng.choice([10, 20, 40, 60])
    a, b = rng.randint(0, 70), rng.randint(0, 70)
    user = {"en": f"Can you check stock for SKU {sku}? A customer needs {q} units by Friday.",
            "ko": f"SKU {sku} 재고 확인 부탁드려요. 고객이 금요일까지 {q}개가 필요하답니다."}[lang]
    res = {"sku": sku, "name": c["product"], "warehouses": [{"id": "ICN-1", "available": a}, {"id": "BSN-2", "available": b}]}
    rounds: list[Round] = [("lookup_inventory", {"sku": sku}, res)]
    if lang == "en":
        head = f"SKU {sku} ({c['product']}): ICN-1 has {a} available and BSN-2 has {b}."
        tail = (f"ICN-1 alone can cover the {q} units." if a >= q else f"Together they can cover the {q} units." if a + b >= q
                else f"That is {a + b} in total, {q - a - b} short of the {q} units.")
    else:
        head = f"SKU {sku}({c['product']}) 재고는 ICN-1 {a}개, BSN-2 {b}개입니다."
        tail = (f"ICN-1 재고만으로 {q}개를 맞출 수 있습니다." if a >= q else f"두 창고를 합치면 {q}개를 맞출 수 있습니다." if a + b >= q
                else f"합계 {a + b}개로, 필요한 {q}개에서 {q - a - b}개가 부족합니다.")
    return {"user": user, "rounds": rounds, "final": f"{head} {tail}", "extra_tools": []}


def _refund(rng: random.Random, lang: Lang, c: dict[str, Any]) -> dict[str, Any]:
    oid, amount, rid = order_id(rng), round(rng.randint(1900, 42000) / 100, 2), f"RF-{hex_id(rng, 6).upper()}"
    user = {"en": f"Please refund order {oid}. The {c['product']} stopped working after two days. Email: {c['email']}",
            "ko": f"주문 {oid} 환불해 주세요. {c['product']}{josa(c['product'], '이', '가')} 이틀 만에 고장 났어요. 이메일은 {c['email']}입니다."}[lang]
    reason = {"en": f"{c['product']} stopped working after two days", "ko": f"{c['product']} 구매 이틀 만에 고장"}[lang]
    rounds: list[Round] = [
        ("search_orders", {"customer_email": c["email"]},
         {"orders": [{"order_id": oid, "item": c["product"], "status": "delivered", "total": amount, "currency": "USD"}]}),
        ("issue_refund", {"order_id": oid, "amount": amount, "reason": reason},
         {"refund_id": rid, "order_id": oid, "amount": amount, "status": "pending", "eta_days": 5}),
    ]
    final = {"en": f"Done: refund {rid} of {amount:.2f} USD for order {oid} is pending and should reach your original payment method within 5 days.",
             "ko": f"주문 {oid}의 {amount:.2f} USD 환불(환불번호 {rid})이 접수되었습니다. 5일 안에 원래 결제 수단으로 입금될 예정입니다."}[lang]
    return {"user": user, "rounds": rounds, "final": final, "extra_tools": ["send_email"]}


SCENARIOS: list[Callable[[random.Random, Lang, dict[str, Any]], dict[str, Any]]] = [
    _order_status, _weather, _damage_ticket, _sql, _inventory, _refund,
]


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as a chat model writes it in text (the Hermes / Qwen ``<tool_call>`` convention)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def build(rng: random.Random, lang: Lang) -> Example:
    today = dt.date(2025, rng.randint(1, 12), rng.randint(1, 28))
    name, email = person(rng, lang)
    prod = rng.choice(PRODUCTS)
    ctx = {"email": email, "name": name, "product": pick_lang(prod, lang), "sku_prefix": prod[2],
           "day": lambda d: (today + dt.timedelta(days=d)).isoformat()}
    sc = rng.choice(SCENARIOS)(rng, lang, ctx)
    rounds: list[Round] = sc["rounds"]
    # how many rounds the prompt already holds: all but the last (next action = that call) or all (final)
    if "next" in sc:
        shown, nxt = rounds, sc["next"]
    elif len(rounds) > 1 and rng.random() < 0.5:
        shown, nxt = rounds[:-1], rounds[-1][:2]
    else:
        shown, nxt = rounds, None

    txt = TEXT[lang]
    system = (txt["sql_system"] if sc.get("sql") else txt["system"]).format(
        shop=pick_lang(rng.choice(SHOPS), lang), co=pick_lang(rng.choice(COMPANIES), lang), today=today.isoformat())
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": sc["user"]}]
    for tool, args, result in shown:
        call_id = f"call_{hex_id(rng, 12)}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": tool, "arguments": json.dumps(args, ensure_ascii=False)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result, ensure_ascii=False)})
    answer = format_tool_call(*nxt) if nxt is not None else sc["final"]

    needed = {r[0] for r in rounds} | ({nxt[0]} if nxt else set()) | set(sc["extra_tools"])
    others = [t for t in TOOLS if t not in needed]
    names = sorted(needed) + rng.sample(others, rng.randint(1, 2))
    rng.shuffle(names)
    return Example(messages=messages, answer=answer, tools=[TOOLS[n] for n in names],
                   info={"next": "tool_call" if nxt else "final"})
