"""Paths as stored in results (run.json and the like): never an absolute machine path.

``portable_path`` writes a file as ``specgauge:samples/NAME`` when it is a built-in sample, else
relative to the directory the result is written to; ``resolve_portable`` reads it back (and still
reads the absolute or working-directory-relative paths older results hold).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

BUILTIN_PREFIX = "specgauge:samples/"


def _samples_dir() -> Path:
    from specgauge.workload.samples import sample_logged_path

    return sample_logged_path().resolve().parent


def portable_path(path: str | Path, base_dir: str | Path) -> str:
    """``path`` as stored beside results written to ``base_dir``."""
    p = Path(path).resolve()
    if p.parent == _samples_dir():
        return BUILTIN_PREFIX + p.name
    try:
        return Path(os.path.relpath(p, Path(base_dir).resolve())).as_posix()
    except ValueError:  # another drive (Windows): the name is all that can be kept
        return p.name


def resolve_portable(stored: str, base_dir: str | Path) -> Path:
    """The file a stored path names, for results that live in ``base_dir``."""
    if stored.startswith(BUILTIN_PREFIX):
        return _samples_dir() / stored[len(BUILTIN_PREFIX):]
    p = Path(stored)
    if p.is_absolute() or not (Path(base_dir) / p).exists():
        return p  # older results: absolute, or relative to the working directory
    return Path(base_dir) / p


def public_url(url: str) -> str:
    """A server URL as results, logs and messages may carry it: no ``user:password@`` and no query
    or fragment (``?api_key=…`` style tokens); scheme, host, port and path kept."""
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    host = p.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if p.port:
        host = f"{host}:{p.port}"
    return urlunsplit((p.scheme, host, p.path, "", ""))


_MODEL_KEYS = ("model", "draft_model")


def _map_specs(data: object, fn: Callable[[dict], dict]) -> object:
    """Apply ``fn`` to every ``speculative_config`` dict nested anywhere in JSON-like ``data``."""
    if isinstance(data, dict):
        return {k: (fn(v) if k == "speculative_config" and isinstance(v, dict) else _map_specs(v, fn)) for k, v in data.items()}
    if isinstance(data, list):
        return [_map_specs(v, fn) for v in data]
    return data


def portable_specs(data: object, base_dir: str | Path) -> object:
    """Every ``speculative_config``'s model directory (a draft model) written as ``portable_path``
    does, so a stored sweep or cell names no machine path; ``resolve_specs`` reads it back."""

    def fn(spec: dict) -> dict:
        out = dict(spec)
        for k in _MODEL_KEYS:
            v = out.get(k)
            if isinstance(v, str) and Path(v).is_absolute() and Path(v).exists():
                out[k] = portable_path(v, base_dir)
        return out

    return _map_specs(data, fn)


def resolve_specs(data: object, base_dir: str | Path) -> object:
    """The inverse of ``portable_specs`` for results stored in ``base_dir``."""

    def fn(spec: dict) -> dict:
        out = dict(spec)
        for k in _MODEL_KEYS:
            v = out.get(k)
            if isinstance(v, str) and not Path(v).is_absolute():
                p = resolve_portable(v, base_dir)
                if p.exists():
                    out[k] = str(p.resolve())
        return out

    return _map_specs(data, fn)
