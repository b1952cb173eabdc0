"""Segment ``json_extract``: a customer message in, its fields out as one JSON object that must follow
the request's JSON Schema (OpenAI ``response_format`` ``json_schema``, strict).

The reference answer copies names, ids, products and amounts from the message, as extraction answers
do; the schema pins the shape (required keys, an enum for the issue, an order-id pattern, no extra
keys), so a broken answer is one the schema rejects, not one a reader would have to judge. Keys and
enum values stay in English in both languages; the values come from the message.
"""

from __future__ import annotations

import json
import random
from typing import Any

from ._common import PRODUCTS, SHOPS, Example, Lang, josa, ko_date, order_id, person, pick_lang

ISSUES = ("damaged", "late", "wrong_item", "refund", "other")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_name": {"type": "string"},
        "email": {"type": "string"},
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{7}$"},
        "product": {"type": "string"},
        "issue": {"type": "string", "enum": list(ISSUES)},
        "amount": {"type": ["number", "null"], "minimum": 0},
        "urgent": {"type": "boolean"},
    },
    "required": ["customer_name", "email", "order_id", "product", "issue", "amount", "urgent"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: dict[str, Any] = {"type": "json_schema", "json_schema": {"name": "ticket_fields", "strict": True, "schema": SCHEMA}}

SYSTEM = {
    "en": "You route messages for the support desk of {shop}. Extract the fields of the customer's message as one JSON "
          "object that follows the schema; copy names, ids and amounts exactly as written; use null for an amount "
          "the message does not give.",
    "ko": "당신은 {shop} 고객센터의 메시지 분류 담당입니다. 고객 메시지의 항목을 스키마에 맞는 JSON 객체 하나로 추출하세요. "
          "이름, 번호, 금액은 쓰인 그대로 옮기고, 메시지에 금액이 없으면 amount는 null로 두세요.",
}

_BODY = {
    "damaged": {"en": "The {product} from order {oid} arrived with a cracked casing and it does not turn on.",
                "ko": "주문 {oid}로 받은 {product}{j_i} 외관이 깨진 채로 왔고 전원이 켜지지 않아요."},
    "late": {"en": "Order {oid} ({product}) was due on {due} and it still has not arrived.",
             "ko": "주문 {oid}({product})은 {due_ko}에 도착 예정이었는데 아직도 안 왔어요."},
    "wrong_item": {"en": "I ordered the {product} (order {oid}) but the box had a different item in it.",
                   "ko": "{product}{j_eul} 주문했는데(주문번호 {oid}) 상자에 다른 물건이 들어 있었어요."},
    "refund": {"en": "Please refund {amount} for order {oid}; I returned the {product} on {due}.",
               "ko": "주문 {oid} 건 {amount_ko} 환불 부탁드립니다. {product}{j_eun} {due_ko}에 반품했어요."},
    "other": {"en": "Can you change the delivery address for order {oid} ({product})? I am moving next week.",
              "ko": "주문 {oid}({product})의 배송지를 바꿀 수 있을까요? 다음 주에 이사해요."},
}
_URGENT = {"en": " This is urgent, I need it before the weekend.", "ko": " 급한 건이라 주말 전에 꼭 필요해요."}
_SIGN = {"en": "\n\nThanks,\n{name} ({email})", "ko": "\n\n감사합니다.\n{name} ({email})"}


def build(rng: random.Random, lang: Lang) -> Example:
    shop = pick_lang(rng.choice(SHOPS), lang)
    name, email = person(rng, lang)
    product = pick_lang(rng.choice(PRODUCTS), lang)
    oid, issue, urgent = order_id(rng), rng.choice(ISSUES), rng.random() < 0.35
    due = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    amount = round(rng.randint(19, 420) + rng.choice([0.0, 0.5, 0.99]), 2) if issue == "refund" else None
    slots = {"product": product, "oid": oid, "due": due, "due_ko": ko_date(due),
             "amount": f"${amount:.2f}" if amount is not None else "", "amount_ko": f"${amount:.2f}" if amount is not None else "",
             "j_i": josa(product, "이", "가"), "j_eul": josa(product, "을", "를"), "j_eun": josa(product, "은", "는")}
    text = _BODY[issue][lang].format(**slots) + (_URGENT[lang] if urgent else "") + _SIGN[lang].format(name=name, email=email)
    answer = {"customer_name": name, "email": email, "order_id": oid, "product": product, "issue": issue,
              "amount": amount, "urgent": urgent}
    messages = [{"role": "system", "content": SYSTEM[lang].format(shop=shop)}, {"role": "user", "content": text}]
    return Example(messages=messages, answer=json.dumps(answer, ensure_ascii=False), response_format=RESPONSE_FORMAT,
                   info={"issue": issue})
