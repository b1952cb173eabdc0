"""Load what the user passes to ``compare`` / ``report`` from disk, whatever it is.

- a bench output directory (``results.jsonl`` + ``run.json`` + ``summary.json``), or a
  ``results.jsonl`` alone;
- a simulate result (``specgauge simulate --json``), a workload profile (``specgauge profile --json``),
  a comparison (``specgauge compare --json``): JSON files told apart by their keys.
- another tool's result (``bench.foreign``): ``vllm bench serve --save-result`` JSON, AIPerf's
  ``profile_export.jsonl`` (or its artifacts directory), a GuideLLM report (``FILE#N`` for one of its
  benchmarks); loaded as records with notes saying what the tool did not record.
For a bench run, the workload named in ``run.json`` is read (when it is still there) for each
request's prompt and temperature: records keep timings and outputs, not the request.
Bad input raises ``RunLoadError`` naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specgauge.errors import UserError
from specgauge.i18n import en
from specgauge.paths import resolve_portable
from specgauge.records import RequestRecord, ResultsFile, SessionRecord, SpecCounts
from specgauge.simulate.compare import compare_simulations
from specgauge.simulate.run import SimulateResult
from specgauge.stats.compare import AcceptanceStats, CompareConfig
from specgauge.stats.summary import counter_total
from specgauge.stats.equivalence import load_scorer
from specgauge.stats.memory import compare_memory
from specgauge.stats.diagnosis import diagnose
from specgauge.offline.record_fields import speculative_config_of_server
from specgauge.stats.stalls import Held
from specgauge.stats.ttft import TtftSplit, split_ttft
from specgauge.stats.verdict import ComparisonResult, RunInfo, Verdict, VerdictCriteria, decide, decide_simulations
from specgauge.workload.profile import WorkloadProfile

_CYCLE = re.compile(r"~r\d+$")  #: bench suffixes repeated requests' ids with ~rN


class RunLoadError(UserError):
    pass


class LoadedRun(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    kind: Literal["bench", "results", "simulate", "profile", "compare"]
    path: Path
    label: str
    records: list[RequestRecord] = Field(default_factory=list)
    run: dict[str, Any] | None = None  #: run.json
    summary: dict[str, Any] | None = None  #: summary.json
    simulate: SimulateResult | None = None
    profile: WorkloadProfile | None = None
    compare: ComparisonResult | None = None
    prompts: dict[str, str] = Field(default_factory=dict)  #: request id -> prompt text (from the workload)
    temperatures: dict[str, float | None] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        d = (self.summary or {}).get("duration")
        return float(d) if isinstance(d, (int, float)) and d > 0 else None

    @property
    def max_concurrency(self) -> int | None:
        c = ((self.run or {}).get("config") or {}).get("max_concurrency")
        if isinstance(c, int):
            return c
        peak = (self.summary or {}).get("max_concurrent_requests")
        return peak if isinstance(peak, int) and peak > 0 else None

    @property
    def speculative(self) -> bool | None:
        """True when the server drafted tokens (per-request counts or counters), None when unknown."""
        if any(r.spec is not None and r.spec.draft_tokens for r in self.records):
            return True
        if self.summary is not None:
            return bool(self.summary.get("spec_decode_draft_tokens"))
        counters, _ = self.counters()
        if counters is not None:
            return bool(counters.draft_tokens)
        sessions = self.sessions()
        if sessions and all(s.counters_read for s in sessions):
            return False  # /metrics was read before and after every session and showed no speculative counter
        return None

    def sessions(self) -> list[SessionRecord]:
        """run.json's sessions, typed; an entry that is not a session counts as one whose counters
        were not read (so counters are never claimed to cover the run)."""
        out = []
        for s in (self.run or {}).get("sessions") or []:
            try:
                out.append(SessionRecord.model_validate(s))
            except ValueError:
                out.append(SessionRecord())
        return out

    def counters(self) -> tuple[SpecCounts | None, str]:
        """The run's speculative counters from the /metrics diff: summed over run.json's sessions,
        else summary.json's copy; None with the reason when neither has them."""
        sessions = self.sessions()
        if sessions:
            return counter_total(sessions)
        block = (((self.summary or {}).get("specgauge") or {}).get("acceptance") or {}).get("counters") or {}
        if block.get("available"):
            return SpecCounts.from_numbers(block.get("drafts"), block.get("draft_tokens"), block.get("accepted_tokens"),
                                           block.get("accepted_per_pos"), block.get("source") or ""), ""
        if block:
            return None, str(block.get("reason") or en("acc.r.no_counters"))
        return None, en("acc.r.no_sessions")

    def acceptance(self) -> AcceptanceStats:
        """Per-request counts when the records have them, else the /metrics diff (``origin`` says which)."""
        counters, why = self.counters() if self.kind in ("bench", "results") else (None, "")
        return AcceptanceStats.of(self.records, counters, why)

    def info(self) -> RunInfo:
        return RunInfo(label=self.label, path=str(self.path), kind=self.kind, requests=len(self.records) or None,
                       max_concurrency=self.max_concurrency, speculative=self.speculative, duration_s=self.duration_s)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise RunLoadError(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise RunLoadError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None


def _records(path: Path) -> list[RequestRecord]:
    try:
        recs = ResultsFile(path).read()  # read only: never cut a line from a file handed to report
    except ValueError as e:
        kind = _workload_kind(path)
        if kind is not None:  # "9 validation errors for RequestRecord" said nothing useful
            raise RunLoadError(en("err.report.workload", path=path, format=kind, name=path.name)) from None
        raise RunLoadError(str(e)) from None
    except OSError as e:
        raise RunLoadError(f"{path}: cannot read: {e}") from None
    if not recs:
        raise RunLoadError(f"{path}: no request records")
    return recs


def _workload_kind(path: Path) -> str | None:
    """The workload format of ``path`` when its first request loads as one (a workload handed to report or
    compare instead of results), else None."""
    from specgauge.errors import UserError
    from specgauge.workload.loaders import LoadOptions, file_kinds, load_workload

    try:
        if not load_workload([path], LoadOptions(limit=1)):
            return None
        return file_kinds([path], LoadOptions())[path]
    except (UserError, ValueError, OSError):
        return None


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}"


