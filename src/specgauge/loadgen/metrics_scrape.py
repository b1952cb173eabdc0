"""Prometheus ``/metrics`` snapshots and before/after diffs, label sets kept apart.

A snapshot maps (sample name, label set) to a value; the diff is taken per label set, so two
engines or two served models are never summed by accident. Callers pick label sets explicitly
(``select``). ``_created`` series (timestamps, not counts) are dropped. A counter that went down
(server restarted) is reported, not silently diffed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

LabelSet = tuple[tuple[str, str], ...]
Key = tuple[str, LabelSet]


class MetricsParseError(ValueError):
    """The /metrics body is not Prometheus text."""


def _labels(d: Mapping[str, str]) -> LabelSet:
    return tuple(sorted(d.items()))


@dataclass
class Snapshot:
    """One scrape: sample values by (name, labels); ``types`` by family name."""

    values: dict[Key, float] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    t: float = math.nan  #: time.time() of the scrape

    @classmethod
    def parse(cls, text: str, t: float = math.nan) -> Snapshot:
        snap = cls(t=t)
        try:
            for fam in text_string_to_metric_families(text):
                snap.types[fam.name] = fam.type
                for s in fam.samples:
                    if s.name.endswith("_created"):
                        continue
                    snap.values[(s.name, _labels(s.labels))] = float(s.value)
        except (ValueError, TypeError, IndexError) as e:
            raise MetricsParseError(f"the /metrics body is not Prometheus text: {e}") from e
        return snap

    def names(self) -> set[str]:
        return {n for n, _ in self.values}

    def select(self, name: str, **match: str) -> dict[LabelSet, float]:
        """Samples of ``name`` whose labels include ``match`` (label sets kept apart)."""
        out: dict[LabelSet, float] = {}
        for (n, ls), v in self.values.items():
            if n == name and all((k, val) in ls for k, val in match.items()):
                out[ls] = v
        return out

    def get(self, name: str, **match: str) -> float | None:
        """The sum over the selected label sets, or None when the sample is absent."""
        sel = self.select(name, **match)
        return sum(sel.values()) if sel else None

    def to_json(self) -> dict[str, float]:
        return {render_key(k): v for k, v in sorted(self.values.items())}

    @classmethod
    def from_json(cls, d: Mapping[str, float]) -> Snapshot:
        snap = cls()
        for k, v in d.items():
            snap.values[parse_key(k)] = float(v)
        return snap


def render_key(k: Key) -> str:
    name, ls = k
    if not ls:
        return name
    inner = ",".join(f'{a}="{b}"' for a, b in ls)
    return f"{name}{{{inner}}}"


def parse_key(s: str) -> Key:
    if "{" not in s:
        return (s, ())
    name, rest = s.split("{", 1)
    snap = Snapshot.parse(f"x{{{rest} 0\n")
    ((_, ls),) = snap.values.keys()
    return (name, ls)


@dataclass
class CounterDiff:
    """after - before per (name, label set), for monotonic samples present after the run."""

    delta: dict[Key, float]
    resets: list[str]  #: samples that went down: the server restarted during the run

    def select(self, name: str, **match: str) -> dict[LabelSet, float]:
        return {ls: v for (n, ls), v in self.delta.items() if n == name and all((k, x) in ls for k, x in match.items())}

    def get(self, name: str, **match: str) -> float | None:
        sel = self.select(name, **match)
        return sum(sel.values()) if sel else None

    def by_label(self, name: str, label: str, **match: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for ls, v in self.select(name, **match).items():
            d = dict(ls)
            if label in d:
                out[d[label]] = out.get(d[label], 0.0) + v
        return out

    def to_json(self) -> dict[str, float]:
        return {render_key(k): v for k, v in sorted(self.delta.items())}


def _is_monotonic(name: str, types: Mapping[str, str]) -> bool:
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            return types.get(base, "counter") in ("counter", "histogram", "summary", "unknown")
    return types.get(name) == "counter"


def diff(before: Snapshot, after: Snapshot) -> CounterDiff:
    """Counters (and histogram _count/_sum/_bucket) after minus before; a series new after is taken from 0."""
    delta: dict[Key, float] = {}
    resets: list[str] = []
    types = {**before.types, **after.types}
    for k, v in after.values.items():
        if not _is_monotonic(k[0], types):
            continue
        b = before.values.get(k, 0.0)
        if v < b:
            resets.append(render_key(k))
            continue
        delta[k] = v - b
    return CounterDiff(delta, resets)


def prefixes(names: Iterable[str]) -> set[str]:
    return {n.split(":", 1)[0] for n in names if ":" in n}
