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
    """The tokenizer the user named, else the shipped tiny model's (labelled so: it is not the user's
    model's tokenizer unless the workload names the shipped model)."""
    if spec is not None:
        return load_tokenizer(spec)
    tok = load_tokenizer(default_tokenizer_spec())
    if hasattr(tok, "origin"):
        tok.origin = "the shipped tiny model's tokenizer, used by default"
    return tok


def profile(
    paths: Sequence[str | Path], options: LoadOptions | None = None, tokenizer: str | None = None
) -> tuple[WorkloadProfile, LoadReport]:
    """Profile a workload: returns the figures and what loading skipped."""
    tok = resolve_tokenizer(tokenizer)
    report = LoadReport()
    prof = profile_workload(iter_workload(paths, options, report), tok)
    prof.skipped_invalid = report.skipped
    return prof, report
