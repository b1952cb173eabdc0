"""How many sequences each batched forward of a ``TransformersTarget`` held while a block of code ran:
a spy that records and then calls the real ``_batch`` (nothing is replaced). The batched hidden-state
replay's tests use it to show that the run they compare really batched (or really did not)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from specgauge.targets.hf import TransformersTarget


@contextmanager
def forward_rows() -> Iterator[list[int]]:
    """Yields a list that gets, per target forward run inside the block, its number of sequences."""
    rows: list[int] = []
    real = TransformersTarget._batch

    def spy(self: TransformersTarget, group: list[list[int]], *args: Any) -> Any:
        rows.append(len(group))
        return real(self, group, *args)

    TransformersTarget._batch = spy  # type: ignore[method-assign]
    try:
        yield rows
    finally:
        TransformersTarget._batch = real  # type: ignore[method-assign]
