"""Bench output directories as calibration runs: which server config and concurrency each measured.

A run is ``results.jsonl`` (its ``RequestRecord``s), ``run.json`` (its ``RunRecord``) and ``cell.json``
(``write_cell``: the speculative config and client concurrency it measured, which bench does not know).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgauge.config import resolve_spec
from specgauge.paths import portable_specs, resolve_specs
from specgauge.predict.types import CellSpec, ProfileError
from specgauge.records import RequestRecord, ResultsFile

CELL_FILE = "cell.json"


def write_cell(run_dir: Path, cell: CellSpec) -> Path:
    """Record beside a bench run which server config and concurrency it measured (read by ``fit_profile``)."""
    p = Path(run_dir) / CELL_FILE
    p.parent.mkdir(parents=True, exist_ok=True)
    data = portable_specs(cell.model_dump(mode="json"), run_dir)  # a draft model's directory: no machine path
    p.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return p


@dataclass
class RunData:
    name: str  #: the directory's name (no machine path)
    cell: CellSpec
    method: str | None
    k: int
    records: list[RequestRecord]
    run: dict[str, Any]
    max_batch: int | None = None


def _cell_from_run(run_dir: Path, run: dict[str, Any]) -> CellSpec:
    """A plain bench run's cell: its closed-loop concurrency and the speculative config bench was told
    (``--speculative-config``); a server that speculated without saying how is refused, saying what to add."""
    cfg = run.get("config") or {}
    conc = cfg.get("max_concurrency")
    if not conc:
        raise ProfileError(f"{run_dir}: no {CELL_FILE} and no max_concurrency in run.json; "
                           "a calibration run must be a closed-loop bench (--max-concurrency)")
    spec = cfg.get("speculative_config")
    if spec:
        method, k, _ = resolve_spec(spec)
        return CellSpec(label=f"{method}-k{k}", speculative_config=spec, concurrency=int(conc))
    inferred = (run.get("server") or {}).get("speculative_config_inferred")
    if inferred:
        raise ProfileError(
            f"{run_dir}: the server speculated (k={inferred.get('num_speculative_tokens')}) but the run does not say "
            "with which method: bench it again with --speculative-config '<the JSON the server runs with>', or put "
            f"a {CELL_FILE} beside results.jsonl: "
            '{"label": "ngram-k4", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}, '
            f'"concurrency": {int(conc)}}}')
    return CellSpec(label="off", speculative_config=None, concurrency=int(conc))


def load_run(run_dir: Path, cell: CellSpec | None = None) -> RunData:
    run_dir = Path(run_dir)
    if not (run_dir / "results.jsonl").is_file():
        raise ProfileError(f"{run_dir}: no results.jsonl (not a specgauge bench output directory)")
    try:
        records = ResultsFile(run_dir / "results.jsonl").existing()
    except ValueError as e:
        raise ProfileError(str(e)) from None
    run: dict[str, Any] = {}
    if (run_dir / "run.json").is_file():
        try:
            run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        except ValueError as e:
            raise ProfileError(f"{run_dir / 'run.json'}: not JSON ({e})") from None
    if cell is None:
        cp = run_dir / CELL_FILE
        if cp.is_file():
            try:
                cell = CellSpec.model_validate(resolve_specs(json.loads(cp.read_text(encoding="utf-8")), run_dir))
            except ValueError as e:
                raise ProfileError(f"{cp}: not a cell description ({str(e).splitlines()[0]})") from None
        else:
            cell = _cell_from_run(run_dir, run)
    method, k, _ = resolve_spec(cell.speculative_config)
    mb = (run.get("calibration") or {}).get("max_batch")
    # a sweep's "c4" (or a paired run's "c4-r1…") says nothing without its config's directory
    name = f"{run_dir.parent.name}/{run_dir.name}" if re.match(r"c\d+(-|$)", run_dir.name) else run_dir.name
    return RunData(name=name, cell=cell, method=method, k=k, records=records, run=run, max_batch=int(mb) if mb else None)
