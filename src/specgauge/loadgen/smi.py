"""Parsers for the GPU telemetry tools' output: ``nvidia-smi``, ``amd-smi`` (JSON and its ``monitor``
table) and ``rocm-smi`` (JSON, and its plain log as a fallback). Pure functions: text in, rows out.

One row per device the tool lists (a logical device: in CPX/DPX mode an AMD Instinct GPU appears as
several partitions). A row always has ``device``; ``used_mib`` / ``total_mib`` only when the tool gave
both; ``power_w`` and ``util_pct`` only when it gave them. A value the tool reports as ``N/A`` is left
out, never read as zero. Units: amd-smi's "MB" is MiB (``amdsmi_commands.py`` divides bytes by
1024*1024), rocm-smi reports bytes.

Known tool behaviour the caller must not paper over: on partitioned MI300 GPUs some ROCm releases
report the whole device's VRAM for every partition (ROCm issue 4750; ``tests/data/smi/``), so totals
of different rows are never summed.
"""

from __future__ import annotations

import json
import re
from typing import Any

Row = dict[str, float]

_UNIT_MIB = {"b": 1 / 2**20, "kb": 1 / 1024, "kib": 1 / 1024, "mb": 1.0, "mib": 1.0, "gb": 1024.0, "gib": 1024.0,
             "tb": 2**20, "tib": 2**20}


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().rstrip("%").strip())
        except ValueError:
            return None
    return None


def _value_unit(v: Any, default_unit: str) -> tuple[float | None, str]:
    """amd-smi leaves are ``{"value": N, "unit": "MB"}`` (ROCm >= 6.1) or a bare number (older)."""
    if isinstance(v, dict):
        return _num(v.get("value")), str(v.get("unit", default_unit)).strip().lower()
    return _num(v), default_unit.lower()


def _mib(v: Any, default_unit: str = "MB") -> float | None:
    x, unit = _value_unit(v, default_unit)
    if x is None or unit not in _UNIT_MIB:
        return None
    return x * _UNIT_MIB[unit]


def _json_payload(text: str) -> Any:
    """The JSON document in a tool's stdout, skipping banner lines printed before it
    (``WARNING: ...``); ValueError when there is none."""
    s = text.strip()
    starts = [i for i in (s.find("["), s.find("{")) if i >= 0]
    if not starts:
        raise ValueError("no JSON document in the output")
    return json.loads(s[min(starts):])


def _row(device: float, used: float | None, total: float | None, power: float | None, util: float | None) -> Row:
    r: Row = {"device": float(device)}
    if used is not None and total is not None:
        r["used_mib"], r["total_mib"] = used, total
    if power is not None:
        r["power_w"] = power
    if util is not None:
        r["util_pct"] = util
    return r


# ---------------------------------------------------------------------------- NVIDIA

NVIDIA_QUERY = "index,memory.used,memory.total,power.draw,utilization.gpu"


