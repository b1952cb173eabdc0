"""Arrival processes: seeded, pure, with vLLM's rate/burstiness semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgauge.loadgen.arrivals import GammaRate, Immediate, Ramp, Trace, from_flags


def test_same_seed_same_times_other_seed_other_times() -> None:
    a = GammaRate(10.0, 1.0).times(50, seed=1)
    assert a == GammaRate(10.0, 1.0).times(50, seed=1)
    assert a != GammaRate(10.0, 1.0).times(50, seed=2)


def test_normalised_like_vllm_last_send_at_n_over_rate() -> None:
    for b in (0.3, 1.0, 4.0):
        t = GammaRate(20.0, b).times(100, seed=3)
        assert t[-1] == pytest.approx(100 / 20.0)
        assert all(x <= y for x, y in zip(t, t[1:]))


def test_burstiness_changes_gap_dispersion() -> None:
    """CV of gamma gaps is 1/sqrt(shape): bursty (0.25) >> Poisson (1) >> regular (16)."""
    def cv(b: float) -> float:
        g = np.diff([0.0, *GammaRate(5.0, b, normalize=False).times(4000, seed=0)])
        return float(g.std() / g.mean())

    assert cv(0.25) == pytest.approx(2.0, rel=0.15)
    assert cv(1.0) == pytest.approx(1.0, rel=0.1)
    assert cv(16.0) == pytest.approx(0.25, rel=0.15)


def test_poisson_mean_rate_without_normalisation() -> None:
    t = GammaRate(50.0, 1.0, normalize=False).times(5000, seed=7)
    assert len(t) / t[-1] == pytest.approx(50.0, rel=0.05)


def test_infinite_burstiness_is_constant_spacing() -> None:
    t = GammaRate(4.0, math.inf).times(5)
    assert t == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.25])


def test_immediate_and_flags() -> None:
    assert Immediate().times(3) == [0.0, 0.0, 0.0]
    assert isinstance(from_flags(), Immediate)
    assert isinstance(from_flags(request_rate=3.0), GammaRate)
    assert isinstance(from_flags(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=5), Ramp)


def test_ramp_gets_faster() -> None:
    r = Ramp(1.0, 100.0, "exponential", burstiness=math.inf)
    g = np.diff([0.0, *r.times(50)])
    assert g[0] == pytest.approx(1.0) and g[-1] == pytest.approx(0.01)
    assert all(a >= b for a, b in zip(g, g[1:]))


def test_trace_shifted_and_sped_up() -> None:
    assert Trace([100.0, 101.0, 103.0], speed=2.0).times(3) == [0.0, 0.5, 1.5]
    with pytest.raises(ValueError, match="2 arrival times"):
        Trace([1.0, 2.0]).times(3)


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"request_rate": 0.0}, "positive"),
        ({"request_rate": 1.0, "burstiness": 0.0}, "burstiness"),
        ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1}, "needs"),
        ({"request_rate": 2.0, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 3}, "leave --request-rate"),
        ({"ramp_up_strategy": "exponential", "ramp_up_start_rps": 0, "ramp_up_end_rps": 3}, "cannot start at 0"),
    ],
)
def test_bad_flags_have_clear_messages(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        from_flags(**kwargs)
