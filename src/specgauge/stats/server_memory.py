"""KV-cache and model-weight memory as the *server* reports it — so "draft + KV memory" is measured
on CPU servers too, where no GPU tool exists. Pure functions over what the bench collected.

Sources, each named in the result:
- ``/metrics``: vLLM's ``vllm:kv_cache_usage_perc`` gauge (sampled during the run) and
  ``vllm:cache_config_info`` labels (``kv_cache_memory_bytes``, ``kv_cache_size_tokens``, else
  ``num_gpu_blocks`` x ``block_size``); the embedded server's ``specgauge:model_weight_bytes{role}``
  and ``specgauge:kv_cache_capacity_bytes{role}``.
- vLLM's start-up log, when specgauge has it (``bench --server-log``): ``Checkpoint size: X GiB``
  per model loaded (the one after ``Loading drafter model...`` is the draft), GPU builds' ``Model
  loading took X GiB memory`` (target and draft together), the KV-cache size in GiB and in tokens.
  Its GiB figures have two decimals: a model below 5 MiB reads 0.00 GiB, and says so.

KV memory in use = peak usage share x KV capacity bytes. Draft memory = the draft's weights (and its
KV cache where reported); for vLLM on GPU, where only the total is logged, ``compare`` takes the
difference to the baseline run of the same target.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from specgauge.records import SessionRecord

GIB = 2**30


def _int(v: Any) -> int | None:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def kv_from_cache_config(labels: Mapping[str, str]) -> dict[str, Any]:
    """KV capacity from ``vllm:cache_config_info``'s labels (vLLM 0.32 names)."""
    out: dict[str, Any] = {}
    b = _int(labels.get("kv_cache_memory_bytes"))
    if b:
        out["capacity_bytes"] = b
    tokens = _int(labels.get("kv_cache_size_tokens"))
    if not tokens:
        blocks, size = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
        tokens = blocks * size if blocks and size else None
    if tokens:
        out["capacity_tokens"] = tokens
    if labels.get("cache_dtype"):
        out["cache_dtype"] = labels["cache_dtype"]
    return out


_CHECKPOINT = re.compile(r"Checkpoint size: ([\d.]+) GiB")
_DRAFTER = re.compile(r"Loading drafter model")
_MODEL_LOADING = re.compile(r"Model loading took ([\d.]+) GiB")
_KV_GIB = re.compile(r"\(([\d.]+)/[\d.]+\) GiB for KV cache|Available KV cache memory: ([\d.]+) GiB")
_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")


def parse_vllm_log(text: str) -> dict[str, Any]:
    """Memory lines of a vLLM server log (start-up). Only numbers are kept: nothing of the log itself."""
    out: dict[str, Any] = {}
    role = "target"
    for line in text.splitlines():
        if _DRAFTER.search(line):
            role = "draft"
            continue
        m = _CHECKPOINT.search(line)
        if m and role not in out.get("checkpoint_gib", {}):
            out.setdefault("checkpoint_gib", {})[role] = float(m.group(1))
            continue
        m = _MODEL_LOADING.search(line)
        if m:
            out["model_loading_gib"] = float(m.group(1))
            continue
        m = _KV_GIB.search(line)
        if m:
            out["kv_cache_gib"] = float(m.group(1) or m.group(2))
            continue
        m = _KV_TOKENS.search(line)
        if m:
            out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    return out