def parse_nvidia_smi(text: str) -> list[Row]:
    """``--query-gpu=index,memory.used,memory.total[,power.draw,utilization.gpu] --format=csv,noheader,nounits``
    (MiB, W, %); ``[N/A]`` columns are left out."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        dev, used, total = _num(parts[0]), _num(parts[1]), _num(parts[2])
        if dev is None or used is None or total is None:
            continue
        power = _num(parts[3]) if len(parts) > 3 else None
        util = _num(parts[4]) if len(parts) > 4 else None
        out.append(_row(dev, used, total, power, util))
    return out


# ---------------------------------------------------------------------------- AMD: amd-smi


def amd_smi_devices(data: Any) -> list[dict[str, Any]]:
    """The per-device objects: a bare list (ROCm <= 6.3) or ``{"gpu_data": [...]}`` (ROCm 6.4+)."""
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    return [g for g in data if isinstance(g, dict)] if isinstance(data, list) else []


def parse_amd_smi_device(g: dict[str, Any], index: int) -> Row:
    mu = g.get("mem_usage") if isinstance(g.get("mem_usage"), dict) else {}
    used, total = _mib(mu.get("used_vram")), _mib(mu.get("total_vram"))
    pw = g.get("power") if isinstance(g.get("power"), dict) else {}
    power = None
    for key in ("socket_power", "current_socket_power", "average_socket_power"):
        x, unit = _value_unit(pw.get(key), "W")
        if x is not None:
            power = x / 1000 if unit == "mw" else x
            break
    usage = g.get("usage") if isinstance(g.get("usage"), dict) else {}
    util, _ = _value_unit(usage.get("gfx_activity"), "%")
    dev = _num(g.get("gpu"))
    return _row(dev if dev is not None else index, used, total, power, util)


def parse_amd_smi(text: str) -> list[Row]:
    """``amd-smi metric --mem-usage --power --usage --json``."""
    return [parse_amd_smi_device(g, i) for i, g in enumerate(amd_smi_devices(_json_payload(text)))]


_MONITOR_UNIT = re.compile(r"^(N/A|[-+]?\d+(?:\.\d+)?)\s*([A-Za-z%°]*)")


def _cell(cells: dict[str, str], name: str) -> tuple[float | None, str]:
    """A monitor cell ``"248 W"`` -> (248.0, "w"); ``N/A`` or absent -> (None, "")."""
    m = _MONITOR_UNIT.match(cells.get(name, ""))
    if not m or m.group(1) == "N/A":
        return None, ""
    return float(m.group(1)), m.group(2).lower()


def parse_amd_smi_monitor(text: str) -> list[Row]:
    """``amd-smi monitor -p -u -v`` (the table; no ``--json`` needed): columns POWER, GFX_UTIL or GFX%,
    VRAM_USED + VRAM_TOTAL, or VRAM_USAGE as ``used/total GB``. Columns are right-aligned under their
    headers, so a cell spans from the previous header's end to its own header's end."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head_i = next((i for i, ln in enumerate(lines) if ln.split() and ln.split()[0] == "GPU"), None)
    if head_i is None:
        return []
    header = lines[head_i]
    names = header.split()
    ends = [m.end() for m in re.finditer(r"\S+", header)]
    out: list[Row] = []
    for ln in lines[head_i + 1:]:
        if not ln.strip()[:1].isdigit():
            break  # the process table or a blank section follows
        cells = dict(zip(names, [ln[a:b].strip() for a, b in zip([0, *ends[:-1]], [*ends[:-1], None])]))
        dev = _num(cells.get("GPU"))
        if dev is None:
            continue

        used = total = None
        if "VRAM_USED" in cells and "VRAM_TOTAL" in cells:
            (u, uu), (t, tu) = _cell(cells, "VRAM_USED"), _cell(cells, "VRAM_TOTAL")
            if u is not None and t is not None:
                used, total = u * _UNIT_MIB.get(uu or "mb", 1.0), t * _UNIT_MIB.get(tu or "mb", 1.0)
        elif "VRAM_USAGE" in cells:  # "0.3/192.0 GB"
            m = re.match(r"([\d.]+)\s*/\s*([\d.]+)\s*([A-Za-z]+)", cells["VRAM_USAGE"])
            if m:
                f = _UNIT_MIB.get(m.group(3).lower(), 1.0)
                used, total = float(m.group(1)) * f, float(m.group(2)) * f
        power, _ = _cell(cells, "POWER")
        util, _ = _cell(cells, "GFX_UTIL") if "GFX_UTIL" in cells else _cell(cells, "GFX%")
        out.append(_row(dev, used, total, power, util))
    return out


# ---------------------------------------------------------------------------- AMD: rocm-smi

_ROCM_POWER_KEYS = ("Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)")


def parse_rocm_smi(text: str) -> list[Row]:
    """``rocm-smi --showmeminfo vram --showuse --showpower --json``: ``{"card0": {"VRAM Total Memory (B)":
    "…", "VRAM Total Used Memory (B)": "…", "GPU use (%)": "…", …}}`` with string values; ``cardN`` is
    rocm-smi's device index. Falls back to the plain log (``GPU[0] : VRAM Total Memory (B): …``)
    when the output is not JSON (older releases print warnings around it)."""
    try:
        data = _json_payload(text)
    except ValueError:
        return parse_rocm_smi_text(text)
    if not isinstance(data, dict):
        return []
    out = []
    for card, d in data.items():
        m = re.fullmatch(r"card(\d+)", card)
        if m and isinstance(d, dict):  # skip "system" and other sections
            out.append(_rocm_card(int(m.group(1)), d))
    return sorted(out, key=lambda r: r["device"])


def _rocm_card(dev: int, d: dict[str, Any]) -> Row:
    total, used = _num(d.get("VRAM Total Memory (B)")), _num(d.get("VRAM Total Used Memory (B)"))
    both = used is not None and total is not None
    power = next((p for p in (_num(d.get(k)) for k in _ROCM_POWER_KEYS) if p is not None), None)
    return _row(dev, used / 2**20 if both and used is not None else None, total / 2**20 if both and total is not None else None,
                power, _num(d.get("GPU use (%)")))


def parse_rocm_smi_text(text: str) -> list[Row]:
    """rocm-smi's plain log lines ``GPU[i] : <metric>: <value>``."""
    fields: dict[int, dict[str, str]] = {}
    for m in re.finditer(r"^GPU\[(\d+)\]\s*:\s*(.+?):\s*(\S+)\s*$", text, re.MULTILINE):
        fields.setdefault(int(m.group(1)), {})[m.group(2).strip()] = m.group(3)
    return [_rocm_card(dev, d) for dev, d in sorted(fields.items())]
