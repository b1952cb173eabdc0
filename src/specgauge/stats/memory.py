"""Memory figures of a bench run, and the memory row of a comparison: device memory (GPU tools),
KV cache (capacity and the share in use at the run's peak, from the server's /metrics), model weights
(target, draft) and "draft + KV" — each with where it came from; None when a run did not measure it.

Input is ``summary.json``'s ``specgauge.memory`` block (``stats.summary``); output is data, rendering
lives in ``report``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from specgauge.stats.server_memory import (
    derived_draft_bytes,
    draft_plus_kv,
    peak_device_used_mib,
)

MIB = 2**20

#: (key, what it is) in display order; values are MiB (device) or bytes (server)
FIGURES = ("device_peak_used_mib", "kv_capacity_bytes", "kv_peak_usage", "kv_peak_bytes", "target_weight_bytes",
           "draft_weight_bytes", "draft_plus_kv_bytes")


class MemoryFigure(BaseModel):
    key: str
    value: float
    source: str = ""


class MemoryRow(BaseModel):
    """One figure for baseline and candidate (None: not measured in that run)."""

    key: str
    baseline: float | None = None
    candidate: float | None = None
    source: str = ""

    @property
    def delta(self) -> float | None:
        return self.candidate - self.baseline if self.baseline is not None and self.candidate is not None else None


def _block(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((((summary or {}).get("specgauge") or {}).get("memory")) or {})


def run_memory(summary: Mapping[str, Any] | None) -> list[MemoryFigure]:
    """A run's memory figures (only those measured), in ``FIGURES`` order."""
    mem = _block(summary)
    out: list[MemoryFigure] = []
    dev = mem.get("device") or {}
    peak = peak_device_used_mib(dev)
    if peak is not None:
        out.append(MemoryFigure(key="device_peak_used_mib", value=peak, source=str(dev.get("tool") or "")))
    srv = mem.get("server") or {}
    kv = srv.get("kv") or {}
    src_kv = str(kv.get("source") or "/metrics")
    for key, field in (("kv_capacity_bytes", "capacity_bytes"), ("kv_peak_usage", "peak_usage"), ("kv_peak_bytes", "peak_bytes")):
        if kv.get(field) is not None:
            out.append(MemoryFigure(key=key, value=float(kv[field]), source=src_kv if key != "kv_peak_usage" else "/metrics vllm:kv_cache_usage_perc"))
    w = srv.get("weights") or {}
    for key, field in (("target_weight_bytes", "target_bytes"), ("draft_weight_bytes", "draft_bytes")):
        if w.get(field) is not None:
            out.append(MemoryFigure(key=key, value=float(w[field]), source=str(w.get("source") or "")))
    if srv.get("draft_plus_kv_bytes") is not None:
        out.append(MemoryFigure(key="draft_plus_kv_bytes", value=float(srv["draft_plus_kv_bytes"]), source="draft weights + KV in use at peak"))
    return out


def compare_memory(baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None) -> list[MemoryRow]:
    """Memory rows for a comparison: every figure either run measured. Where only total loaded
    weights were logged (vLLM on GPU), the candidate's draft weights are its total minus the
    baseline's, and "draft + KV" follows from them."""
    b = {f.key: f for f in run_memory(baseline)}
    c = {f.key: f for f in run_memory(candidate)}
    srv_b, srv_c = _block(baseline).get("server"), _block(candidate).get("server")
    if "draft_weight_bytes" not in c:
        d = derived_draft_bytes(srv_b, srv_c)
        if d is not None:
            c["draft_weight_bytes"] = MemoryFigure(key="draft_weight_bytes", value=d, source="candidate's loaded weights minus the baseline's")
            dk = draft_plus_kv(srv_c or {}, d)
            if dk is not None:
                c["draft_plus_kv_bytes"] = MemoryFigure(key="draft_plus_kv_bytes", value=dk, source="draft weights + KV in use at peak")
    rows = []
    for key in FIGURES:
        fb, fc = b.get(key), c.get(key)
        if fb is None and fc is None:
            continue
        rows.append(MemoryRow(key=key, baseline=fb.value if fb else None, candidate=fc.value if fc else None,
                              source=(fc or fb).source if (fc or fb) else ""))
    return rows
