"""specgauge's built-in sample workloads: five segments of realistic serving traffic in English and
Korean (see :mod:`specgauge.workload.samples.generate`).

``sample_path()`` is the shipped request file; ``sample_logged_path()`` the same requests with the
shipped target model's logged responses; ``generate_pairs`` yields requests with their reference
answers; ``corpus_texts`` renders training documents for the project's tiny models.
"""

from __future__ import annotations

import pathlib
from typing import Any


def sample_logged_path() -> pathlib.Path:
    """The shipped sample with logged responses of the shipped tiny target (token ids included),
    made by ``scripts/make_sample_logs.py``: what ``simulate`` and ``demo`` replay."""
    return pathlib.Path(__file__).with_name("sample_logged.jsonl")


__all__ = ["SEGMENTS", "STRUCTURED_SEGMENTS", "LANGS", "GENERATOR", "generate_pairs", "generate_structured_pairs",
           "sample_path", "structured_sample_path", "write_sample", "corpus_texts", "render_text"]


def __getattr__(name: str) -> Any:
    # Imported lazily so ``python -m specgauge.workload.samples.generate`` does not import the module
    # twice (runpy warns when the package has already imported the module it is asked to run).
    if name in __all__:
        from . import generate

        return getattr(generate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
