"""Segment ``rag_answer``: a system prompt with 3-5 retrieved passages -> a cited, quoting answer.

The passages are made-up company policies. Each fact is one sentence with slots; a question targets one
or two facts, and the answer states the fact briefly, cites ``[n]`` and quotes the supporting sentence
word for word — the heaviest copying of all segments. About one in ten questions has no answer in the
passages and is answered with a refusal that names what the passages do cover.
"""

from __future__ import annotations

import random
from typing import Any

from ._common import COMPANIES, Example, Lang, iso_date, josa, pick_lang

# A fact: passage sentence, question and short answer in both languages (``s``, ``q``, ``a``), and
# slot choices — a list shared by both languages or {"en": [...], "ko": [...]}.
F = dict[str, Any]


def _f(s_en: str, s_ko: str, q_en: str, q_ko: str, a_en: str, a_ko: str, **slots: Any) -> F:
    return {"s": (s_en, s_ko), "q": (q_en, q_ko), "a": (a_en, a_ko), "slots": slots}


TOPICS: list[dict[str, Any]] = [
    {"title": ("Returns and refunds policy", "반품 및 환불 정책"), "facts": [
        _f("Customers may return unused items within {n} days of delivery for a full refund.",
           "고객은 배송일로부터 {n}일 이내에 사용하지 않은 상품을 반품하고 전액 환불받을 수 있습니다.",
           "How long do customers have to return an unused item?", "사용하지 않은 상품은 배송 후 며칠 안에 반품할 수 있나요?",
           "Unused items can be returned within {n} days of delivery.", "배송일로부터 {n}일 이내에 반품할 수 있습니다.", n=[14, 30, 45]),
        _f("Refunds are issued to the original payment method within {m} business days after the warehouse inspects the item.",
           "환불은 창고에서 상품 검수를 마친 후 영업일 기준 {m}일 이내에 원래 결제 수단으로 지급됩니다.",
           "When will a customer get their refund after returning something?", "반품하면 환불은 언제 받을 수 있나요?",
           "The refund goes back to the original payment method within {m} business days of the inspection.",
           "검수 후 영업일 기준 {m}일 이내에 원래 결제 수단으로 환불됩니다.", m=[3, 5, 7]),
        _f("Items marked as final sale, gift cards and opened software cannot be returned.",
           "최종 세일 표시 상품, 기프트카드, 개봉한 소프트웨어는 반품할 수 없습니다.",
           "Can a customer return a gift card?", "기프트카드도 반품할 수 있나요?",
           "No, gift cards cannot be returned.", "아니요, 기프트카드는 반품할 수 없습니다."),
        _f("Return shipping is free for orders over {amt}; below that a flat fee of {fee} is deducted from the refund.",
           "{amt} 이상 주문은 반품 배송비가 무료이며, 그 미만이면 환불 금액에서 {fee}의 배송비가 차감됩니다.",
           "Who pays for return shipping?", "반품 배송비는 누가 부담하나요?",
           "It depends on the order value: return shipping is free above {amt}, otherwise {fee} is deducted.",
           "주문 금액에 따라 다릅니다. {amt} 이상이면 무료이고, 그 미만이면 {fee}이 차감됩니다.",
           amt={"en": ["$50", "$75", "$100"], "ko": ["5만 원", "7만 원", "10만 원"]},
           fee={"en": ["$5.95", "$7.50"], "ko": ["3,000원", "5,000원"]}),
    ]},
    {"title": ("Travel and expense policy", "출장 및 경비 정책"), "facts": [
        _f("Economy class is required for flights under {h} hours; business class may be booked for longer flights with manager approval.",
           "비행시간 {h}시간 미만의 항공편은 이코노미석을 이용해야 하며, 그 이상은 관리자 승인 시 비즈니스석을 예약할 수 있습니다.",
           "Can I fly business class to a conference?", "컨퍼런스 출장 때 비즈니스석을 탈 수 있나요?",
           "Only if the flight is {h} hours or longer and your manager approves.",
           "비행시간이 {h}시간 이상이고 관리자가 승인한 경우에만 가능합니다.", h=[6, 8, 10]),
        _f("The daily meal allowance is {meal} in domestic cities and {meal2} abroad.",
           "일일 식비 한도는 국내 {meal}, 해외 {meal2}입니다.",
           "What is the meal allowance on a trip abroad?", "해외 출장 시 하루 식비 한도는 얼마인가요?",
           "Abroad you can spend up to {meal2} per day on meals.", "해외 출장 시 하루 {meal2}까지 사용할 수 있습니다.",
           meal={"en": ["$45", "$60"], "ko": ["3만 원", "4만 원"]}, meal2={"en": ["$75", "$90"], "ko": ["6만 원", "8만 원"]}),
        _f("Expense reports must be submitted within {d} days of the trip's end, with itemised receipts for anything above {r}.",
           "경비 보고서는 출장 종료 후 {d}일 이내에 제출해야 하며, {r} 이상 지출은 항목별 영수증을 첨부해야 합니다.",
           "What is the deadline for submitting expenses after a trip?", "출장 후 경비 보고서는 언제까지 내야 하나요?",
           "Within {d} days of the end of the trip.", "출장 종료 후 {d}일 이내에 제출해야 합니다.",
           d=[10, 14, 30], r={"en": ["$25", "$30"], "ko": ["2만 원", "3만 원"]}),
        _f("Alcohol, minibar charges and traffic or parking fines are never reimbursed.",
           "주류, 미니바 요금, 교통 및 주차 위반 과태료는 어떤 경우에도 환급되지 않습니다.",
           "Will the company reimburse a parking ticket I got during the trip?", "출장 중 받은 주차 위반 과태료도 환급되나요?",
           "No. Traffic and parking fines are never reimbursed.", "아니요. 교통 및 주차 위반 과태료는 환급되지 않습니다."),
    ]},
    {"title": ("Hybrid and remote work policy", "하이브리드 및 원격 근무 정책"), "facts": [
        _f("Employees may work remotely up to {d} days per week after completing their probation period.",
           "수습 기간을 마친 직원은 주당 최대 {d}일까지 원격 근무를 할 수 있습니다.",
           "How many days a week can I work from home?", "일주일에 며칠까지 재택근무를 할 수 있나요?",
           "Up to {d} days per week, once your probation period is over.", "수습 기간이 끝났다면 주당 최대 {d}일까지 가능합니다.", d=[2, 3, 4]),
        _f("Core hours are {start} to {end} in the employee's home time zone; meetings should be scheduled within them.",
           "핵심 근무 시간은 직원 거주지 시간대 기준 {start}부터 {end}까지이며, 회의는 이 시간 안에 잡아야 합니다.",
           "What are the core hours?", "핵심 근무 시간이 언제인가요?",
           "Core hours run from {start} to {end} in your home time zone.", "거주지 시간대 기준 {start}부터 {end}까지입니다.",
           start=["10:00", "10:30"], end=["15:00", "16:00"]),
        _f("The company reimburses up to {amt} per year for home-office equipment such as chairs and monitors.",
           "회사는 의자, 모니터 등 재택근무 장비 구입비를 연간 {amt}까지 지원합니다.",
           "Is there a budget for a home-office chair?", "재택근무용 의자 구입비를 지원받을 수 있나요?",
           "Yes, home-office equipment is reimbursed up to {amt} per year.", "네, 재택근무 장비는 연간 {amt}까지 지원됩니다.",
           amt={"en": ["$300", "$500"], "ko": ["30만 원", "50만 원"]}),
        _f("Working from another country for more than {w} weeks a year requires prior approval from HR and Legal.",
           "연간 {w}주를 초과해 해외에서 근무하려면 인사팀과 법무팀의 사전 승인이 필요합니다.",
           "Can I work from abroad for a month?", "한 달 동안 해외에서 근무해도 되나요?",
           "Stays abroad longer than {w} weeks per year need prior approval from HR and Legal, so check your total for the year first.",
           "해외 근무가 연간 {w}주를 넘으면 인사팀과 법무팀의 사전 승인이 필요하니, 올해 누적 기간을 먼저 확인하세요.", w=[2, 4, 6]),
    ]},
    {"title": ("Data retention standard", "데이터 보존 기준"), "facts": [
        _f("Application logs are kept for {d} days and then deleted automatically.",
           "애플리케이션 로그는 {d}일간 보관된 후 자동으로 삭제됩니다.",
           "How long do we keep application logs?", "애플리케이션 로그는 얼마 동안 보관하나요?",
           "Application logs are kept for {d} days, then deleted automatically.", "{d}일간 보관한 뒤 자동으로 삭제합니다.", d=[30, 90, 180]),
        _f("Customer invoices and payment records are retained for {y} years to meet tax obligations.",
           "고객 청구서와 결제 기록은 세무 의무를 위해 {y}년간 보존합니다.",
           "How long must invoices be kept?", "청구서는 몇 년 동안 보관해야 하나요?",
           "{y} years, because of tax obligations.", "세무 의무 때문에 {y}년간 보존해야 합니다.", y=[5, 7, 10]),
        _f("When a customer closes their account, personal data is deleted within {d} days unless a legal hold applies.",
           "고객이 계정을 해지하면, 법적 보존 의무가 없는 한 개인정보는 {d}일 이내에 삭제됩니다.",
           "What happens to a customer's personal data after they close their account?", "고객이 계정을 탈퇴하면 개인정보는 어떻게 되나요?",
           "It is deleted within {d} days, unless a legal hold applies.", "법적 보존 의무가 없다면 {d}일 이내에 삭제됩니다.", d=[14, 30]),
        _f("Backups are encrypted, stored in two regions, and expire after {w} weeks.",
           "백업은 암호화되어 두 개 리전에 저장되며, {w}주 후 만료됩니다.",
           "How long are backups kept?", "백업은 얼마나 보관되나요?",
           "Backups expire after {w} weeks.", "백업은 {w}주 후에 만료됩니다.", w=[4, 6, 8]),
    ]},
    {"title": ("Public API usage limits", "공개 API 사용 한도"), "facts": [
        _f("The Standard plan allows {r} requests per minute per API key; the Enterprise plan allows {r2}.",
           "Standard 요금제는 API 키당 분당 {r}회, Enterprise 요금제는 분당 {r2}회까지 요청할 수 있습니다.",
           "What is the rate limit on the Standard plan?", "Standard 요금제의 요청 한도는 얼마인가요?",
           "{r} requests per minute per API key.", "API 키당 분당 {r}회입니다.", r=[60, 120, 300], r2=[1000, 2000]),
        _f("Requests over the limit receive HTTP 429 with a Retry-After header giving the wait in seconds.",
           "한도를 초과한 요청에는 대기 시간(초)을 알려주는 Retry-After 헤더와 함께 HTTP 429가 반환됩니다.",
           "What happens if a client goes over the limit?", "요청 한도를 넘으면 어떻게 되나요?",
           "The API returns HTTP 429, and the Retry-After header says how many seconds to wait.",
           "HTTP 429가 반환되며, Retry-After 헤더에 기다려야 할 시간(초)이 표시됩니다."),
        _f("Batch endpoints accept at most {b} items per call and count as one request toward the limit.",
           "배치 엔드포인트는 호출당 최대 {b}개 항목을 받으며, 한도 계산 시 1회 요청으로 집계됩니다.",
           "How many items can I send in one batch call?", "배치 호출 한 번에 몇 개까지 보낼 수 있나요?",
           "At most {b} items per call, and each call counts as one request.", "호출당 최대 {b}개이며, 한 번의 호출은 1회 요청으로 집계됩니다.",
           b=[100, 500, 1000]),
        _f("API keys unused for {d} days are revoked automatically; owners are notified by email {n} days in advance.",
           "{d}일 동안 사용하지 않은 API 키는 자동으로 폐기되며, 소유자에게 {n}일 전에 이메일로 알립니다.",
           "Do API keys expire?", "API 키에 만료 기한이 있나요?",
           "Only when unused: keys unused for {d} days are revoked, with an email warning {n} days before.",
           "사용하지 않으면 만료됩니다. {d}일간 사용하지 않은 키는 폐기되며, {n}일 전에 이메일로 안내됩니다.", d=[90, 180], n=[7, 14]),
    ]},
    {"title": ("Support service levels", "고객지원 서비스 수준(SLA)"), "facts": [
        _f("Priority 1 incidents receive a first response within {m} minutes, 24 hours a day.",
           "1순위(P1) 장애는 24시간 내내 {m}분 이내에 첫 응답을 받습니다.",
           "How fast do we respond to a P1 incident?", "P1 장애에는 얼마나 빨리 응답하나요?",
           "Within {m} minutes, at any hour.", "시간과 관계없이 {m}분 이내에 첫 응답합니다.", m=[15, 30]),
        _f("Priority 3 requests are answered within {h} business hours.",
           "3순위(P3) 요청은 영업시간 기준 {h}시간 이내에 답변합니다.",
           "What is the response time for a low-priority request?", "우선순위가 낮은 요청은 언제 답변받을 수 있나요?",
           "P3 requests get an answer within {h} business hours.", "P3 요청은 영업시간 기준 {h}시간 이내에 답변받습니다.", h=[8, 24, 48]),
        _f("If monthly uptime falls below {u}%, customers receive a {c}% service credit on that month's invoice.",
           "월간 가용률이 {u}% 미만이면 고객은 해당 월 청구서에서 {c}%의 서비스 크레딧을 받습니다.",
           "What do customers get if uptime drops below the SLA?", "가용률이 SLA에 못 미치면 고객은 무엇을 받나요?",
           "A {c}% service credit on that month's invoice, when uptime falls below {u}%.",
           "가용률이 {u}% 미만이면 해당 월 청구서에서 {c}% 서비스 크레딧을 받습니다.", u=["99.9", "99.5"], c=[10, 25]),
        _f("Scheduled maintenance is announced {d} days in advance and does not count as downtime.",
           "정기 점검은 {d}일 전에 공지되며 장애 시간으로 계산되지 않습니다.",
           "Does planned maintenance count against uptime?", "예정된 점검 시간도 장애 시간에 포함되나요?",
           "No. Scheduled maintenance is announced {d} days ahead and is not counted as downtime.",
           "아니요. 정기 점검은 {d}일 전에 공지되며 장애 시간으로 계산되지 않습니다.", d=[3, 5, 7]),
    ]},
    {"title": ("Access and password standard", "접근 및 비밀번호 기준"), "facts": [
        _f("Passwords must be at least {n} characters long and are checked against a list of known breached passwords.",
           "비밀번호는 {n}자 이상이어야 하며, 유출된 것으로 알려진 비밀번호 목록과 대조해 검사합니다.",
           "What is the minimum password length?", "비밀번호는 최소 몇 자 이상이어야 하나요?",
           "At least {n} characters.", "최소 {n}자 이상이어야 합니다.", n=[12, 14, 16]),
        _f("Multi-factor authentication is mandatory for all production systems and for email.",
           "모든 운영 시스템과 이메일에는 다중 인증(MFA)이 필수입니다.",
           "Do I need MFA for my email account?", "이메일에도 MFA를 설정해야 하나요?",
           "Yes. MFA is mandatory for email as well as for all production systems.", "네. 이메일과 모든 운영 시스템에 MFA가 필수입니다."),
        _f("Access to production databases is granted for at most {h} hours at a time through the access portal and is logged.",
           "운영 데이터베이스 접근 권한은 접근 포털을 통해 한 번에 최대 {h}시간 동안만 부여되며 모든 접근이 기록됩니다.",
           "How do I get access to the production database?", "운영 DB 접근 권한은 어떻게 받나요?",
           "Through the access portal, for at most {h} hours at a time; the access is logged.",
           "접근 포털에서 신청하면 한 번에 최대 {h}시간 동안 부여되며, 접근 기록이 남습니다.", h=[4, 8, 12]),
        _f("Lost or stolen laptops must be reported to the security team within {h} hours.",
           "분실하거나 도난당한 노트북은 {h}시간 이내에 보안팀에 신고해야 합니다.",
           "I lost my work laptop on the train. What should I do?", "업무용 노트북을 지하철에서 잃어버렸어요. 어떻게 해야 하나요?",
           "Report it to the security team within {h} hours.", "{h}시간 이내에 보안팀에 신고해야 합니다.", h=[1, 2, 24]),
    ]},
    {"title": ("Leave policy", "휴가 정책"), "facts": [
        _f("Full-time employees receive {d} days of paid annual leave, rising by one day for every two years of service.",
           "정규직 직원은 연 {d}일의 유급 연차를 받으며, 근속 2년마다 하루씩 늘어납니다.",
           "How many vacation days do I get?", "연차는 며칠인가요?",
           "{d} paid days a year, plus one more day for every two years of service.", "연 {d}일이며, 근속 2년마다 하루씩 추가됩니다.", d=[15, 20, 25]),
        _f("Up to {c} unused days can be carried over to the next year; the rest expire on 31 March.",
           "사용하지 않은 연차는 최대 {c}일까지 다음 해로 이월되며, 나머지는 3월 31일에 소멸됩니다.",
           "Can I carry unused leave into next year?", "안 쓴 연차를 내년으로 넘길 수 있나요?",
           "Yes, up to {c} days; the rest expire on 31 March.", "네, 최대 {c}일까지 이월되며 나머지는 3월 31일에 소멸됩니다.", c=[3, 5, 10]),
        _f("Parental leave is {w} weeks at full pay for every new parent, to be taken within the child's first year.",
           "모든 신규 부모에게 {w}주의 유급 육아휴직이 주어지며, 자녀 출생 후 1년 이내에 사용해야 합니다.",
           "How long is paid parental leave?", "유급 육아휴직은 얼마나 되나요?",
           "{w} weeks at full pay, taken within the child's first year.", "급여 전액이 지급되는 {w}주이며, 자녀 출생 후 1년 이내에 사용해야 합니다.",
           w=[12, 16, 20]),
        _f("Sick days do not require a doctor's note unless the absence lasts longer than {d} consecutive days.",
           "병가는 연속 {d}일을 초과하지 않으면 진단서가 필요하지 않습니다.",
           "Do I need a doctor's note for a sick day?", "병가를 쓸 때 진단서가 필요한가요?",
           "Not unless you are off sick for more than {d} consecutive days.", "연속 {d}일을 넘지 않으면 필요하지 않습니다.", d=[2, 3, 5]),
    ]},
]

