"""The shape of a catalogue table, shared by every area's text module: ``{key: {"en": ..., "ko": ...}}``.

``merge`` joins the area tables into the one catalogue and refuses a key defined twice, so two areas
cannot silently shadow each other's words.
"""

from __future__ import annotations

Entries = dict[str, dict[str, str]]


def merge(*tables: Entries) -> Entries:
    out: Entries = {}
    for table in tables:
        for key, entry in table.items():
            if key in out:
                raise KeyError(f"catalogue key {key!r} is defined twice")
            out[key] = entry
    return out
