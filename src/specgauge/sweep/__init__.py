"""Sweeps: bench a grid of server configurations × concurrencies, then analyse it.

Boundary: this package starts servers (through ``specgauge.servers``) and drives ``specgauge.bench``;
it turns the cells' bench output directories into measured figures with ``specgauge.stats`` and sets
``specgauge.predict``'s predictions beside them. It never prints tables (``specgauge.report.sweep``
does) and knows nothing about the CLI.

- ``grid``: configurations ("off" first), labels, the ``--method/--k`` shorthand, cells;
- ``target``: where servers come from (embedded, a command template, running URLs);
- ``runner``: ``run_grid`` — one server per configuration, one bench run per cell, resumable, with a
  time budget, ``sweep.json`` kept current;
- ``analysis``: speedup CIs vs the baseline, latency, acceptance, equivalence, Pareto front,
  crossover, predicted beside measured;
- ``run``: ``run_sweep`` = the grid, then the analysis, written into ``sweep.json``.
"""

from __future__ import annotations

from specgauge.predict.types import CellSpec
from specgauge.sweep.models import CellRun, SweepAnalysis, SweepError, SweepManifest
from specgauge.sweep.runner import SweepResult, run_grid
from specgauge.sweep.target import ServerTarget

__all__ = ["CellRun", "CellSpec", "ServerTarget", "SweepAnalysis", "SweepError", "SweepManifest", "SweepResult", "run_grid"]
