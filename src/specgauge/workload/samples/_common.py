"""Shared pieces of the sample generators: the ``Example`` a segment builder returns, and the
made-up vocabulary (people, products, shops, companies, cities) the segments draw from.

Every name, product and company here was invented for specgauge; any resemblance is accidental.
Builders take a ``random.Random`` and a language (``"en"`` or ``"ko"``) and must draw every random
choice from that generator, so a seed reproduces the text byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

Lang = str  # "en" | "ko"


@dataclass
class Example:
    """One generated request body (messages, optional tools) and its reference answer."""

    messages: list[dict[str, Any]]
    answer: str
    tools: list[dict[str, Any]] | None = None
    response_format: dict[str, Any] | None = None  #: OpenAI ``response_format`` (the structured-output segment)
    #: free-form facts about how the example was built (scenario name…), kept out of the request
    info: dict[str, Any] = field(default_factory=dict)


EN_FIRST = [
    "Dana", "Marcus", "Priya", "Tomas", "Elena", "Jordan", "Aisha", "Felix", "Nora", "Victor",
    "Owen", "Lucia", "Rafael", "Imogen", "Caleb", "Mei", "Samir", "Greta", "Hugo", "Zara",
]
EN_LAST = [
    "Whitfield", "Okafor", "Lindqvist", "Moreau", "Castellano", "Brennan", "Tanaka", "Abernathy",
    "Kowalski", "Ferreira", "Haddad", "Nakamura", "Sorensen", "Quinlan", "Delacroix", "Mbeki",
]
KO_SURNAMES = [
    ("김", "kim"), ("이", "lee"), ("박", "park"), ("최", "choi"), ("정", "jung"), ("강", "kang"),
    ("조", "cho"), ("윤", "yoon"), ("장", "jang"), ("임", "lim"), ("한", "han"), ("서", "seo"),
]
KO_GIVEN = [
    ("민준", "minjun"), ("서연", "seoyeon"), ("지호", "jiho"), ("하은", "haeun"), ("도윤", "doyoon"),
    ("수아", "sua"), ("예준", "yejun"), ("지민", "jimin"), ("현우", "hyunwoo"), ("유진", "yujin"),
    ("서준", "seojun"), ("채원", "chaewon"), ("지훈", "jihoon"), ("다은", "daeun"), ("태희", "taehee"),
]
EN_AGENTS = ["Sam", "Riley", "Morgan", "Casey", "Jamie", "Alex", "Taylor", "Robin"]

#: (English name, Korean name, sku prefix)
PRODUCTS = [
    ("Nimbus X2 Wi-Fi router", "님버스 X2 와이파이 공유기", "NMB"),
    ("Aurora Lite desk lamp", "오로라 라이트 스탠드", "AUR"),
    ("KettlePro 3 smart kettle", "케틀프로 3 스마트 전기포트", "KTP"),
    ("Pebble Air earbuds", "페블 에어 무선 이어폰", "PBA"),
    ("Lumo smart plug (2-pack)", "루모 스마트 플러그 2개입", "LUM"),
    ("Strata 27 monitor", "스트라타 27 모니터", "STR"),
    ("Breeze H4 air purifier", "브리즈 H4 공기청정기", "BRZ"),
    ("Tessel robot vacuum", "테셀 로봇청소기", "TSL"),
    ("Quill 7 e-reader", "퀼 7 전자책 단말기", "QLL"),
    ("Harbor 22L backpack", "하버 22L 백팩", "HBR"),
]
#: (English shop, Korean shop)
SHOPS = [
    ("Brightcart", "브라이트카트"), ("Maplewick Home", "메이플윅 홈"), ("Gadgetry Lane", "가젯트리"),
    ("Oakline Store", "오크라인 스토어"),
]
#: (English company, Korean company)
COMPANIES = [
    ("Tidewell", "타이드웰"), ("Pinegrove Logistics", "파인그로브 물류"), ("Solmaru Health", "솔마루 헬스"),
    ("Kestrel Finance", "케스트럴 파이낸스"), ("Orchard Systems", "오차드 시스템즈"),
]
#: (English city, Korean city)
CITIES = [
    ("Seoul", "서울"), ("Busan", "부산"), ("Incheon", "인천"), ("Daejeon", "대전"), ("Jeju", "제주"),
    ("Gwangju", "광주"), ("Lisbon", "리스본"), ("Toronto", "토론토"), ("Osaka", "오사카"),
    ("Denver", "덴버"), ("Melbourne", "멜버른"),
]
CARRIERS = [("SwiftPost", "스위프트택배"), ("Parcelo", "파셀로"), ("Nara Express", "나라익스프레스")]


def person(rng: random.Random, lang: Lang) -> tuple[str, str]:
    """A made-up customer: (display name, email)."""
    if lang == "ko":
        (sur, sur_r), (given, given_r) = rng.choice(KO_SURNAMES), rng.choice(KO_GIVEN)
        return sur + given, f"{given_r}.{sur_r}{rng.randint(1, 99)}@example.kr"
    first, last = rng.choice(EN_FIRST), rng.choice(EN_LAST)
    return f"{first} {last}", f"{first.lower()}.{last.lower()}@example.com"


def agent_name(rng: random.Random, lang: Lang) -> str:
    if lang == "ko":
        return rng.choice(KO_SURNAMES)[0] + rng.choice(KO_GIVEN)[0]
    return rng.choice(EN_AGENTS)


def pick_lang(pair: tuple[str, ...], lang: Lang) -> str:
    """The English (index 0) or Korean (index 1) member of a vocabulary tuple."""
    return pair[1] if lang == "ko" else pair[0]


def order_id(rng: random.Random) -> str:
    return f"ORD-{rng.randint(2400000, 2599999)}"


def ticket_id(rng: random.Random) -> str:
    return f"TCK-{rng.randint(10000, 99999)}"


def hex_id(rng: random.Random, n: int = 8) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def iso_date(rng: random.Random, year: int = 2025) -> str:
    return f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def ko_date(iso: str) -> str:
    """``2025-03-07`` -> ``3월 7일``."""
    _, m, d = iso.split("-")
    return f"{int(m)}월 {int(d)}일"


def money(rng: random.Random, lang: Lang, lo: int = 19, hi: int = 420) -> str:
    if lang == "ko":
        return f"{rng.randint(lo, hi) * 1000:,}원"
    return f"${rng.randint(lo, hi)}.{rng.choice(['00', '50', '90', '99'])}"


def fill(template: str, slots: dict[str, Any]) -> str:
    """``str.format`` with a clear error naming the missing slot (a bug in a template, not input)."""
    try:
        return template.format(**slots)
    except KeyError as exc:  # pragma: no cover - only reachable through a template typo
        raise KeyError(f"sample template needs slot {exc} : {template[:60]!r}") from None


_DIGIT_BATCHIM = {"0": True, "1": True, "2": False, "3": True, "4": False, "5": False, "6": True,
                  "7": True, "8": True, "9": False}


def has_batchim(word: str) -> bool:
    """Whether a Korean reading of ``word`` ends in a final consonant (decides 이/가, 을/를 …)."""
    c = word.rstrip(" )]")[-1:] or "가"
    if "가" <= c <= "힣":
        return (ord(c) - 0xAC00) % 28 != 0
    if c in _DIGIT_BATCHIM:
        return _DIGIT_BATCHIM[c]
    return c.lower() in "lmnr"


def josa(word: str, with_final: str, without_final: str) -> str:
    """The particle that follows ``word``: ``josa("공유기", "이", "가") == "가"``."""
    return with_final if has_batchim(word) else without_final