def server_memory(kv: Mapping[str, Any] | None, log: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """One run's server-side memory: ``kv`` is the run's KV summary (``stats.summary``: the last
    ``dialect.memory`` plus the peak usage sampled), ``log`` is ``parse_vllm_log`` of the server log.
    None when the server reported nothing."""
    kv, log = dict(kv or {}), dict(log or {})
    out: dict[str, Any] = {}
    cap: dict[str, Any] = {}
    if isinstance(kv.get("cache_config"), dict):
        cap.update(kv_from_cache_config(kv["cache_config"]))
        if cap:
            cap["source"] = "/metrics vllm:cache_config_info"
    emb = kv.get("engine_memory") if isinstance(kv.get("engine_memory"), dict) else {}
    if "capacity_bytes" not in cap and emb.get("target", {}).get("kv_capacity_bytes"):
        cap["capacity_bytes"] = int(emb["target"]["kv_capacity_bytes"])
        if emb.get("kv_capacity_tokens"):
            cap["capacity_tokens"] = int(emb["kv_capacity_tokens"])
        cap["source"] = "/metrics specgauge:kv_cache_capacity_bytes"
    if "capacity_bytes" not in cap and "kv_cache_gib" in log:
        cap["capacity_bytes"] = int(log["kv_cache_gib"] * GIB)
        cap["source"] = "server log (KV cache GiB)"
    if "capacity_tokens" not in cap and "kv_cache_tokens" in log:
        cap["capacity_tokens"] = log["kv_cache_tokens"]
    peak = kv.get("peak_kv_cache_usage_during_run")
    kv_out: dict[str, Any] = {k: v for k, v in cap.items()}
    if peak is not None:
        kv_out["peak_usage"] = float(peak)
        if "capacity_bytes" in cap:
            kv_out["peak_bytes"] = float(peak) * cap["capacity_bytes"]
        if "capacity_tokens" in cap:
            kv_out["peak_tokens"] = float(peak) * cap["capacity_tokens"]
    if kv_out:
        out["kv"] = kv_out

    weights: dict[str, Any] = {}
    for role in ("target", "draft"):
        b = emb.get(role, {}).get("weight_bytes")
        if b is not None:
            weights[f"{role}_bytes"] = int(b)
    if weights:
        weights["source"] = "/metrics specgauge:model_weight_bytes"
    elif log.get("checkpoint_gib"):
        for role, gib in log["checkpoint_gib"].items():
            weights[f"{role}_bytes"] = int(gib * GIB)
        weights["source"] = "server log (Checkpoint size, GiB with 2 decimals: below 5 MiB reads 0)"
    if "model_loading_gib" in log:
        weights["loaded_total_bytes"] = int(log["model_loading_gib"] * GIB)
        weights.setdefault("source", "server log (Model loading took, target and draft together)")
    if weights:
        out["weights"] = weights
    draft_kv = emb.get("draft", {}).get("kv_capacity_bytes")
    if draft_kv is not None:
        out["draft_kv_capacity_bytes"] = int(draft_kv)
    d = draft_plus_kv(out)
    if d is not None:
        out["draft_plus_kv_bytes"] = d
    return out or None


def draft_plus_kv(m: Mapping[str, Any], draft_bytes: float | None = None) -> float | None:
    """Draft weights (+ the draft's KV allocation where reported) + the target KV memory in use at
    the run's peak; None unless both parts are known. ``draft_bytes`` overrides the run's own figure
    (``compare`` derives it from the baseline when only totals were logged)."""
    kv = m.get("kv") or {}
    if draft_bytes is None:
        draft_bytes = (m.get("weights") or {}).get("draft_bytes")
    if draft_bytes is None or kv.get("peak_bytes") is None:
        return None
    return float(draft_bytes) + float(m.get("draft_kv_capacity_bytes") or 0) + float(kv["peak_bytes"])


def derived_draft_bytes(baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None) -> float | None:
    """Draft weight bytes as candidate's loaded total minus baseline's (same target, vLLM GPU logs)."""
    b = ((baseline or {}).get("weights") or {}).get("loaded_total_bytes")
    c = ((candidate or {}).get("weights") or {}).get("loaded_total_bytes")
    return float(c - b) if b is not None and c is not None and c >= b else None


def peak_device_used_mib(device: Mapping[str, Any] | None) -> float | None:
    """The largest per-device peak of a run's device-memory summary (never a sum across devices:
    partitioned GPUs may each report the whole device)."""
    devs = (device or {}).get("devices") or {}
    peaks = [float(d["peak_used_mib"]) for d in devs.values() if isinstance(d, dict) and "peak_used_mib" in d]
    return max(peaks) if peaks else None


def session_logs(sessions: Sequence[SessionRecord]) -> dict[str, Any] | None:
    """The last session's parsed server log (a resumed run keeps the newest)."""
    for s in reversed(sessions):
        if s.server_log_memory:
            return dict(s.server_log_memory)
    return None