def _workload_requests(run: LoadedRun) -> None:
    """Fill prompts and temperatures from the workload that run.json names, when it still exists."""
    cfg = (run.run or {}).get("config") or {}
    run_dir = run.path if run.path.is_dir() else run.path.parent
    paths = [resolve_portable(str(p), run_dir) for p in cfg.get("workload") or []]
    if not paths:
        return
    missing = [p for p in paths if not p.exists()]
    if missing:
        run.notes.append(en("report.n.workload_missing", label=run.label, path=missing[0]))
        return
    from specgauge.workload.loaders import LoadOptions, load_workload

    try:
        items = load_workload(paths, LoadOptions(segment_by=cfg.get("segment_by"), skip_invalid=True))
    except UserError as e:
        run.notes.append(en("report.n.workload_bad", label=run.label, error=e))
        return
    by_id = {it.request.id: it.request for it in items}
    for r in run.records:
        req = by_id.get(r.id) or by_id.get(_CYCLE.sub("", r.id))
        if req is not None:
            run.prompts[r.id] = req.prompt_text()
            run.temperatures[r.id] = req.temperature


def _foreign(p: Path, name: str, pick: int | None = None) -> LoadedRun | None:
    """A result of another tool (vllm bench serve, AIPerf, GuideLLM) as a run, or None when it is not one."""
    from specgauge.bench import foreign as FR

    try:
        if p.is_dir():
            if not (p / "profile_export.jsonl").exists():
                return None
            p = p / "profile_export.jsonl"
        if p.suffix == ".jsonl":
            lines = FR.read_jsonl(p)
            if not lines or not FR.is_aiperf_record(lines[0][1]):
                return None
            got = FR.aiperf(lines, p)
        else:
            data = _read_json(p)
            if FR.is_vllm_bench(data):
                got = FR.vllm_bench(data, p)
            elif FR.is_guidellm(data):
                got = FR.guidellm(data, p, pick)
            else:
                return None
    except (FR.ForeignError, OSError, UnicodeDecodeError) as e:
        raise RunLoadError(str(e)) from None
    except ValidationError as e:
        raise RunLoadError(f"{p}: {_first_error(e)}") from None
    recs, summary, run_json, notes = got
    if not recs:
        raise RunLoadError(f"{p}: no request records")
    return LoadedRun(kind="results", path=p, label=name, records=recs, run=run_json, summary=summary or None,
                     notes=notes)


