"""Device memory (and power / utilisation where the tool gives them) sampled during a run, from
``nvidia-smi``, ``amd-smi`` or ``rocm-smi`` — whichever is on PATH and answers.

Probes are tried in order (``PROBES``): ``nvidia-smi``; ``amd-smi metric --json``; ``amd-smi monitor``
(its table: guests and releases whose ``metric`` lacks a flag); ``rocm-smi --json``. The first that
yields memory is kept for the run. A tool that is absent is reported absent (``{"tool": None,
"reason": …}``), never as zero memory. A tool that hangs is killed after ``timeout`` seconds (its
whole process group) and not asked again; one that keeps failing is dropped after
``MAX_FAILURES`` tries; either way ``warning`` holds one line for the run's warnings and the bench
goes on without device memory. Parsers: ``specgauge.loadgen.smi``.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specgauge.i18n import en
from specgauge.loadgen.smi import (
    NVIDIA_QUERY,
    Row,
    parse_amd_smi,
    parse_amd_smi_monitor,
    parse_nvidia_smi,
    parse_rocm_smi,
)

__all__ = ["PROBES", "TOOLS", "MemorySampler", "Probe", "find_tool", "parse_amd_smi", "parse_amd_smi_monitor",
           "parse_nvidia_smi", "parse_rocm_smi"]

TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")
MAX_FAILURES = 3


@dataclass(frozen=True)
class Probe:
    tool: str
    args: tuple[str, ...]
    parse: Callable[[str], list[Row]]

    @property
    def command(self) -> str:
        return " ".join((self.tool, *self.args))


PROBES: tuple[Probe, ...] = (
    Probe("nvidia-smi", (f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"), parse_nvidia_smi),
    Probe("amd-smi", ("metric", "--mem-usage", "--power", "--usage", "--json"), parse_amd_smi),
    Probe("amd-smi", ("monitor", "--power-usage", "--gfx", "--vram-usage"), parse_amd_smi_monitor),
    Probe("rocm-smi", ("--showmeminfo", "vram", "--showuse", "--showpower", "--json"), parse_rocm_smi),
)


def find_tool() -> str | None:
    for t in TOOLS:
        if shutil.which(t):
            return t
    return None


class _Failed(Exception):
    def __init__(self, msg: str, hung: bool = False) -> None:
        super().__init__(msg)
        self.hung = hung


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """The tool and anything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    await proc.wait()


async def _run(probe: Probe, timeout: float) -> str:
    """stdout of one probe; _Failed (with why) when it cannot start, hangs or exits non-zero."""
    try:
        proc = await asyncio.create_subprocess_exec(
            probe.tool, *probe.args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        raise _Failed(f"{probe.tool}: {e.strerror or e}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        await _kill(proc)
        raise _Failed(f"`{probe.command}` did not answer within {timeout:g} s and was stopped", hung=True) from None
    except asyncio.CancelledError:  # the run ended while the tool was still running: leave nothing behind
        await _kill(proc)
        raise
    if proc.returncode != 0:
        msg = err.decode(errors="replace").strip().splitlines()
        raise _Failed(f"`{probe.command}` exited {proc.returncode}" + (f": {msg[-1][:160]}" if msg else ""))
    return out.decode(errors="replace")


@dataclass
class MemorySampler:
    interval: float = 1.0
    tool: str | None = None  #: restrict to this tool's probes (None: any on PATH)
    timeout: float = 5.0  #: seconds one tool call may take before it is killed
    samples: list[list[Row]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    probe: Probe | None = None  #: the probe in use once one answered
    disabled: str | None = None  #: why sampling stopped early
    _candidates: list[Probe] | None = None
    _failures: int = 0
    _last_tried: Probe | None = None
    _task: asyncio.Task[None] | None = None

    def candidates(self) -> list[Probe]:
        if self._candidates is None:
            self._candidates = [p for p in PROBES if (self.tool is None or p.tool == self.tool) and shutil.which(p.tool)]
        return self._candidates

    async def _try(self, probe: Probe) -> list[Row] | None:
        self._last_tried = probe
        try:
            rows = probe.parse(await _run(probe, self.timeout))
        except _Failed as e:
            self.errors.append(str(e))
            if e.hung:
                raise
            return None
        except ValueError as e:
            self.errors.append(f"`{probe.command}`: output not understood ({e})")
            return None
        if not any("used_mib" in r for r in rows):
            self.errors.append(f"`{probe.command}`: no memory figures in its output")
            return None
        return rows

    async def sample_once(self) -> list[Row] | None:
        if self.disabled is not None:
            return None
        if self.probe is None:  # find the first probe that answers with memory
            for p in self.candidates():
                try:
                    rows = await self._try(p)
                except _Failed:
                    continue  # hung: try the next tool, never this one again
                if rows is not None:
                    self.probe, self.tool = p, p.tool
                    self.samples.append(rows)
                    return rows
            self.disabled = "no telemetry tool answered with memory: " + "; ".join(self.errors[-3:]) if self.candidates() else "absent"
            return None
        try:
            rows = await self._try(self.probe)
        except _Failed as e:
            self.disabled = str(e)
            return None
        if rows is None:
            self._failures += 1
            if self._failures >= MAX_FAILURES:
                self.disabled = f"`{self.probe.command}` failed {self._failures} times in a row: {self.errors[-1]}"
            return None
        self._failures = 0
        self.samples.append(rows)
        return rows

    async def _loop(self) -> None:
        while self.disabled is None:
            await self.sample_once()
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        if self.candidates() and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    @property
    def warning(self) -> str | None:
        """One line for the run's warnings when a tool was found but memory could not be read
        (throughout or from some point on); None when sampling worked or no tool exists."""
        if not self.candidates() or self.disabled in (None, "absent"):
            return None
        when = "from then on" if self.samples else "for this run"
        return f"device memory not measured {when}: {self.disabled}"

    def summary(self) -> dict[str, Any]:
        tried = self.probe or self._last_tried
        if tried is None and not self.samples:
            if not self.candidates():
                return {"tool": None, "reason": en("mem.r.no_tool", tools=", ".join(TOOLS))}
            tried = self.candidates()[0]
        devices: dict[int, dict[str, float]] = {}
        util_sum: dict[int, tuple[float, int]] = {}
        for rows in self.samples:
            for r in rows:
                dev = int(r["device"])
                d = devices.setdefault(dev, {})
                if "used_mib" in r:
                    d["peak_used_mib"] = max(d.get("peak_used_mib", 0.0), r["used_mib"])
                    d["total_mib"] = r["total_mib"]
                    d["last_used_mib"] = r["used_mib"]
                    d["min_free_mib"] = min(d.get("min_free_mib", math.inf), r["total_mib"] - r["used_mib"])  # headroom
                if "power_w" in r:
                    d["peak_power_w"] = max(d.get("peak_power_w", 0.0), r["power_w"])
                if "util_pct" in r:
                    s, n = util_sum.get(dev, (0.0, 0))
                    util_sum[dev] = (s + r["util_pct"], n + 1)
        for dev, (s, n) in util_sum.items():
            devices[dev]["mean_util_pct"] = s / n
        out: dict[str, Any] = {"tool": tried.tool if tried else self.tool, "samples": len(self.samples), "devices": devices}
        if tried is not None:
            out["command"] = tried.command
        if not self.samples:
            out["reason"] = en("mem.r.no_sample", errors="; ".join(self.errors[:3]))
        elif self.errors:
            out["errors"] = self.errors[:5]
        if self.warning:
            out["warning"] = self.warning
        return out
