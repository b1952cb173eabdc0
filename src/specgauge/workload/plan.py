"""Which requests a run sends: the first ``num_prompts`` of a workload, cycling when more are asked.

One rule for bench (what it sends) and the predictor (what it replays in the same order): the i-th
planned request is workload request ``i % n``; the copies of later rounds carry the id ``ID~rR``
(round R >= 1), so every planned id is unique and names its original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def cycled_id(base_id: str, round_: int) -> str:
    """The id of round ``round_``'s copy of a request (round 0: the request itself)."""
    return base_id if round_ == 0 else f"{base_id}~r{round_}"


def plan_cycle(items: Sequence[T], num_prompts: int | None, renamed: Callable[[T, str], T],
               id_of: Callable[[T], str]) -> list[T]:
    """The first ``num_prompts`` of ``items`` (None or 0: each once), cycling; a copy in round R >= 1
    is ``renamed(item, cycled_id(id_of(item), R))``."""
    n = num_prompts or len(items)
    out: list[T] = []
    for i in range(n if items else 0):
        r, j = divmod(i, len(items))
        out.append(items[j] if r == 0 else renamed(items[j], cycled_id(id_of(items[j]), r)))
    return out
