"""The catalogue and the translation of stored English messages: default language from the locale,
every entry in both languages with the same placeholders, every verdict/diagnosis template read back
to the right Korean sentence with its numbers unchanged, unknown text left as it is."""

from __future__ import annotations

import re
from string import Formatter

import pytest

from specgauge.errors import UserError
from specgauge.i18n import (
    NUMERIC_PARAMS,
    check_lang,
    default_lang,
    en,
    get_lang,
    t,
    translate,
    use_lang,
)
from specgauge.i18n.catalogue import MESSAGES, PATTERN_KEYS


@pytest.mark.parametrize(("env", "lang"), [
    ({"LANG": "ko_KR.UTF-8"}, "ko"),
    ({"LANG": "C.UTF-8"}, "en"),
    ({}, "en"),
    ({"LANG": "en_US.UTF-8", "LC_ALL": "ko_KR.UTF-8"}, "ko"),  # LC_ALL wins, as POSIX says
    ({"LANG": "ko_KR.UTF-8", "LC_ALL": "C"}, "en"),
    ({"LANG": "ko_KR.UTF-8", "LC_MESSAGES": "en_GB.UTF-8"}, "en"),
])
def test_default_language_from_the_locale(env: dict[str, str], lang: str) -> None:
    assert default_lang(env) == lang


def test_bad_language_is_a_user_error_and_context_restores() -> None:
    with pytest.raises(UserError, match="--lang 'fr': choose one of en, ko"):
        check_lang("fr")
    before = get_lang()
    with use_lang("ko"):
        assert t("report.h.verdict") == "판정"
    assert get_lang() == before


def _fields(s: str) -> set[str]:
    return {f for _, f, _, _ in Formatter().parse(s) if f}


def test_every_entry_has_both_languages_with_the_same_placeholders() -> None:
    for key, e in MESSAGES.items():
        assert e.get("en") and e.get("ko"), key
        assert _fields(e["en"]) == _fields(e["ko"]), key


def _sample(name: str, i: int) -> str:
    if name in NUMERIC_PARAMS:
        return f"{1.25 + i:.3f}×" if name in ("est", "lo", "hi", "thr") else str(3 + i)
    return f"R{i}-{name.upper()}"  # free text that no template or term matches (kept as is)


@pytest.mark.parametrize("key", PATTERN_KEYS)
def test_every_stored_message_reads_back_to_its_own_korean_sentence(key: str) -> None:
    names = sorted(_fields(MESSAGES[key]["en"]))
    params = {n: _sample(n, i) for i, n in enumerate(names)}
    english = en(key, **params)
    korean = translate(english, "ko")
    assert korean == MESSAGES[key]["ko"].format(**params), (key, english, korean)
    assert re.findall(r"\d[\d.]*", korean) and sorted(re.findall(r"\d[\d.]*×?", korean)) == sorted(re.findall(r"\d[\d.]*×?", english)) \
        or not params  # the same numbers, formatted the same way
    assert translate(english, "en") == english


def test_nested_messages_translate_inside_each_other() -> None:
    ci = en("verdict.ci", est="1.234×", lo="1.100×", hi="1.300×")
    lat = en("verdict.latency", metric="E2E latency p95", base="100.0", cand="80.0", d="-20.0", lo="-25.0", hi="-15.0")
    assert translate(en("verdict.gain", m="1.05", ci=ci), "ko") == \
        "후보가 1.05× 마진을 넘게 빠름: 출력 토큰 속도 1.234× (95 % 신뢰구간 1.100×–1.300×), 구간 전체가 1.05× 위에 있음"
    assert translate(en("verdict.lat_small", txt=lat, m="1.05", limit="-4.8"), "ko") == (
        "더 낮음 E2E 지연 시간 p95 100.0 → 80.0 ms (Δ -20.0 ms, 95 % 신뢰구간 -25.0 ~ -15.0): 후보에 유리하지만 1.05× 마진(-4.8 ms)에는 못 미침")


def test_unknown_text_is_left_as_it_is() -> None:
    assert translate("a sentence no template knows", "ko") == "a sentence no template knows"
    assert translate("", "ko") == ""
