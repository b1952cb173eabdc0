"""``run_bench(BenchConfig) -> BenchResult``: a run (or a resumed one) from the output directory's
point of view: refuse what would mix two runs, send what is left in one ``BenchSession``, keep every
finished request whatever happens, then summarise every record on disk (``stats.summary``) and check
the server's acceptance against its outputs (``stats.replay_check``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from specgauge import __version__
from specgauge.bench.config import BenchConfig, BenchError, plan_requests
from specgauge.bench.session import BenchSession
from specgauge.i18n import en, t
from specgauge.loadgen.probe import auth_headers, unreachable
from specgauge.loadgen.runner import run_async
from specgauge.paths import public_url
from specgauge.records import BenchSummary, RequestRecord, ResultsFile, RunRecord, SessionRecord
from specgauge.stats.latency import parse_goodput
from specgauge.stats.replay_check import check_bench_run
from specgauge.stats.summary import counter_total, summarize
from specgauge.workload.schema import Request


@dataclass
class BenchResult:
    record: BenchSummary
    output_dir: Path

    @property
    def summary(self) -> dict[str, Any]:
        """``summary.json`` as written (vLLM's keys, then ``specgauge``)."""
        return self.record.to_json()

    @property
    def exit_code(self) -> int:
        """0 when every request succeeded, 1 when any failed (the run itself completed)."""
        return 1 if self.record.failed else 0


class _Progress:
    """A rich progress bar with live output throughput and acceptance."""

    def __init__(self, total: int, done: int, enabled: bool, console: Any) -> None:
        self.enabled = enabled
        self.tokens = 0
        self.acc = 0
        self.drafted = 0
        self.t0 = time.perf_counter()
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.p = Progress(
            TextColumn(t("bench.p.label")), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[live]}"), console=console, transient=False,
        )
        self.task = self.p.add_task("bench", total=total, completed=done, live="")
        self.p.start()

    def update(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.tokens += rec.output_tokens or 0
            if rec.spec is not None and rec.spec.draft_tokens:
                self.acc += rec.spec.accepted_tokens or 0
                self.drafted += rec.spec.draft_tokens
        if not self.enabled:
            return
        dt = max(time.perf_counter() - self.t0, 1e-9)
        live = f"{self.tokens / dt:,.1f} tok/s"
        if self.drafted:
            live += t("bench.p.acceptance", pct=f"{100 * self.acc / self.drafted:.1f}")
        self.p.update(self.task, advance=1, live=live)

    def stop(self) -> None:
        if self.enabled:
            self.p.stop()


def run_bench(cfg: BenchConfig, console: Any = None) -> BenchResult:
    """Runs (or resumes) one benchmark; writes results.jsonl, run.json, summary.json."""
    percentiles, selected, goodput = _checked_flags(cfg)
    reqs = _planned(cfg)
    made = _first_missing(Path(cfg.output_dir))
    out = _OutputDir(cfg, reqs)  # the local checks (a usable directory, no other run's results) first
    try:
        _check_server_answers(cfg)
    except BenchError:  # a wrong URL leaves no empty results folder behind
        if made is not None:
            _remove_empty(Path(cfg.output_dir), made)
        raise
    run, sessions, existing = out.run, out.sessions, out.existing
    done_ids = {r.id for r in existing}
    run.resumed_from = len(done_ids)
    todo = [(i, r) for i, r in enumerate(reqs) if r.id not in done_ids]
    progress = _Progress(len(reqs), len(done_ids), cfg.progress, console)

    def on_record(rec: RequestRecord) -> None:
        out.results.append(rec)
        progress.update(rec)

    out.results.open()
    sess: SessionRecord | None = None
    try:
        if todo:
            sess = run_async(BenchSession(cfg, reqs, todo, run, on_record).measure())  # uvloop where installed
    except KeyboardInterrupt:
        run.warnings.append("interrupted: finished requests are saved; rerun with --resume to continue")
        sess = SessionRecord(interrupted=True)
        raise BenchError(f"interrupted; {out.results.path} keeps every finished request — rerun with --resume") from None
    except (aiohttp.ClientError, OSError) as e:
        raise BenchError(f"cannot reach {cfg.base_url}: {e}") from None
    finally:
        out.results.close()
        progress.stop()
        if sess is not None:
            sessions.append(sess)
        run.sessions = sessions
        out.write(out.run_path, run.model_dump(mode="json"))
    records = out.results.existing()
    summary = summarize(records, sessions, run, cfg.public(), percentiles, selected, goodput)
    assert summary.specgauge is not None
    summary.specgauge.replay_check = check_bench_run(  # does the server accept what its outputs allow?
        records, cfg.speculative_config, run.server, counter_total(sessions)[0], run.warmups).model_dump(mode="json")
    out.write(out.path / "summary.json", summary.to_json())
    return BenchResult(summary, out.path)


def _checked_flags(cfg: BenchConfig) -> tuple[list[float], list[str], dict[str, float]]:
    """The percentiles, metrics and goodput SLOs asked for; the flags that cannot go together refused."""
    percentiles, selected = cfg.percentiles(), cfg.selected_metrics()
    url = urlsplit(cfg.base_url)
    if url.path.rstrip("/").endswith("/v1"):  # every path bench sends starts with /v1/ already
        root = public_url(cfg.base_url).rstrip("/").removesuffix("/v1")
        raise BenchError(en("err.bench.v1", url=public_url(cfg.base_url), root=root))
    if cfg.api_key is not None and (url.username is not None or url.password is not None):
        raise BenchError(f"--base-url {public_url(cfg.base_url)} carries user:password and --api-key is given: one "
                         "Authorization header cannot hold both; drop one")
    try:
        goodput = parse_goodput(cfg.goodput)
    except ValueError as e:
        raise BenchError(f"--goodput: {e}") from None
    return percentiles, selected, goodput


def _check_server_answers(cfg: BenchConfig) -> None:
    """One line and nothing written when no server answers at ``--base-url`` (without this, ``--model``
    sent every request into connection errors and left a results folder of failures)."""
    api_key = cfg.api_key.get_secret_value() if cfg.api_key else None
    why = run_async(unreachable(cfg.base_url, auth_headers(api_key)))
    if why is not None:
        url = public_url(cfg.base_url)
        raise BenchError(en("err.bench.refused", url=url) if why[0] == "refused" else
                         en("err.bench.unreachable", url=url, why=why[1]))


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (None: it exists)."""
    path = path.absolute()
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing


def _remove_empty(path: Path, up_to: Path) -> None:
    """Removes ``path`` and its parents up to ``up_to``, each only while empty."""
    path = path.absolute()
    while True:
        try:
            path.rmdir()
        except OSError:
            return
        if path == up_to or path.parent == path:
            return
        path = path.parent


def _planned(cfg: BenchConfig) -> list[Request]:
    """The workload's requests in the order and number they will be sent."""
    from specgauge.workload.loaders import LoadOptions, load_workload

    items = load_workload(cfg.workload, LoadOptions(segment_by=cfg.segment_by))
    reqs = plan_requests([it.request for it in items], cfg.num_prompts, cfg.max_tokens)
    if cfg.endpoint is not None:
        want = "chat" if "chat" in cfg.endpoint else "completion"
        wrong = [r.id for r in reqs if r.api.value != want]
        if wrong:
            raise BenchError(f"--endpoint {cfg.endpoint} takes {want} requests; {wrong[0]} (and {len(wrong) - 1} more) is not")
    return reqs


class _OutputDir:
    """The output directory of one run: ``results.jsonl`` (the records already there), ``run.json``
    (the sessions and warnings of a run being resumed). Refuses what would mix two runs."""

    def __init__(self, cfg: BenchConfig, reqs: list[Request]) -> None:
        self.path = out = Path(cfg.output_dir)
        self.results = ResultsFile(out / "results.jsonl", fsync=cfg.fsync)
        self.run_path = out / "run.json"
        try:
            out.mkdir(parents=True, exist_ok=True)
            self.existing = self.results.existing()
        except OSError as e:
            raise BenchError(f"--output-dir {out}: {e.strerror or e}") from None
        except ValueError as e:
            raise BenchError(str(e)) from None
        if self.existing and not cfg.resume:
            raise BenchError(f"{self.results.path} already holds {len(self.existing)} results; pass --resume to continue it, "
                             "or another --output-dir")
        self.run = RunRecord(specgauge_version=__version__, started_at=time.time(), config=cfg.public(), dialect=cfg.dialect)
        self.sessions: list[SessionRecord] = []
        planned = {r.id for r in reqs}
        strangers = [r.id for r in self.existing if r.id not in planned]
        if strangers:  # records of another workload (or --num-prompts / --seed): resuming would mix two runs
            raise BenchError(f"--resume: {self.results.path} holds {len(strangers)} records this workload does not plan (e.g. "
                             f"{strangers[0]!r}); it belongs to another run: use another --output-dir")
        if cfg.resume and self.run_path.exists():
            self._resume()

    def _resume(self) -> None:
        run, run_path = self.run, self.run_path
        try:
            prev = json.loads(run_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BenchError(f"--resume: {run_path} is unreadable ({str(e).splitlines()[0]}); move it away to resume") from None
        if not isinstance(prev, dict):
            raise BenchError(f"--resume: {run_path} is not a specgauge run record; move it away to resume")
        pw = prev.get("config", {}).get("workload")
        if pw is not None and pw != run.config.get("workload"):
            raise BenchError(f"--resume: {self.path} was run with workload {pw!r}, not {run.config.get('workload')!r}; resuming "
                             "would mix two workloads' records: use another --output-dir")
        try:
            self.sessions = [SessionRecord.model_validate(s) for s in list(prev.get("sessions") or [])]
        except (TypeError, ValueError) as e:
            raise BenchError(f"--resume: {run_path}: a session is not a specgauge session record "
                             f"({str(e).splitlines()[0]}); move it away to resume") from None
        run.warnings = list(prev.get("warnings", []))
        run.started_at = prev.get("started_at", run.started_at)
        for k in ("base_url", "model", "workload", "num_prompts", "seed"):
            if prev.get("config", {}).get(k) != run.config.get(k):
                run.warnings.append(f"resumed with a different {k}: {prev.get('config', {}).get(k)!r} -> {run.config.get(k)!r}")

    def write(self, path: Path, data: dict[str, Any]) -> None:
        """Written whole or not at all; a write that fails is one line saying the results are kept."""
        try:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=False))
            tmp.replace(path)
        except OSError as e:
            raise BenchError(f"{path}: cannot write ({e.strerror or e}); every finished request is kept in "
                             f"{self.results.path}") from None
