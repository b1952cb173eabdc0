"""Incremental detokenisation with stop strings (the server's side; the engine sees only ids).

Text is released token by token using the prefix/read-offset technique (decode a short window, emit
what the new token added), holding back an incomplete UTF-8 sequence (U+FFFD at the end) and, when stop
strings are set, the last ``max(len(stop)) - 1`` characters that could still start a stop string. Like
vLLM, the stop string itself is not part of the output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, stop: Sequence[str] = (), skip_special_tokens: bool = True) -> None:
        self.tok = tokenizer
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.skip = skip_special_tokens
        self.ids: list[int] = []
        self.text = ""  # all text decoded so far
        self.emitted = 0  # characters of ``text`` already released
        self._prefix = 0
        self._read = 0
        self.stopped_by: str | None = None

    def _decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=self.skip))

    def add(self, token_id: int) -> str:
        """Add one token; return the text now safe to release ("" if none). After a stop string is
        found, ``stopped_by`` is set and further tokens are ignored."""
        if self.stopped_by is not None:
            return ""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        new_text = self._decode(self.ids[self._prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            self.text += new_text[len(prefix_text) :]
            self._prefix, self._read = self._read, len(self.ids)
        for s in self.stop:
            i = self.text.find(s, max(0, self.emitted - len(s) + 1))
            if i != -1:
                self.stopped_by = s
                self.text = self.text[:i]
                return self._release(len(self.text))
        return self._release(len(self.text) - self.hold if self.stop else len(self.text))

    def flush(self) -> str:
        """At the end: release whatever was held back (an incomplete character is decoded as is)."""
        if self.stopped_by is None and self._read < len(self.ids):
            prefix_text = self._decode(self.ids[self._prefix : self._read])
            self.text += self._decode(self.ids[self._prefix :])[len(prefix_text) :]
            self._read = len(self.ids)
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        if upto <= self.emitted:
            return ""
        out = self.text[self.emitted : upto]
        self.emitted = upto
        return out