def load_run(path: str | Path, label: str | None = None) -> LoadedRun:
    p = Path(path)
    pick = None
    if not p.exists() and "#" in p.name and p.name.rsplit("#", 1)[1].isdigit():  # FILE#N: one benchmark of a report
        p, pick = p.with_name(p.name.rsplit("#", 1)[0]), int(p.name.rsplit("#", 1)[1])
    name = label or (p.name if p.name != "results.jsonl" else p.parent.name) + (f"#{pick}" if pick else "")
    foreign = _foreign(p, name, pick) if p.exists() and not (p.is_dir() and (p / "results.jsonl").exists()) else None
    if foreign is not None:
        return foreign
    if p.is_dir():
        if not (p / "results.jsonl").exists():
            raise RunLoadError(f"{p}: not a bench output directory (no results.jsonl)")
        run = LoadedRun(kind="bench", path=p, label=name, records=_records(p / "results.jsonl"))
        if (p / "run.json").exists():
            run.run = _read_json(p / "run.json")
        if (p / "summary.json").exists():
            run.summary = _read_json(p / "summary.json")
        _workload_requests(run)
        return run
    if not p.exists():
        raise RunLoadError(f"{p}: no such file or directory")
    if p.suffix == ".jsonl":
        run = LoadedRun(kind="results", path=p, label=name, records=_records(p))
        for side in ("run.json", "summary.json"):
            if (p.parent / side).exists():
                setattr(run, side.split(".")[0], _read_json(p.parent / side))
        _workload_requests(run)
        return run
    data = _read_json(p)
    if not isinstance(data, dict):
        raise RunLoadError(f"{p}: expected a JSON object from specgauge (compare, simulate or profile --json)")
    try:
        if data.get("kind") == "specgauge.compare":
            return LoadedRun(kind="compare", path=p, label=name, compare=ComparisonResult.model_validate(data))
        if {"methods", "ks", "overall"} <= data.keys():
            return LoadedRun(kind="simulate", path=p, label=name, simulate=SimulateResult.model_validate(data))
        if {"exact_tokens", "overall", "segments"} <= data.keys():
            return LoadedRun(kind="profile", path=p, label=name, profile=WorkloadProfile.model_validate(data))
    except ValidationError as e:
        raise RunLoadError(f"{p}: {_first_error(e)}") from None
    raise RunLoadError(f"{p}: not a specgauge result (expected a bench output dir, results.jsonl, a vllm bench serve / "
                       "GuideLLM JSON, an AIPerf profile_export.jsonl, "
                       "or the JSON of compare / simulate / profile)")


def spec_of(run: LoadedRun) -> dict[str, Any] | None:
    """The speculative config a bench run was told (``bench --speculative-config``) or its server stated."""
    stated = ((run.run or {}).get("config") or {}).get("speculative_config")
    if isinstance(stated, dict):
        return stated
    return speculative_config_of_server((run.run or {}).get("server") or {})


