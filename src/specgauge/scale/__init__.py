"""Scale-out on Ray (optional extra ``specgauge[ray]``): offline replay of logs too big for one
machine, load generation from many hosts.

Boundary: this package only distributes work that the single-process code already defines. Reading
goes through ``specgauge.workload.loaders`` (so every bad record still reads ``FILE:LINE``), replay
through ``specgauge.simulate.run`` (the same drafters, the same ``ReplayTally``), requests through
``specgauge.loadgen.runner`` (the same request function and SSE parser). It adds the placement (which
worker does what), the ordering that keeps results equal to a single-process run, and the fault
handling of a cluster. Nothing here is imported unless ``--ray`` / ``--ray-workers`` is asked for, and
nothing else in specgauge imports Ray.

- ``cluster``: connect to a cluster (or start a local one), check the workers run this specgauge.
- ``replay``: ``simulate --ray`` (driver: plan, merge); ``replay_tasks``: what runs on the workers.
- ``loadgen``: ``bench --ray-workers N``: async actors each sending a shard of one arrival schedule.
"""

from __future__ import annotations

from types import ModuleType

from specgauge.errors import UserError

INSTALL_HINT = "pip install 'specgauge[ray]'"


class ScaleError(UserError):
    """A scale-out problem the user can fix: Ray missing, cluster unreachable, workers without specgauge."""


def require_ray() -> ModuleType:
    """``ray``, or a ScaleError saying how to install it."""
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ScaleError(f"Ray is not installed ({e.name or e}); {INSTALL_HINT}") from None
    return ray


def ray_available() -> str | None:
    """None when Ray (with Ray Data) imports, else why not (for test skips and --help)."""
    try:
        require_ray()
    except ScaleError as e:
        return str(e)
    return None
