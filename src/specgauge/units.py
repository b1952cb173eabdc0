"""The one grammar for the values users type: durations, integer lists, k lists, NAME=VALUE pairs.

Every parser names the flag in its error (a ``ConfigError``, or the caller's ``UserError`` subclass)
and accepts the same spellings wherever the value appears:

* duration: one or more ``NUMBER[UNIT]`` terms, summed: ``90``, ``90s``, ``90sec``, ``500ms``, ``1.5m``,
  ``30min``, ``2h``, ``1h30m`` (no unit: seconds); it must be > 0;
* integer list: ``1,4,16`` (each >= 1, in the order given);
* k list: ``1-8``, ``1,2,4``, ``2,4-6`` (sorted, unique, 1..64);
* pairs: ``NAME=VALUE`` items.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specgauge.config import ConfigError
from specgauge.errors import UserError

#: seconds per unit; the alternation is longest first so ``min`` and ``ms`` are not read as ``m`` + rest
_UNITS = {"ms": 0.001, "msec": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "m": 60.0, "min": 60.0, "mins": 60.0,
          "h": 3600.0, "hr": 3600.0, "hrs": 3600.0}
_TERM = re.compile(r"(\d+(?:\.\d+)?)(" + "|".join(sorted(_UNITS, key=len, reverse=True)) + r")?", re.IGNORECASE)
#: the largest proposal length any engine uses
MAX_K = 64


def parse_duration(text: str | float, flag: str = "--duration", error: type[UserError] = ConfigError) -> float:
    """Seconds (> 0) of a duration such as ``90s``, ``30min``, ``1h30m``, ``500ms`` or a plain number."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        total, ok = float(text), True
    else:
        t = str(text).strip().replace(" ", "")
        pos, total = 0, 0.0
        for m in _TERM.finditer(t):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[(m.group(2) or "s").lower()]
            pos = m.end()
        ok = bool(t) and pos == len(t)
    if not ok or not total > 0:
        raise error(f"{flag} {text!r}: expected a positive duration like 90s, 30min, 1h30m or 500ms")
    return total


def parse_int_list(text: str | None, flag: str) -> list[int]:
    """``1,4,16`` -> [1, 4, 16] (each >= 1, order kept); empty text -> []."""
    if not text:
        return []
    try:
        values = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected integers like 1,4,16") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{flag} {text!r}: expected integers >= 1 like 1,4,16")
    return values


def parse_ks(text: str, flag: str = "--k") -> list[int]:
    """``1-8`` or ``1,2,4`` or ``4`` -> sorted unique k values in 1..64."""
    ks: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"(-?\d+)(?:-(-?\d+))?", part.strip())
        if not m:
            raise ConfigError(f"{flag} {text!r}: expected e.g. 1-8 or 1,2,4")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo < 1 or hi < lo:
            raise ConfigError(f"{flag} {text!r}: k must be >= 1 and ranges increasing")
        if hi > MAX_K:
            raise ConfigError(f"{flag} {text!r}: k above {MAX_K} is not a proposal length any engine uses")
        ks.update(range(lo, hi + 1))
    return sorted(ks)


def parse_pair(item: str, flag: str, expected: str = "NAME=VALUE") -> tuple[str, str]:
    """``NAME=VALUE`` -> (name, value), both stripped; the name must not be empty."""
    name, eq, value = item.partition("=")
    if not eq or not name.strip():
        raise ConfigError(f"{flag} {item!r}: expected {expected}")
    return name.strip(), value.strip()


def parse_pairs(items: Iterable[str] | None, flag: str, expected: str = "NAME=VALUE") -> dict[str, str]:
    """Repeated ``NAME=VALUE`` options -> {name: value} (a later name wins)."""
    return dict(parse_pair(item, flag, expected) for item in items or [])
