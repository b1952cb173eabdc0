"""The fitted step-cost law of one server (``StepCostProfile``): parameters, the verification shape the
fit chose, bootstrap resamples for the uncertainty band, residuals, the measured range and where and
how it was measured. ``save`` / ``load`` (a JSON file, ``cost_profile.json``); a file that is not one
is refused with a message naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from specgauge.config import format_validation_error
from specgauge.predict.law import REQUIRED, SHAPES, param_vector
from specgauge.predict.types import ProfileError

KIND = "specgauge.step_cost_profile"


class HostBound(BaseModel):
    """A host proposer that never set a calibrated step of its method (law: ``host_par``)."""

    per_request: float  #: the largest cost per request per step (s) that every calibrated step could have hidden
    max_batch: float  #: the largest decode batch among those steps: past it the proposer could set the step


class MeasuredRange(BaseModel):
    """What the calibration runs covered; predictions outside it are extrapolations."""

    max_tokens_per_forward: float = 0.0  #: largest tokens through one decode forward (chosen shape)
    max_forward_tokens: float = 0.0  #: largest tokens through one forward, prefill tokens included (0: not recorded)
    max_batch: float = 0.0  #: largest decode batch seen in a step
    concurrencies: list[int] = Field(default_factory=list)
    methods: dict[str, list[int]] = Field(default_factory=dict)  #: method -> calibrated k values
    #: model-free method whose overlapping host proposer the fit did not find -> what the data allow it to be
    #: (``predict`` widens bands with it past the batch the method was calibrated at)
    hidden_host_bound: dict[str, HostBound] = Field(default_factory=dict)


class StepCostProfile(BaseModel):
    """Step time law T_step (seconds) of one server; see ``specgauge.predict.law``."""

    kind: str = KIND
    version: int = 1
    #: fitted parameters in seconds: the law's (``a``, ``r``, ``b``, …, ``host[ngram]``, …) and ``ell``,
    #: the HTTP round trip added to TTFT and between a finished request and the next
    params: dict[str, float] = Field(default_factory=dict)
    shape: str = "flattened"  #: "flattened" (B + drafted tokens per forward) or "padded" (B·(1+max proposal))
    #: the other shape's fit, for the record (and to widen bands when extrapolating)
    alternatives: dict[str, dict[str, Any]] = Field(default_factory=dict)
    param_names: list[str] = Field(default_factory=list)  #: order of ``bootstrap`` columns
    bootstrap: list[list[float]] = Field(default_factory=list)  #: refits on resampled requests
    residuals: dict[str, Any] = Field(default_factory=dict)
    measured: MeasuredRange = Field(default_factory=MeasuredRange)
    replay_checks: dict[str, dict[str, Any]] = Field(default_factory=dict)  #: run -> replayed vs live acceptance
    provenance: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | Path) -> StepCostProfile:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ProfileError(f"cost profile {path}: cannot read JSON: {e}") from None
        if not isinstance(data, dict) or data.get("kind") != KIND:
            raise ProfileError(f"cost profile {path}: not a fitted step-cost profile (one is written by `specgauge calibrate`)")
        try:
            prof = cls.model_validate(data)
        except ValidationError as e:
            raise ProfileError(f"cost profile {path}: {format_validation_error(e)}") from None
        if prof.shape not in SHAPES:
            raise ProfileError(f"cost profile {path}: shape {prof.shape!r} is not one of {', '.join(SHAPES)}")
        missing = [n for n in REQUIRED if n not in prof.params]
        if missing:
            raise ProfileError(f"cost profile {path}: parameters {', '.join(missing)} are missing")
        bad = [n for n, v in prof.params.items() if not np.isfinite(v) or v < 0]
        if bad:
            raise ProfileError(f"cost profile {path}: parameters {', '.join(bad)} must be finite and >= 0")
        if prof.bootstrap and any(len(b) != len(prof.param_names) for b in prof.bootstrap):
            raise ProfileError(f"cost profile {path}: bootstrap rows do not match param_names")
        return prof

    @staticmethod
    def is_profile_file(path: str | Path) -> bool:
        """True when ``path`` holds a fitted profile (not an old ``--cost-profile`` ratio file)."""
        try:
            return json.loads(Path(path).read_text(encoding="utf-8")).get("kind") == KIND
        except (OSError, ValueError, AttributeError):
            return False

    def samples(self, names: list[str]) -> np.ndarray:
        """(len(names), M) parameter samples: the bootstrap refits, or the point estimate alone."""
        if not self.bootstrap:
            return param_vector(self.params, names)[:, None]
        idx = {n: i for i, n in enumerate(self.param_names)}
        boot = np.asarray(self.bootstrap, dtype=float)
        cols = [boot[:, idx[n]] if n in idx else np.full(len(boot), self.params.get(n, 0.0)) for n in names]
        return np.stack(cols, axis=0)

    def describe(self) -> list[tuple[str, float, float | None, float | None]]:
        """(name, value, 2.5 %, 97.5 %) for every parameter, in seconds."""
        names = list(self.params)
        s = self.samples(names) if self.bootstrap else None
        out = []
        for i, n in enumerate(names):
            lo = hi = None
            if s is not None:
                lo, hi = (float(x) for x in np.percentile(s[i], [2.5, 97.5]))
            out.append((n, self.params[n], lo, hi))
        return out
