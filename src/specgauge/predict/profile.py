"""The fitted step-cost law (``StepCostProfile``): parameters, provenance, residuals; save / load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from specgauge.config import format_validation_error
from specgauge.predict.types import ProfileError


class StepCostProfile(BaseModel):
    """Step time law T_step (seconds) of one server; see ``specgauge.predict.law``."""

    kind: str = "specgauge.step_cost_profile"
    version: int = 1
    params: dict[str, float] = Field(default_factory=dict)
    shape: str = "flattened"  #: "flattened" (B + drafted tokens per forward) or "padded" (B·(1+max proposal))
    provenance: dict[str, Any] = Field(default_factory=dict)
    residuals: dict[str, Any] = Field(default_factory=dict)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        return p

    @classmethod
    def load(cls, path: str | Path) -> StepCostProfile:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ProfileError(f"cost profile {path}: cannot read JSON: {e}") from None
        if not isinstance(data, dict) or data.get("kind") != "specgauge.step_cost_profile":
            raise ProfileError(f"cost profile {path}: not a fitted step-cost profile (made by `specgauge calibrate`)")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ProfileError(f"cost profile {path}: {format_validation_error(e)}") from None
