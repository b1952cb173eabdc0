"""Library entry points: one function per CLI command, taking typed configs, returning data."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload
from specgauge.workload.profile import WorkloadProfile, profile_workload
from specgauge.workload.tokenizer import default_tokenizer_spec, resolve_tokenizer  # noqa: F401  (re-exported)


def profile(
    paths: Sequence[str | Path], options: LoadOptions | None = None, tokenizer: str | None = None
) -> tuple[WorkloadProfile, LoadReport]:
    """Profile a workload: returns the figures and what loading skipped."""
    tok = resolve_tokenizer(tokenizer)
    report = LoadReport()
    prof = profile_workload(iter_workload(paths, options, report), tok)
    prof.skipped_invalid = report.skipped
    return prof, report
