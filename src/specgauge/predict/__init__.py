"""Calibrated speedup prediction: a step-cost law fitted on the user's own server, and a replay of
the workload through a simulated closed-loop bench that turns it into the figures ``compare`` measures.

Boundary: the law, the fit and the prediction (``runs`` → ``observe`` → ``rows`` → ``fit`` → ``profile``;
``law``, ``replay``, ``schedule``, ``predict``) read bench output directories (``results.jsonl`` + ``run.json``)
and workloads with logged outputs, and never touch a server; ``testing.scripted_server`` is a test server
with a known law. Live calibration runs belong to ``specgauge.calibrate`` (outside this package), which
drives the sweep's grid runner and then fits here. Nothing here imports the CLI, the sweep, simulate or stats (tests/unit/test_layers.py).

Public API (used by ``specgauge.sweep`` / ``specgauge.recommend`` / the demo):

* ``CellSpec`` — one grid cell (speculative config + concurrency).
* ``StepCostProfile`` — the fitted law, its provenance and residuals; ``save`` / ``load``.
* ``fit_profile(run_dirs)`` — fit a profile from bench output directories (or sweep directories).
* ``predict_cells(profile, workload, cells)`` — predicted figures per cell (``CellPrediction``).
"""

from __future__ import annotations

from specgauge.predict.fit import fit_profile
from specgauge.predict.predict import predict_cells
from specgauge.predict.profile import StepCostProfile
from specgauge.predict.types import CellPrediction, CellSpec, ProfileError

__all__ = ["CellPrediction", "CellSpec", "ProfileError", "StepCostProfile", "fit_profile", "predict_cells"]
