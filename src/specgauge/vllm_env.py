"""Locate the real-vLLM virtual environment made by ``scripts/install_vllm_cpu.sh``.

vLLM pins many versions of its own, so it lives in a venv of its own, cached outside the repository;
tests that compare specgauge with real vLLM code run a probe script with that venv's Python. This
module only finds the venv; it never installs anything.
"""

from __future__ import annotations

import os
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
#: written last by the install script: its presence means the install completed
MARKER_NAME = ".specgauge-install-complete"
ENV_VENV = "SPECGAUGE_VLLM_VENV"
ENV_CACHE = "SPECGAUGE_CACHE"
INSTALL_HINT = "run scripts/install_vllm_cpu.sh (or set SPECGAUGE_VLLM_VENV to an existing vLLM venv)"


def cache_root() -> Path:
    """``$SPECGAUGE_CACHE`` or ``~/.cache/specgauge``."""
    root = os.environ.get(ENV_CACHE)
    return Path(root) if root else Path.home() / ".cache" / "specgauge"


def default_venv_path(version: str = VLLM_CPU_VERSION) -> Path:
    """Where the install script puts the venv for ``version``."""
    return cache_root() / f"vllm-cpu-{version}"


def vllm_venv() -> Path | None:
    """The vLLM venv, or ``None`` when there is none.

    ``$SPECGAUGE_VLLM_VENV`` wins when set (it must hold ``bin/python``); otherwise the cached venv
    counts only when the install script's completion marker is present.
    """
    override = os.environ.get(ENV_VENV)
    if override:
        path = Path(override)
        return path if (path / "bin" / "python").exists() else None
    path = default_venv_path()
    return path if (path / MARKER_NAME).exists() and (path / "bin" / "python").exists() else None


def vllm_python() -> Path | None:
    """The venv's interpreter, or ``None`` when no venv is found."""
    venv = vllm_venv()
    return None if venv is None else venv / "bin" / "python"


def missing_reason() -> str:
    """A one-line reason for skipping a test that needs the venv."""
    override = os.environ.get(ENV_VENV)
    if override:
        return f"{ENV_VENV}={override} has no bin/python; {INSTALL_HINT}"
    return f"no completed vLLM venv at {default_venv_path()}; {INSTALL_HINT}"
