"""The recommendation's data (also its JSON): choices per concurrency band and segment, flags."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from specgauge.recommend.curves import SpeedupCurves

KIND = "specgauge.recommendation"


class Option(BaseModel):
    """One candidate configuration at one concurrency, with its speedup and uncertainty.

    ``low``/``high``: the measured 95 % bootstrap CI (from a sweep) or the prediction band (from
    replay + calibration)."""

    label: str
    method: str | None
    k: int
    concurrency: int
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    source: Literal["measured", "predicted"] = "measured"
    speculative_config: dict[str, Any] | None = None
    pairs: int | None = None
    notes: list[str] = Field(default_factory=list)
    #: a prediction's terms the calibration did not identify (``CellPrediction.unidentified``): never chosen
    unidentified: list[str] = Field(default_factory=list)

    def text(self) -> str:
        if self.estimate is None:
            return f"{self.label} (no estimate)"
        band = "CI" if self.source == "measured" else "band"
        if self.low is None or self.high is None:
            return f"{self.label} {self.estimate:.2f}× (no {band})"
        return f"{self.label} {self.estimate:.2f}× [{self.low:.2f}, {self.high:.2f}]"


class BandChoice(BaseModel):
    """The best configuration at one measured concurrency, standing for a range of batch sizes."""

    concurrency: int
    batch_range: list[int]  #: [first, last] batch size (requests scheduled per step) this band stands for
    choice: str  #: a label, or "off"
    option: Option | None = None  #: None when the choice is "off"
    best: Option | None = None  #: the highest estimate, margin or not (shows why "off" was chosen)
    overlapping: list[str] = Field(default_factory=list)  #: labels whose interval overlaps the chosen one's group
    reason: str = ""


class SegmentChoice(BaseModel):
    segment: str
    bands: list[BandChoice]
    summary: str = ""


class Flags(BaseModel):
    """Ready-to-paste server flags for the recommended configuration."""

    vllm: str
    vllm_speculative_config: dict[str, Any] | None = None
    llamacpp: str | None = None
    llamacpp_notes: list[str] = Field(default_factory=list)
    sglang: str | None = None
    sglang_notes: list[str] = Field(default_factory=list)


class Recommendation(BaseModel):
    kind: Literal["specgauge.recommendation"] = KIND
    source: Literal["sweep", "prediction"]
    source_name: str  #: the sweep directory's or cost profile's name (never an absolute path)
    min_speedup: float
    verdict: Literal["speculate", "off"]
    headline: str
    method: str | None = None  #: the one method the server runs
    speculative_config: dict[str, Any] | None = None  #: the vLLM --speculative-config to serve with
    schedule: list[list[int]] | None = None
    #: first batch size of the trailing bands where nothing of the chosen method clears the margin: past its
    #: crossover speculation should be off, which the schedule's k = 0 there is not (vLLM #49548)
    off_from: int | None = None
    bands: list[BandChoice] = Field(default_factory=list)
    method_bands: list[BandChoice] = Field(default_factory=list)  #: the chosen method's k per band
    segments: list[SegmentChoice] = Field(default_factory=list)
    crossovers: list[str] = Field(default_factory=list)
    flags: Flags
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    #: predicted / measured speedup vs batch per configuration, for the report's plot (computed once, here)
    curves: SpeedupCurves | None = None
