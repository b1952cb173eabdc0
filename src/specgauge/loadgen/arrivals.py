"""Arrival processes: seeded, pure generators of scheduled send times.

Each strategy is a small object whose ``times(n, seed)`` returns ``n`` non-decreasing send offsets
in seconds from the run start. Nothing here sleeps or reads a clock; the runner turns scheduled
times into actual sends and records both.

- ``Immediate``: every request at t=0 (``--request-rate inf``); with ``--max-concurrency`` this is
  the fixed-concurrency (closed-loop) mode, the semaphore deciding the actual send time.
- ``GammaRate``: gamma-distributed gaps with mean 1/rate and shape ``burstiness`` exactly as
  ``vllm bench serve --burstiness`` (1.0 is Poisson, < 1 burstier, > 1 more regular, inf constant
  spacing); like vLLM the cumulative times are rescaled so the last lands at n/rate.
- ``Ramp``: rate ramping linearly or exponentially from start to end rps (vLLM's ramp-up).
- ``Trace``: logged arrival times replayed, shifted to start at 0, divided by a speed factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np


class Arrivals(Protocol):
    def times(self, n: int, seed: int = 0) -> list[float]: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Immediate:
    def times(self, n: int, seed: int = 0) -> list[float]:
        return [0.0] * n

    def describe(self) -> str:
        return "all at once (request rate inf)"


@dataclass(frozen=True)
class GammaRate:
    rate: float
    burstiness: float = 1.0
    normalize: bool = True  #: as vLLM: rescale so the last send is at n / rate

    def __post_init__(self) -> None:
        if not self.rate > 0 or math.isinf(self.rate):
            raise ValueError(f"request rate must be a positive finite number, got {self.rate}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")

    def times(self, n: int, seed: int = 0) -> list[float]:
        if n <= 0:
            return []
        if math.isinf(self.burstiness):
            gaps = np.full(n, 1.0 / self.rate)
        else:
            rng = np.random.default_rng(seed)
            theta = 1.0 / (self.rate * self.burstiness)
            gaps = rng.gamma(shape=self.burstiness, scale=theta, size=n)
        t = np.cumsum(gaps)
        if self.normalize and t[-1] > 0:
            t *= (n / self.rate) / t[-1]
        return t.tolist()

    def describe(self) -> str:
        kind = "Poisson process" if self.burstiness == 1.0 else "Gamma distribution"
        return f"{self.rate:g} req/s, burstiness {self.burstiness:g} ({kind})"


@dataclass(frozen=True)
class Ramp:
    start_rps: float
    end_rps: float
    strategy: Literal["linear", "exponential"] = "linear"
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.start_rps < 0 or self.end_rps <= 0 or self.start_rps > self.end_rps:
            raise ValueError(f"ramp needs 0 <= start_rps <= end_rps, end > 0; got {self.start_rps}->{self.end_rps}")
        if self.strategy == "exponential" and self.start_rps == 0:
            raise ValueError("an exponential ramp cannot start at 0 rps")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")

    def rate_at(self, i: int, n: int) -> float:
        p = i / max(n - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * p
        return self.start_rps * (self.end_rps / self.start_rps) ** p

    def times(self, n: int, seed: int = 0) -> list[float]:
        rng = np.random.default_rng(seed)
        out: list[float] = []
        t = 0.0
        for i in range(n):
            r = max(self.rate_at(i, n), 1e-9)
            if math.isinf(self.burstiness):
                gap = 1.0 / r
            else:
                gap = float(rng.gamma(shape=self.burstiness, scale=1.0 / (r * self.burstiness)))
            t += gap
            out.append(t)
        return out

    def describe(self) -> str:
        return f"{self.strategy} ramp {self.start_rps:g} -> {self.end_rps:g} req/s"


@dataclass(frozen=True)
class Trace:
    """Replays logged arrival times (any origin, seconds) at ``speed``× (2.0 = twice as fast)."""

    arrival_times: Sequence[float]
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"trace speed must be > 0, got {self.speed}")
        if any(not math.isfinite(t) for t in self.arrival_times):
            raise ValueError("trace arrival times must be finite numbers")

    def times(self, n: int, seed: int = 0) -> list[float]:
        if n > len(self.arrival_times):
            raise ValueError(f"the trace has {len(self.arrival_times)} arrival times, {n} requests asked")
        ts = list(self.arrival_times[:n])
        if not ts:
            return []
        t0 = min(ts)
        return [(t - t0) / self.speed for t in ts]

    def describe(self) -> str:
        return f"trace replay at {self.speed:g}x"


def from_flags(
    request_rate: float = math.inf,
    burstiness: float = 1.0,
    ramp_up_strategy: Literal["linear", "exponential"] | None = None,
    ramp_up_start_rps: float | None = None,
    ramp_up_end_rps: float | None = None,
    trace: Sequence[float] | None = None,
    trace_speed: float = 1.0,
) -> Arrivals:
    """The arrival process ``vllm bench serve``'s flags describe (plus trace replay)."""
    if trace is not None:
        return Trace(trace, trace_speed)
    if ramp_up_strategy is not None:
        if not math.isinf(request_rate):
            raise ValueError("with a ramp-up, leave --request-rate unset (the ramp sets the rate)")
        if ramp_up_start_rps is None or ramp_up_end_rps is None:
            raise ValueError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        return Ramp(ramp_up_start_rps, ramp_up_end_rps, ramp_up_strategy, burstiness)
    if math.isinf(request_rate):
        return Immediate()
    return GammaRate(request_rate, burstiness)
