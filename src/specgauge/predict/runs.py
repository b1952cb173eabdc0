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
            conc = (run.get("config") or {}).get("max_concurrency")
            if not conc:
                raise ProfileError(f"{run_dir}: no {CELL_FILE} and no max_concurrency in run.json; "
                                   "a calibration run must be a closed-loop bench (--max-concurrency)")
            inferred = (run.get("server") or {}).get("speculative_config_inferred")
            if inferred:
                raise ProfileError(f"{run_dir}: the server speculated (k={inferred.get('num_speculative_tokens')}) but "
                                   f"no {CELL_FILE} says with which method; write one (specgauge.predict.write_cell)")
            cell = CellSpec(label="off", speculative_config=None, concurrency=int(conc))
    method, k, _ = resolve_spec(cell.speculative_config)
    mb = (run.get("calibration") or {}).get("max_batch")
    # a sweep's "c4" (or a paired run's "c4-r1…") says nothing without its config's directory
    name = f"{run_dir.parent.name}/{run_dir.name}" if re.match(r"c\d+(-|$)", run_dir.name) else run_dir.name
    return RunData(name=name, cell=cell, method=method, k=k, records=records, run=run, max_batch=int(mb) if mb else None)
