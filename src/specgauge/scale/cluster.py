"""Connecting to a Ray cluster: an address, ``auto`` (RAY_ADDRESS or a running cluster, else a local
one), or an instance already initialised by the caller (tests, notebooks). Checks that the workers
import the same specgauge as the driver, since every task and actor runs specgauge's own code."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from specgauge import __version__
from specgauge.scale import ScaleError, require_ray

AUTO = "auto"


@dataclass(frozen=True)
class ClusterInfo:
    address: str
    nodes: int
    cpus: float
    initialised_here: bool  #: this call ran ray.init (``disconnect`` undoes it)

    def describe(self) -> str:
        return f"{self.nodes} node(s), {self.cpus:g} CPU(s)"


def _worker_version() -> str:
    import specgauge

    return specgauge.__version__


def connect(address: str | None = AUTO, flag: str = "--ray") -> ClusterInfo:
    """Joins the cluster at ``address``; ``auto`` (or None) follows Ray's own rule: RAY_ADDRESS, else
    the latest cluster started on this machine, else a new local instance. A Ray already initialised
    by the caller is used as it is."""
    ray = require_ray()
    logging.getLogger("ray").setLevel(logging.ERROR)
    here = False
    if not ray.is_initialized():
        addr = None if address in (None, "", AUTO) else address
        try:
            ray.init(address=addr, log_to_driver=False, include_dashboard=False, logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ScaleError(f"{flag} {address}: cannot join a Ray cluster: {str(e).splitlines()[0]}") from None
        here = True
    logging.getLogger("ray.data").setLevel(logging.ERROR)  # progress chatter; failures still raise
    res = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    info = ClusterInfo(address=str(ray.get_runtime_context().gcs_address), nodes=nodes, cpus=float(res.get("CPU", 0.0)),
                       initialised_here=here)
    if info.cpus <= 0:
        raise ScaleError(f"{flag} {address}: the Ray cluster has no CPUs to run on")
    check_workers(flag)
    return info


def disconnect(info: ClusterInfo) -> None:
    if info.initialised_here:
        require_ray().shutdown()


def check_workers(flag: str = "--ray") -> None:
    """Runs one tiny task: a worker that cannot import specgauge, or imports another version, is a
    user error with the fix, not a traceback deep in a task."""
    ray = require_ray()
    try:
        v = ray.get(ray.remote(num_cpus=0)(_worker_version).remote(), timeout=300)
    except Exception as e:  # noqa: BLE001 — any failure here means the workers cannot run specgauge
        raise ScaleError(
            f"{flag}: Ray workers cannot run specgauge ({type(e).__name__}: {str(e).splitlines()[0][:200]}); install "
            f"specgauge {__version__} with the [ray] extra on every node (or pass it in the job's runtime_env)"
        ) from None
    if v != __version__:
        raise ScaleError(f"{flag}: Ray workers run specgauge {v}, this driver {__version__}: install the same version on every node")


def data_context(preserve_order: bool = True, cpu_limit: float | None = None, max_block_bytes: int | None = None) -> Any:
    """Ray Data's context for specgauge's runs: ordered output (results are merged in workload order),
    no progress bars on the terminal (the CLI draws its own), optionally a CPU cap and a block size
    (Ray Data would otherwise coalesce a reader's output into blocks of 128 MiB: one per file)."""
    require_ray()
    from ray.data import DataContext
    from ray.data._internal.execution.interfaces import ExecutionResources

    ctx = DataContext.get_current()
    ctx.execution_options.preserve_order = preserve_order
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    # Ray Data reserves part of the cluster for each operator of a streaming pipeline (so that
    # downstream stages are not starved). specgauge's pipelines are one map stage each, materialised:
    # the reservation only caps that stage, and on a small cluster (2 CPUs here) it ran the map tasks
    # one at a time (32 blocks: 2.2-3.0 s instead of 1.16 s with both CPUs)
    ctx.op_resource_reservation_enabled = False
    if max_block_bytes is not None:
        ctx.target_max_block_size = max_block_bytes
        ctx.target_min_block_size = min(ctx.target_min_block_size, max_block_bytes // 4)
    if cpu_limit is not None:
        ctx.execution_options.resource_limits = ExecutionResources(cpu=cpu_limit)
    return ctx
