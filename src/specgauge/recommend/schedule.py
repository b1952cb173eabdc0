"""vLLM's ``num_speculative_tokens_per_batch_size``: a proposal length per batch-size range.

vLLM 0.32 (``vllm/config/speculative.py``, ``vllm/v1/spec_decode/dynamic/utils.py``): a list of
inclusive ``[range_start, range_end, k]`` entries keyed by the number of requests *scheduled* in a
step (prefills included). Its validator requires positive ranges with start ≤ end, k ≥ 0, sorted and
non-overlapping ranges, and a first range starting at 1; batch sizes in a gap or past the last range
take the previous range's k, and every k is capped at ``num_speculative_tokens`` at run time.
``build_schedule`` makes schedules that need none of that leniency: contiguous from 1, each k
already ≤ ``num_speculative_tokens``, neighbours with the same k merged. ``validate_schedule``
applies vLLM's rules plus those two, so a schedule it accepts means exactly what it says.

A schedule's k = 0 is not "off": vLLM still runs its speculative machinery on those steps
(vLLM #49548 measured a 7–22 % per-token cost at k = 0 against serving without speculation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from specgauge.config import schedule_k

Schedule = list[list[int]]


def bands_for(concurrencies: Sequence[int], max_batch: int = 256) -> list[tuple[int, int, int]]:
    """(concurrency, first batch size, last batch size) for each measured concurrency.

    Each concurrency stands for the batch sizes nearer to it than to its neighbours on a log scale:
    the boundary between c_i and c_{i+1} is ⌊√(c_i·c_{i+1})⌋. The first band starts at 1, the
    last ends at ``max_batch`` (vLLM's ``max_num_seqs``) or the largest concurrency if that is more."""
    cs = sorted({int(c) for c in concurrencies})
    if not cs or cs[0] < 1:
        raise ValueError("concurrencies must be integers >= 1")
    out = []
    start = 1
    for i, c in enumerate(cs):
        if i + 1 < len(cs):
            end = max(c, math.isqrt(c * cs[i + 1]))
            end = min(end, cs[i + 1] - 1)
        else:
            end = max(max_batch, c)
        out.append((c, start, end))
        start = end + 1
    return out


def build_schedule(entries: Sequence[tuple[int, int, int]], num_speculative_tokens: int | None = None) -> Schedule:
    """A clean schedule from (start, end, k) entries in any order.

    k is capped at ``num_speculative_tokens`` (default: the largest k given); the first range is
    extended down to 1; a gap is closed by extending the range before it; an overlap is cut from
    the later range; neighbouring ranges with the same k are merged."""
    if not entries:
        raise ValueError("a schedule needs at least one (start, end, k) entry")
    items = sorted((int(s), int(e), int(k)) for s, e, k in entries)
    for s, e, k in items:
        if s < 1 or e < s or k < 0:
            raise ValueError(f"bad schedule entry ({s}, {e}, {k}): need 1 <= start <= end and k >= 0")
    cap = max(k for _, _, k in items) if num_speculative_tokens is None else int(num_speculative_tokens)
    if cap < 1:
        raise ValueError("num_speculative_tokens must be >= 1 (a schedule of k = 0 everywhere is speculation off)")
    out: Schedule = []
    for s, e, k in items:
        k = min(k, cap)
        if not out:
            s = 1
        else:
            prev = out[-1]
            if s <= prev[1]:  # overlap: the earlier range keeps its batch sizes
                s = prev[1] + 1
                if s > e:
                    continue
            elif s > prev[1] + 1:  # gap: the earlier range's k carries on, as vLLM would
                prev[1] = s - 1
        if out and out[-1][2] == k:
            out[-1][1] = e
        else:
            out.append([s, e, k])
    return out


def validate_schedule(schedule: object, num_speculative_tokens: int) -> Schedule:
    """vLLM's validation rules, plus: contiguous ranges and every k ≤ ``num_speculative_tokens``.

    Raises ``ValueError`` naming the first problem; returns the schedule as lists."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError("num_speculative_tokens_per_batch_size must be a non-empty list of [start, end, k]")
    out: Schedule = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(isinstance(x, int) for x in entry):
            raise ValueError(f"entry {entry!r}: expected three integers [start, end, k]")
        s, e, k = (int(x) for x in entry)
        if s <= 0 or e <= 0:
            raise ValueError(f"range ({s}, {e}) must be positive")
        if s > e:
            raise ValueError(f"range start must be <= end in ({s}, {e}, {k})")
        if k < 0:
            raise ValueError(f"k must be >= 0 in ({s}, {e}, {k})")
        if k > num_speculative_tokens:
            raise ValueError(f"k = {k} in ({s}, {e}, {k}) exceeds num_speculative_tokens = {num_speculative_tokens}")
        out.append([s, e, k])
    if out != sorted(out):
        raise ValueError("ranges must be sorted by start")
    if out[0][0] != 1:
        raise ValueError("the first range must start at 1")
    for a, b in pairwise(out):
        if b[0] <= a[1]:
            raise ValueError(f"ranges {a} and {b} overlap")
        if b[0] != a[1] + 1:
            raise ValueError(f"gap between {a} and {b}")
    return out


def k_at(schedule: Schedule, batch: int) -> int:
    """The k a schedule gives a batch size (vLLM's rule: past the last range, the last k;
    ``config.schedule_k``, which the predictor's simulation uses too)."""
    return schedule_k(schedule, batch)
