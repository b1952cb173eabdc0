"""``specgauge bench``: the library entry ``run_bench(BenchConfig) -> BenchResult``.

Flags are named as in ``vllm bench serve`` where they mean the same. Output directory:
- ``results.jsonl``: one ``RequestRecord`` per finished request, appended and flushed as it ends;
- ``run.json``: the ``RunRecord``: the config (``api_key`` never written), server identity, dialect,
  and per session a ``SessionRecord`` (the ``/metrics`` snapshots before/after, their diff,
  device-memory samples);
- ``summary.json``: the ``BenchSummary``: ``vllm bench serve``-compatible keys at the top level plus
  ``specgauge`` (per-token ITL, distributions, failures by class, acceptance per request / segment /
  counters).
``resume`` continues a broken run: ids already in ``results.jsonl`` are not sent again.

Modules: ``config`` (settings, the request plan, arrivals), ``session`` (one (re)start: probe ->
instruments -> measure -> record), ``benchmark`` (the output directory, resume, summary).
"""

from specgauge.bench.benchmark import BenchResult, run_bench
from specgauge.bench.config import PERCENTILE_METRICS, BenchConfig, BenchError, arrival_process, plan_requests
from specgauge.bench.session import BenchSession

__all__ = ["PERCENTILE_METRICS", "BenchConfig", "BenchError", "BenchResult", "BenchSession", "arrival_process",
           "plan_requests", "run_bench"]