def _ttft_split(b: LoadedRun, c: LoadedRun, cost_profile: Path | None, alpha: float) -> TtftSplit:
    """The TTFT delta split by the servers' own histograms, with the step law's drafter prefill beside it."""
    diffs = [[s.counter_diff for s in r.sessions() if s.counter_diff] for r in (b, c)]
    split = split_ttft(b.records, c.records, diffs[0], diffs[1], alpha)
    if cost_profile is not None:
        from specgauge.predict.profile import StepCostProfile
        from specgauge.predict.ttft import basis, predicted_prefill_delta_s

        prof = StepCostProfile.load(cost_profile)
        spec = spec_of(c)
        prompts = [r.prompt_tokens for r in c.records if r.ok and r.prompt_tokens]
        split.predicted_prefill_delta_ms = 1000 * predicted_prefill_delta_s(prof, spec, prompts)
        split.predicted_basis = basis(cost_profile.name, spec)
    return split


class CompareRequest(BaseModel):
    """Everything ``specgauge compare`` needs: the CLI fills it from flags."""

    baseline: Path
    candidate: Path
    config: CompareConfig = Field(default_factory=CompareConfig)
    criteria: VerdictCriteria = Field(default_factory=VerdictCriteria)
    temperature: float | None = Field(default=None, ge=0)
    scorer: str | None = None
    #: a fitted step-cost law (``cost_profile.json``): predicts the drafter's share of the TTFT delta
    cost_profile: Path | None = None


def compare_paths(req: CompareRequest) -> ComparisonResult:
    """Load both runs, compare, check equivalence, judge."""
    b, c = load_run(req.baseline), load_run(req.candidate)
    if b.label == c.label:
        b.label, c.label = f"baseline:{b.label}", f"candidate:{c.label}"
    if b.kind == "simulate" and c.kind == "simulate":
        assert b.simulate is not None and c.simulate is not None
        return decide_simulations(compare_simulations(b.simulate, c.simulate), b.info(), c.info(), req.config, req.criteria)
    for r in (b, c):
        if r.kind not in ("bench", "results"):
            raise RunLoadError(f"{r.path}: a {r.kind} result cannot be compared; pass two bench runs (or two simulate results)")
    temps = {**c.temperatures, **b.temperatures}
    src = en("eq.src.run_json") if temps else ""
    scorer = (req.scorer, load_scorer(req.scorer)) if req.scorer else None
    res = decide(b.records, c.records, b.info(), c.info(), req.config, req.criteria,
                 temperatures=temps, temperature=req.temperature, temperature_source=src, scorer=scorer,
                 candidate_counters=c.counters()[0], held=(Held.of_sessions(b.sessions()), Held.of_sessions(c.sessions())))
    res.notes = b.notes + c.notes + res.notes
    res.memory = compare_memory(b.summary, c.summary)
    res.ttft = _ttft_split(b, c, req.cost_profile, req.criteria.alpha)
    res.diagnosis = diagnose(res.overall.equivalence if res.overall else None, c.summary, c.max_concurrency,
                             req.criteria.alpha)
    if res.diagnosis.failed:  # the verdict names the failed part
        ov = res.verdict.overall
        if "drafter" in res.diagnosis.failed and ov.verdict is Verdict.GO:
            # no GO while the server accepts less than its own outputs allow: its verification is wrong
            # (then its sampled outputs may be too; `specgauge audit` tests them), or bench was told
            # another --speculative-config than the server runs
            ov.verdict = Verdict.INCONCLUSIVE
            ov.reasons.insert(0, en("report.r.accepts_fewer"))
        ov.reasons.append(en("diagnosis.cause", text=res.diagnosis.cause))
        if res.diagnosis.collapse is not None:  # the server pays nothing or corrupts: never a GO (docs/field-failures.md)
            ov.verdict = Verdict.NO_GO
            ov.reasons.insert(0, en("verdict.collapse", text=res.diagnosis.collapse))
    else:
        res.notes.append(en("diagnosis.note", text=res.diagnosis.cause))
    return res
