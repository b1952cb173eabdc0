"""Library entry points: one function per CLI command, taking typed configs, returning data."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload
from specgauge.workload.profile import WorkloadProfile, profile_workload
from specgauge.workload.tokenizer import Tokenizer, load_tokenizer


def default_tokenizer_spec() -> str | None:
    """The shipped tiny target's tokenizer when the package carries it (the sample workload was made
    for it), else None (the labelled approximation)."""
    try:
        from specgauge.models import target_dir
    except ImportError:
        return None
    d = target_dir()
    return str(d) if (Path(d) / "tokenizer.json").is_file() else None


def resolve_tokenizer(spec: str | None) -> Tokenizer:
    return load_tokenizer(spec if spec is not None else default_tokenizer_spec())


def profile(
    paths: Sequence[str | Path], options: LoadOptions | None = None, tokenizer: str | None = None
) -> tuple[WorkloadProfile, LoadReport]:
    """Profile a workload: returns the figures and what loading skipped."""
    tok = resolve_tokenizer(tokenizer)
    report = LoadReport()
    prof = profile_workload(iter_workload(paths, options, report), tok)
    prof.skipped_invalid = report.skipped
    return prof, report