TEXT = {
    "en": {
        "system": ("You are the internal knowledge assistant of {co}. Answer only from the passages below. Cite passages "
                   "as [n] and quote the sentence that supports each claim. If the passages do not contain the answer, say so."
                   "\n\nPassages:\n{passages}"),
        "passage": "[{k}] {title} ({co}, rev. {date})\n{body}",
        "quote": ['{a} [{k}] Passage [{k}] ({title}) states: "{s}"', '{a} [{k}]\nSource [{k}]: "{s}"', '{a} As [{k}] puts it: "{s}"'],
        "none": ("The retrieved passages do not answer this. They cover the {titles}, but none of them mentions it. "
                 "Please check the {want} directly."),
        "and": " and the ", "close": ["", "", "Let me know if you need the full policy text."],
    },
    "ko": {
        "system": ("당신은 {co}의 사내 지식 도우미입니다. 아래 문서만 근거로 답하세요. 문서를 [번호]로 인용하고, 각 주장을 "
                   "뒷받침하는 문장을 그대로 인용하세요. 문서에 답이 없으면 없다고 말하세요.\n\n검색된 문서:\n{passages}"),
        "passage": "[{k}] {title} ({co}, {date} 개정)\n{body}",
        "quote": ['{a} [{k}] {title} 문서에 따르면 "{s}"', '{a} [{k}]\n근거 [{k}]: "{s}"', '{a} [{k}] {title} 문서에 "{s}"라고 명시되어 있습니다.'],
        "none": ("검색된 문서에는 이 질문에 대한 답이 없습니다. 제공된 문서는 {titles}에 관한 것이며, 관련 내용은 포함되어 있지 "
                 "않습니다. {want}{eul} 직접 확인해 주세요."),
        "and": ", ", "close": ["", "", "전체 정책 원문이 필요하시면 말씀해 주세요."],
    },
}


