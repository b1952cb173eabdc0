"""The grid runner: one server per configuration, one bench run per (configuration, concurrency).

``run_grid`` is the library call ``sweep`` and ``calibrate`` share. Per configuration it starts the
server (or uses a running one), benches each pending concurrency into ``OUT/<label>/c<C>/`` with
``specgauge.bench.run_bench`` (same workload, ``num_prompts`` and seed in every cell, so compare
pairs requests by id), stops the server, and records every cell's status in ``OUT/sweep.json``
as it changes.

- resume: cells already done are skipped; a cell broken halfway is continued with bench's own
  resume (requests already in its ``results.jsonl`` are not sent again).
- time budget: counted from the call's start; a cell (or a server start) begins only while budget
  is left; a cell already running is finished. Cells not run are listed as ``skipped`` with the
  reason, never dropped.
- a server that does not start fails its configuration's cells (with the log's path); the other
  configurations still run. Ctrl-C marks the running cell ``interrupted`` and stops the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgauge.errors import UserError
from specgauge.i18n import translate
from specgauge.paths import portable_path, resolve_specs
from specgauge.predict.types import CellSpec
from specgauge.servers import ServerStartError
from specgauge.sweep.grid import dir_name
from specgauge.sweep.models import MANIFEST, CellRun, SweepError, SweepManifest, SweepSettings
from specgauge.sweep.target import ServerTarget, open_server


@dataclass
class SweepResult:
    """What ``run_grid`` (and ``run_sweep``) hand back: the directory and its manifest."""

    out_dir: Path
    manifest: SweepManifest
    ran: list[tuple[str, int]] = field(default_factory=list)  #: cells benched in this call

    def cell_dir(self, label: str, concurrency: int) -> Path:
        c = self.manifest.cell(label, concurrency)
        if c is None:
            raise KeyError((label, concurrency))
        return self.out_dir / c.dir

    @property
    def done(self) -> list[CellRun]:
        return self.manifest.by_status("done")

    @property
    def skipped(self) -> list[CellRun]:
        return self.manifest.by_status("skipped")

    @property
    def failed(self) -> list[CellRun]:
        return self.manifest.by_status("failed", "interrupted")


def cell_dir_name(label: str, concurrency: int) -> str:
    return f"{dir_name(label)}/c{concurrency}"


def _fmt_budget(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.3g} s"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _check_cells(cells: Sequence[CellSpec]) -> dict[str, dict[str, Any] | None]:
    if not cells:
        raise SweepError("the grid has no cells")
    specs: dict[str, dict[str, Any] | None] = {}
    seen: set[tuple[str, int]] = set()
    for c in cells:
        if c.label in specs and specs[c.label] != c.speculative_config:
            raise SweepError(f"two different configurations are labelled {c.label!r}")
        specs[c.label] = c.speculative_config
        if (c.label, c.concurrency) in seen:
            raise SweepError(f"cell {c.label} at concurrency {c.concurrency} is in the grid twice")
        seen.add((c.label, c.concurrency))
    dirs: dict[str, str] = {}
    for lb in specs:
        d = dir_name(lb)
        if d in dirs:
            raise SweepError(f"labels {dirs[d]!r} and {lb!r} map to the same directory {d!r}; rename one")
        dirs[d] = lb
    return specs


def _same_dirs(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """A config with its model directories absolute, so that a draft model named by a relative path
    now and stored resolved (``resolve_specs``) compares equal."""
    return resolve_specs({"speculative_config": spec}, Path.cwd())["speculative_config"] if spec else spec  # type: ignore[index]


def _open_manifest(out_dir: Path, settings: SweepSettings, target: ServerTarget, cells: Sequence[CellSpec],
                   resume: bool, time_budget_s: float | None) -> SweepManifest:
    path = out_dir / MANIFEST
    if path.exists():
        if not resume:
            raise SweepError(f"{path} already holds a sweep; pass --resume to continue it, or another output directory")
        m = SweepManifest.load(path)
        old = m.settings
        for name in ("workload", "num_prompts", "seed"):
            if getattr(old, name) != getattr(settings, name):
                raise SweepError(f"--resume: {path} was run with {name}={getattr(old, name)!r}, not {getattr(settings, name)!r}; "
                                 "cells must share them to be paired — use the same settings, or another output directory")
        m.target = target.public()
        m.time_budget_s = time_budget_s
    else:
        if not resume:
            busy = [c for c in cells if (out_dir / cell_dir_name(c.label, c.concurrency) / "results.jsonl").exists()]
            if busy:
                raise SweepError(f"{out_dir / cell_dir_name(busy[0].label, busy[0].concurrency)} already holds results; "
                                 "pass --resume to continue, or another output directory")
        m = SweepManifest(settings=settings, target=target.public(), time_budget_s=time_budget_s)
    for c in cells:
        rec = m.cell(c.label, c.concurrency)
        if rec is None:
            m.cells.append(CellRun(label=c.label, concurrency=c.concurrency, speculative_config=c.speculative_config,
                                   dir=cell_dir_name(c.label, c.concurrency)))
        elif _same_dirs(rec.speculative_config) != _same_dirs(c.speculative_config):
            raise SweepError(f"--resume: {rec.label} at concurrency {rec.concurrency} was run with "
                             f"{rec.speculative_config!r}, now {c.speculative_config!r}; label the new config differently")
    return m


def _finished(out_dir: Path, rec: CellRun) -> bool:
    return rec.status == "done" and (out_dir / rec.dir / "summary.json").exists()


def run_grid(
    cells: Sequence[CellSpec],
    target: ServerTarget,
    workload: Sequence[Path],
    out_dir: Path,
    *,
    num_prompts: int | None = None,
    seed: int = 0,
    time_budget_s: float | None = None,
    resume: bool = False,
    console: Any = None,
    warmup: int = 1,
    timeout: float = 600.0,
    on_cell: Callable[[CellRun], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SweepResult:
    """Bench every cell (see the module docstring); returns the manifest as it stands at the end.

    ``console``: a rich console for bench's progress bars and one line per cell (None: silent).
    ``warmup``: requests each cell sends first and never records (a fresh server's first requests
    pay its warm-up). ``on_cell`` is called after each cell's status is saved. ``clock``: seconds, for
    the time budget (a test passes its own)."""
    if time_budget_s is not None and time_budget_s <= 0:
        raise SweepError("--time-budget must be positive")
    specs = _check_cells(cells)
    target.check_labels(list(specs), {lb: s is not None for lb, s in specs.items()})
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SweepError(f"output directory {out_dir}: {e.strerror or e}") from None
    settings = SweepSettings(workload=[portable_path(p, out_dir) for p in workload], num_prompts=num_prompts, seed=seed)
    m = _open_manifest(out_dir, settings, target, cells, resume, time_budget_s)
    m.save(out_dir)
    result = SweepResult(out_dir=out_dir, manifest=m)
    grid = _Grid(out_dir, m, result, console, clock, time_budget_s)
    bench = _CellBench(workload, num_prompts, seed, warmup, timeout, target, console)
    max_batch = max(c.concurrency for c in cells)
    wanted = {(c.label, c.concurrency) for c in cells}
    for label, spec in specs.items():
        todo = sorted((r for r in m.cells if r.label == label and r.key in wanted and not _finished(out_dir, r)),
                      key=lambda r: r.concurrency)
        if not todo:
            grid.say(f"{label}: every cell already done, skipped")
            continue
        if not grid.budget_left():
            grid.skip(todo)
            continue
        grid.say(f"{label}: starting the server" if target.kind != "urls" else f"{label}: server {target.public()['urls'][label]}")
        try:
            with open_server(target, label, spec, out_dir / dir_name(label) / "server.log", max_batch) as (url, log):
                for rec in todo:
                    if not grid.budget_left():
                        grid.skip([rec])
                        continue
                    grid.run_cell(rec, label, url, log, bench)
                    if on_cell is not None:
                        on_cell(rec)
        except ServerStartError as e:
            for r in todo:
                if r.status in ("pending", "running", "interrupted", "failed"):
                    r.status, r.error = "failed", grid.rel(_first_line(e))
            m.save(out_dir)
            grid.say(f"{label}: {_first_line(e)}")
        except KeyboardInterrupt:
            if grid.running is not None:
                grid.running.status, grid.running.error = "interrupted", "interrupted (Ctrl-C); rerun with --resume to continue it"
                grid.running.finished_at = time.time()
            m.save(out_dir)
            raise
    return result


@dataclass
class _CellBench:
    """What every cell's bench run shares (its config but the server URL, the concurrency and the directory)."""

    workload: Sequence[Path]
    num_prompts: int | None
    seed: int
    warmup: int
    timeout: float
    target: ServerTarget
    console: Any

    def run(self, url: str, cdir: Path, concurrency: int, resume: bool) -> Any:
        from specgauge.bench import BenchConfig, run_bench

        cfg = BenchConfig(base_url=url, workload=list(self.workload), output_dir=cdir, max_concurrency=concurrency,
                          num_prompts=self.num_prompts, seed=self.seed, resume=resume, warmup=self.warmup,
                          timeout=self.timeout, progress=self.console is not None, api_key=self.target.api_key)
        return run_bench(cfg, console=self.console)


