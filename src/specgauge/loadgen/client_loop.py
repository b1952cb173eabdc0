"""The load generator watching itself: how late its own event loop wakes up during a run (stalls),
how long of that it waited for a CPU (Linux schedstat) and how long the garbage collector stopped
it. A CPU-starved or blocked client times every chunk late and would blame the server; ``bench``
records these per session (``run.json`` → ``sessions[].client_loop``) and warns from
``STALL_WARN_MS``. No HTTP here.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any


#: an event-loop wake-up this late counts as a stall of the load generator; one this late warns
STALL_MS = 20.0
STALL_WARN_MS = 100.0
HELD_KEPT = 2000  #: the longest run of held-up intervals a session keeps (``out["held"]``)


class GcTimer:
    """Times the interpreter's garbage collections during the run (they stop the event loop too):
    ``out["gc_max_ms"]``, ``out["gc_s"]``, ``out["gc_collections"]``."""

    def __init__(self, out: dict[str, Any]) -> None:
        self.out = out
        out.update(gc_max_ms=0.0, gc_s=0.0, gc_collections=0)
        self._t = 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
            return
        d = time.perf_counter() - self._t
        self.out["gc_collections"] += 1
        self.out["gc_s"] = round(self.out["gc_s"] + d, 4)
        self.out["gc_max_ms"] = max(self.out["gc_max_ms"], round(d * 1e3, 2))

    def close(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)


async def watch_loop(out: dict[str, Any], period: float = 0.01) -> None:
    """How late the client's own event loop wakes up during the run (a CPU-starved or blocked load
    generator times chunks late, and would blame the server): ``out`` holds the worst lateness, the
    number of stalls over ``STALL_MS`` and their total, updated as they happen, and ``held``: each
    stall as ``[epoch seconds when it began, seconds]`` (the first ``HELD_KEPT``), so a silence in a
    stream that the client itself caused is not blamed on the server (``stats.stalls``)."""
    perf = time.perf_counter
    out.update(max_stall_ms=0.0, stalls=0, stalled_s=0.0, held=[])
    waited = run_queue_wait()
    if waited is not None:  # Linux: of the stalls, the time this thread was runnable but not running
        out["stalled_waiting_for_cpu_s"] = 0.0
    while True:
        t = perf()
        await asyncio.sleep(period)
        late = perf() - t - period
        now_waited = run_queue_wait() if waited is not None else None
        if late * 1e3 > out["max_stall_ms"]:
            out["max_stall_ms"] = round(late * 1e3, 2)
        if late * 1e3 >= STALL_MS:
            out["stalls"] += 1
            out["stalled_s"] = round(out["stalled_s"] + late, 4)
            if len(out["held"]) < HELD_KEPT:
                out["held"].append([round(time.time() - late, 4), round(late, 4)])
            if now_waited is not None and waited is not None:
                out["stalled_waiting_for_cpu_s"] = round(out["stalled_waiting_for_cpu_s"] + now_waited - waited, 4)
        waited = now_waited


#: every warning ``stall_warning`` writes starts so (tests and reports tell it from the others)
STALL_WARNING_PREFIX = "the load generator itself was held up"


def stall_warning(stalls: dict[str, Any]) -> str | None:
    """The run's warning when the client's own event loop woke up ``STALL_WARN_MS`` late or worse
    (``None`` otherwise); it says how much of the stalled time the client waited for a CPU (other
    processes ran: starved) and how much it was not runnable (blocked in its own code or I/O)."""
    worst = stalls.get("max_stall_ms", 0.0)
    if worst < STALL_WARN_MS:
        return None
    total = stalls.get("stalled_s", 0.0)
    cpu = stalls.get("stalled_waiting_for_cpu_s")
    if cpu is None:
        why = "CPU starved or blocked"
    else:
        why = f"{min(cpu, total):.2f} s of it waiting for a CPU while other processes ran, the rest blocked"
    return (f"{STALL_WARNING_PREFIX}: its event loop ran up to {worst:.0f} ms late ({stalls.get('stalls', 0)} stall(s) "
            f"over {STALL_MS:.0f} ms, {total:.2f} s in all; {why}), so chunk arrival times near it are late by as "
            "much: give the client a core of its own, or start the server nicer than the client "
            "(sweep/calibrate --server-nice 10)")


def run_queue_wait() -> float | None:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux ``/proc/thread-self/schedstat``)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
