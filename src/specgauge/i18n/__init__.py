"""The words specgauge shows a person — the HTML report, the verdict lines, the console summaries —
in English and Korean, from one catalogue (``specgauge.i18n.catalogue``).

Boundary: text only. Numbers reach this package already formatted (the caller formats them once, the
same way for both languages: ``1.234×``, ``95 %``, ``12.3 ms``), so a Korean report shows the same
figures as an English one. Nothing here reads files or the network; the only environment it reads
is the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``) for the default language.

- ``t(key, **params)``: the catalogue entry in the current language (English when the entry has no
  translation).
- ``word(prefix, value)``: a stored machine word (status, action) shown through entry ``prefix.value``.
- ``en(key, **params)``: the English text, for messages stored in results (verdict reasons are data
  in ``compare.json``; they are shown translated at display time).
- ``translate(text)``: a message built by ``en`` (read back from a result file or freshly made)
  shown in the current language: the catalogue's English templates are matched against it and its
  parameters are carried over; text that matches no template comes back unchanged.
- ``use_lang(lang)``: a context in which ``t`` and ``translate`` use ``lang``. The CLI's ``--lang``
  (``cli.common.LangOpt``) opens one around the whole command; outside any, the locale decides.

Where an entry goes: ``catalogue.py`` assembles the area tables (``workload_text``, ``sweep_text``,
``canary_text``, ``predict_text``, ``audit_text``, ``cli_text``) into one ``MESSAGES``; a table's
``STORED`` part holds the messages the library writes into results in English (with ``en``) and the
renderers show with ``translate``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache, lru_cache
from string import Formatter

from specgauge.errors import UserError
from specgauge.i18n.catalogue import MESSAGES, PATTERN_KEYS, TERMS

LANGS = ("en", "ko")
_lang: ContextVar[str | None] = ContextVar("specgauge_lang", default=None)  #: None: the locale's


class LanguageError(UserError):
    """An unknown --lang value."""


def default_lang(env: Mapping[str, str] | None = None) -> str:
    """``ko`` when the locale says Korean (LC_ALL, then LC_MESSAGES, then LANG, as POSIX orders
    them), else ``en``."""
    env = os.environ if env is None else env
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        v = env.get(var)
        if v:
            return "ko" if v.lower().startswith("ko") else "en"
    return "en"


def check_lang(lang: str | None) -> str:
    """``lang`` validated (None: the current language: the CLI's ``--lang``, else the locale's)."""
    if lang is None:
        return get_lang()
    if lang not in LANGS:
        raise LanguageError(f"--lang {lang!r}: choose one of {', '.join(LANGS)}")
    return lang


#: the language a command set for the whole process (``use_lang(..., process=True)``): threads the command
#: starts (the canary proxy's loop, a server thread) begin with an empty context and read this
_process_lang: list[str] = []


def get_lang() -> str:
    return _lang.get() or (_process_lang[-1] if _process_lang else None) or default_lang()


def set_lang(lang: str | None) -> str:
    lang = check_lang(lang)
    _lang.set(lang)
    return lang


@contextmanager
def use_lang(lang: str | None, process: bool = False) -> Iterator[str]:
    """``lang`` (None: the current language) in this context; ``process``: also in threads started
    meanwhile (what the CLI's ``--lang`` does)."""
    token = _lang.set(check_lang(lang))
    if process:
        _process_lang.append(get_lang())
    try:
        yield get_lang()
    finally:
        _lang.reset(token)
        if process:
            _process_lang.pop()


def _text(key: str, lang: str) -> str:
    entry = MESSAGES.get(key)
    if entry is None:
        raise KeyError(f"no catalogue entry {key!r}")
    return entry.get(lang) or entry["en"]


def t(key: str, **params: object) -> str:
    """The catalogue text for ``key`` in the current language, with ``params`` filled in."""
    s = _text(key, get_lang())
    return s.format(**params) if params else s


def word(prefix: str, value: str) -> str:
    """A machine word stored in results (a status, an action, an outcome) in the current language:
    the entry ``prefix.value`` when the catalogue has one, else ``value`` as it is."""
    key = f"{prefix}.{value}"
    return t(key) if key in MESSAGES else value


def en(key: str, **params: object) -> str:
    s = _text(key, "en")
    return s.format(**params) if params else s


#: placeholders that always hold a formatted number (``1.234×``, ``-4.8``, ``1e-05``, ``n/a``): matched as
#: numbers, so a reason with several free-text parts splits in one way only
NUMERIC_PARAMS = frozenset({"est", "lo", "hi", "m", "base", "cand", "d", "limit", "n", "need", "k", "pct", "tol", "more",
                            "total", "b", "p", "alpha", "stat", "mean", "c", "u", "thr", "upto", "from_c", "c0", "c1", "cx", "pos", "prompt", "live", "rep", "srv",
                            "kb", "nb", "kc", "nc"})
_NUMBER = r"[-+±]?(?:n/a|\d[\d.,]*(?:e[-+]?\d+)?)(?:×| ?%)?"


@cache
def _pattern(key: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The English template of ``key`` as an anchored regex, one lazy group per placeholder."""
    parts, names = [], []
    for literal, field, _spec, _conv in Formatter().parse(MESSAGES[key]["en"]):
        parts.append(re.escape(literal))
        if field is not None:
            if field in names:
                parts.append(f"(?P={field})")
            else:
                names.append(field)
                parts.append(f"(?P<{field}>{_NUMBER if field in NUMERIC_PARAMS else '.+?'})")
    return re.compile("".join(parts) + r"\Z", re.DOTALL), tuple(names)


@cache
def _term_rx(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z]){re.escape(word)}(?![A-Za-z])")


def _terms(value: str, lang: str) -> str:
    """Known English words inside a parameter (metric and test names), in ``lang``; whole words only."""
    for en_word, tr in TERMS:
        ko = tr.get(lang)
        if ko and en_word in value:
            value = _term_rx(en_word).sub(ko, value)
    return value


def translate(text: str, lang: str | None = None) -> str:
    """``text`` (made by ``en``) in ``lang`` (default: the current language); unchanged when it
    matches no catalogue template or the language is English. Parameters are translated the same
    way (a confidence interval inside a reason); a comma-separated list no template matches as a whole
    item by item (``prompt 0 position 1, prompt 3 position 2``); else word by word from ``TERMS``."""
    lang = lang or get_lang()
    if lang == "en" or not text:
        return text
    for key in _by_specificity():  # the template with the most literal text wins: placeholders are lazy but unbounded
        rx, names = _pattern(key)
        m = rx.match(text)
        if m is not None:
            return _text(key, lang).format(**{n: translate(m.group(n), lang) for n in names})
    if ", " in text:
        items = text.split(", ")
        shown = [translate(x, lang) for x in items]
        if shown != items:
            return ", ".join(shown)
    return _terms(text, lang)


@lru_cache(maxsize=1)
def _by_specificity() -> tuple[str, ...]:
    def literal(key: str) -> int:
        return sum(len(lit) for lit, *_ in Formatter().parse(MESSAGES[key]["en"]))

    # among equally specific templates the clause list ("{a}; {b}") goes first: a note of several clauses
    # splits into them before "{name}: {text}" could take the whole
    return tuple(sorted(PATTERN_KEYS, key=lambda k: (literal(k), k == "notes.list"), reverse=True))