def _render(fact: F, lang: Lang, rng: random.Random) -> dict[str, str]:
    """Draw the fact's slots and render its sentence, question and answer in ``lang``."""
    values = {}
    for name, choices in fact["slots"].items():
        values[name] = rng.choice(choices[lang] if isinstance(choices, dict) else choices)
    i = 1 if lang == "ko" else 0
    return {key: fact[key][i].format(**values) for key in ("s", "q", "a")}


def build(rng: random.Random, lang: Lang) -> Example:
    txt = TEXT[lang]
    co = pick_lang(rng.choice(COMPANIES), lang)
    n_pass = rng.choice([3, 4, 4, 5])
    topics = rng.sample(TOPICS, n_pass + 1)  # the last one is only used for unanswerable questions
    shown, spare = topics[:n_pass], topics[n_pass]

    passages, rendered = [], []  # rendered[k] = list of rendered facts in passage k
    for k, topic in enumerate(shown, 1):
        facts = [_render(f, lang, rng) for f in rng.sample(topic["facts"], rng.choice([2, 3, 3]))]
        rendered.append(facts)
        title = pick_lang(topic["title"], lang)
        body = " ".join(f["s"] for f in facts)
        passages.append(txt["passage"].format(k=k, title=title, co=co, date=iso_date(rng), body=body))
    system = txt["system"].format(co=co, passages="\n\n".join(passages))

    roll = rng.random()
    if roll < 0.1:  # unanswerable: a question about a topic that was not retrieved
        fact = _render(rng.choice(spare["facts"]), lang, rng)
        question = fact["q"]
        titles = txt["and"].join(pick_lang(t["title"], lang) for t in shown)
        want = pick_lang(spare["title"], lang)
        answer = txt["none"].format(titles=titles, want=want, eul=josa(want, "을", "를"))
        kind = "unanswerable"
    else:
        n_q = 2 if roll > 0.8 else 1
        targets = [(k, rng.choice(rendered[k])) for k in rng.sample(range(n_pass), n_q)]
        question = " ".join(f["q"] for _, f in targets)
        parts = []
        for k, f in targets:
            tmpl = rng.choice(txt["quote"])
            parts.append(tmpl.format(a=f["a"], k=k + 1, s=f["s"], title=pick_lang(shown[k]["title"], lang)))
        close = rng.choice(txt["close"])
        answer = "\n\n".join(parts + ([close] if close else []))
        kind = "answer"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return Example(messages=messages, answer=answer, info={"kind": kind, "passages": n_pass})