@dataclass
class _Grid:
    """One run of the grid: the manifest it keeps saved, its messages and its time budget."""

    out_dir: Path
    m: SweepManifest
    result: SweepResult
    console: Any
    clock: Callable[[], float]
    time_budget_s: float | None
    running: CellRun | None = None  #: the cell being benched (Ctrl-C marks it interrupted)
    t0: float = field(init=False)

    def __post_init__(self) -> None:
        self.t0 = self.clock()

    def rel(self, text: str) -> str:
        """Messages name paths inside the sweep relative to it."""
        for root in {str(self.out_dir.resolve()), str(self.out_dir)}:
            text = text.replace(root + "/", "")
        return text

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(translate(text), highlight=False, markup=False)

    def budget_left(self) -> bool:
        return self.time_budget_s is None or self.clock() - self.t0 < self.time_budget_s

    def skip(self, recs: list[CellRun]) -> None:
        """Cells the time budget leaves out."""
        assert self.time_budget_s is not None
        why = f"time budget of {_fmt_budget(self.time_budget_s)} spent before this cell ({self.clock() - self.t0:.0f} s elapsed)"
        for r in recs:
            r.status, r.skipped_reason = "skipped", why
        self.m.save(self.out_dir)

    def run_cell(self, rec: CellRun, label: str, url: str, log: Path | None, bench: _CellBench) -> None:
        """Bench one cell on its running server; its status is saved before and after."""
        cdir = self.out_dir / rec.dir
        partial = (cdir / "results.jsonl").exists()
        rec.status, rec.started_at, rec.error, rec.skipped_reason = "running", time.time(), None, None
        rec.server_log = str(log.relative_to(self.out_dir)) if log is not None else None
        self.m.save(self.out_dir)
        self.running = rec
        self.say(f"{label} at concurrency {rec.concurrency}{' (resuming its bench run)' if partial else ''}")
        try:
            res = bench.run(url, cdir, rec.concurrency, partial)
        except UserError as e:
            if str(e).startswith("interrupted"):  # bench turns Ctrl-C into its own error: stop the sweep
                raise KeyboardInterrupt from None
            rec.status, rec.error = "failed", self.rel(_first_line(e))
        else:
            rec.status = "done"
            rec.requests = res.record.completed + res.record.failed
            rec.failed = res.record.failed
            self.result.ran.append(rec.key)
        rec.finished_at = time.time()
        rec.duration_s = rec.finished_at - (rec.started_at or rec.finished_at)
        self.running = None
        self.m.save(self.out_dir)
        if rec.status == "failed":
            self.say(f"  failed: {rec.error}")
