"""Device memory sampled during a run: ``nvidia-smi``, ``amd-smi`` or ``rocm-smi``, whichever exists.

A tool that is absent is reported as absent (``{"tool": None, "reason": …}``), never as zero
memory. Sampling runs the tool in a subprocess every ``interval`` seconds off the event loop's
critical path; the summary keeps per device the peak and last used MiB and the total.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from dataclasses import dataclass, field
from typing import Any

TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")


def parse_nvidia_smi(text: str) -> list[dict[str, float]]:
    """``--query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits`` → MiB per device."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            try:
                out.append({"device": float(parts[0]), "used_mib": float(parts[1]), "total_mib": float(parts[2])})
            except ValueError:
                continue
    return out


def _to_mib(v: Any) -> float | None:
    if isinstance(v, dict):
        unit = str(v.get("unit", "MB")).lower()
        val = v.get("value")
    else:
        unit, val = "b", v
    try:
        x = float(val)
    except (TypeError, ValueError):
        return None
    return {"b": x / 2**20, "kb": x / 1024, "kib": x / 1024, "mb": x, "mib": x, "gb": x * 1024, "gib": x * 1024}.get(unit, x)


def parse_amd_smi(text: str) -> list[dict[str, float]]:
    """``amd-smi metric --mem-usage --json``: a list of {gpu, mem_usage: {used_vram, total_vram}}."""
    data = json.loads(text)
    items = data if isinstance(data, list) else data.get("gpu_data", [])
    out = []
    for i, g in enumerate(items):
        mu = g.get("mem_usage", {}) if isinstance(g, dict) else {}
        used, total = _to_mib(mu.get("used_vram")), _to_mib(mu.get("total_vram"))
        if used is not None and total is not None:
            out.append({"device": float(g.get("gpu", i)), "used_mib": used, "total_mib": total})
    return out


def parse_rocm_smi(text: str) -> list[dict[str, float]]:
    """``rocm-smi --showmeminfo vram --json``: {"card0": {"VRAM Total Memory (B)": …, "VRAM Total Used Memory (B)": …}}."""
    data = json.loads(text)
    out = []
    for i, (card, d) in enumerate(sorted(data.items())):
        if not isinstance(d, dict):
            continue
        total = d.get("VRAM Total Memory (B)")
        used = d.get("VRAM Total Used Memory (B)")
        if total is not None and used is not None:
            out.append({"device": float(i), "used_mib": float(used) / 2**20, "total_mib": float(total) / 2**20})
    return out


_COMMANDS: dict[str, tuple[list[str], Any]] = {
    "nvidia-smi": (["--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"], parse_nvidia_smi),
    "amd-smi": (["metric", "--mem-usage", "--json"], parse_amd_smi),
    "rocm-smi": (["--showmeminfo", "vram", "--json"], parse_rocm_smi),
}


def find_tool() -> str | None:
    for t in TOOLS:
        if shutil.which(t):
            return t
    return None


@dataclass
class MemorySampler:
    interval: float = 1.0
    tool: str | None = None
    samples: list[list[dict[str, float]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def sample_once(self) -> list[dict[str, float]] | None:
        if self.tool is None:
            return None
        args, parse = _COMMANDS[self.tool]
        try:
            proc = await asyncio.create_subprocess_exec(
                self.tool, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), timeout=10)
            if proc.returncode != 0:
                self.errors.append(f"{self.tool} exited {proc.returncode}: {err.decode(errors='replace')[:200]}")
                return None
            rows: list[dict[str, float]] = parse(out.decode(errors="replace"))
        except (OSError, asyncio.TimeoutError, ValueError, json.JSONDecodeError) as e:
            self.errors.append(f"{self.tool}: {e}")
            return None
        self.samples.append(rows)
        return rows

    async def _loop(self) -> None:
        while True:
            await self.sample_once()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.tool is None:
            self.tool = find_tool()
        if self.tool is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def summary(self) -> dict[str, Any]:
        if self.tool is None:
            return {"tool": None, "reason": f"none of {', '.join(TOOLS)} found on PATH: device memory not measured"}
        devices: dict[int, dict[str, float]] = {}
        for rows in self.samples:
            for r in rows:
                d = devices.setdefault(int(r["device"]), {"peak_used_mib": 0.0, "total_mib": r["total_mib"]})
                d["peak_used_mib"] = max(d["peak_used_mib"], r["used_mib"])
                d["last_used_mib"] = r["used_mib"]
                d["min_free_mib"] = min(d.get("min_free_mib", math.inf), r["total_mib"] - r["used_mib"])  # headroom
        out: dict[str, Any] = {"tool": self.tool, "samples": len(self.samples), "devices": devices}
        if not self.samples:
            out["reason"] = "no sample succeeded: " + "; ".join(self.errors[:3])
        elif self.errors:
            out["errors"] = self.errors[:5]
        return out
