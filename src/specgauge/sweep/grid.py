"""The sweep's grid: server configurations (speculative configs, "off" first) × concurrencies.

A configuration is vLLM's ``--speculative-config`` JSON as the user wrote it (kept verbatim, so the
recommended flags paste back exactly what was measured), or ``None`` for no speculation ("off").
Labels name the cell directories: ``off``, ``ngram-k4``, ``suffix-k8``, ``draft_model-k2`` (a second
config with the same label gets ``-2``), or the user's own (``--config 'wide={...}'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from specgauge.config import ConfigError, SpeculativeConfig, format_validation_error
from specgauge.predict.types import CellSpec

BASELINE = "off"
#: the grid shorthand's n-gram lookup window (the demo's; vLLM's default 5..5 drafts nothing on short repeats)
NGRAM_DEFAULTS: dict[str, int] = {"prompt_lookup_min": 2, "prompt_lookup_max": 5}
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


class ServerConfig(BaseModel):
    """One server configuration of the grid."""

    label: str
    speculative_config: dict[str, Any] | None = None

    @property
    def is_baseline(self) -> bool:
        return self.speculative_config is None


def method_and_k(spec: dict[str, Any] | None) -> tuple[str | None, int]:
    """(method, num_speculative_tokens) of a config; (None, 0) for no speculation."""
    if spec is None:
        return None, 0
    sc = SpeculativeConfig.model_validate(spec)
    return sc.method or "draft_model", int(sc.num_speculative_tokens or 0)


def config_label(spec: dict[str, Any] | None) -> str:
    """``off``, ``ngram-k4``, ``draft_model-k2``; ``-sched`` marks a per-batch-size schedule, ``-synL2.5``
    (mean acceptance length) or ``-syn`` (per-position rates) a synthetic acceptance rule."""
    if spec is None:
        return BASELINE
    method, k = method_and_k(spec)
    if method == "eagle3" and spec.get("parallel_drafting"):
        method = "peagle"  # P-EAGLE: vLLM runs it as eagle3 with parallel drafting
    label = f"{method}-k{k}" if k else str(method)
    if spec.get("num_speculative_tokens_per_batch_size"):
        label += "-sched"
    if spec.get("rejection_sample_method") == "synthetic":
        length = spec.get("synthetic_acceptance_length")
        label += f"-synL{float(length):g}" if length is not None else "-syn"
    return label


def dir_name(label: str) -> str:
    """A file-system-safe directory name for a label."""
    return _UNSAFE.sub("_", label).strip("._") or "config"


def _validate_spec(data: Any, flag: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{flag}: expected a JSON object like {{\"method\":\"ngram\",\"num_speculative_tokens\":4}}")
    try:
        SpeculativeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{flag}: {format_validation_error(e)}") from None
    return data


def parse_config(text: str) -> ServerConfig:
    """``off`` | ``JSON`` | ``LABEL=JSON`` | ``LABEL=off`` (one ``--config`` value)."""
    raw = text.strip()
    label: str | None = None
    body = raw
    if not raw.startswith("{") and "=" in raw:
        label, _, body = raw.partition("=")
        label, body = label.strip(), body.strip()
        if not _LABEL_RE.match(label):
            raise ConfigError(f"--config {text!r}: label {label!r} must be letters, digits and ._:+- (at most 64)")
    if body.lower() in (BASELINE, "none", "null", ""):
        return ServerConfig(label=label or BASELINE, speculative_config=None)
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config {text!r}: not JSON ({e.msg} at column {e.colno}); "
                          "write off, a JSON object, or LABEL=JSON") from None
    spec = _validate_spec(data, f"--config {text!r}")
    return ServerConfig(label=label or config_label(spec), speculative_config=spec)


def grid_method(text: str, k: int) -> dict[str, Any]:
    """One ``--method`` entry of the grid shorthand at proposal length ``k``.

    ``ngram`` | ``suffix`` | ``draft_model:DIR`` (also ``draft:DIR``) | ``METHOD:DIR`` (eagle, eagle3, mtp,
    dflash, dspark, …; ``peagle:DIR`` is vLLM's eagle3 with ``parallel_drafting``) | ``METHOD`` (any other
    model-free vLLM method)."""
    name, _, arg = text.strip().partition(":")
    name = {"draft": "draft_model", "prompt_lookup": "ngram"}.get(name, name)
    if not name:
        raise ConfigError(f"--method {text!r}: empty method name")
    if name == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, **NGRAM_DEFAULTS}
    if name == "draft_model":
        if not arg:
            raise ConfigError(f"--method {text!r}: a draft model needs its directory: draft_model:DIR")
        return {"model": arg, "num_speculative_tokens": k}
    if name == "mtp" and arg:
        _check_mtp_k(text, arg, k)
    if name == "peagle":
        if not arg:
            raise ConfigError(f"--method {text!r}: a P-EAGLE head needs its directory: peagle:DIR")
        return {"method": "eagle3", "model": arg, "num_speculative_tokens": k, "parallel_drafting": True}
    if arg:
        return {"method": name, "model": arg, "num_speculative_tokens": k}
    return {"method": name, "num_speculative_tokens": k}


def _check_mtp_k(text: str, model: str, k: int) -> None:
    """vLLM 0.32 (``SpeculativeConfig``) refuses a k above the target's MTP layer count that is not a
    multiple of it; say so here, before a server or a recommendation is built on it."""
    try:
        cfg = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(cfg, dict):
        return
    n = int(cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0)
    if n > 1 and k > n and k % n:
        raise ConfigError(f"--method {text} --k {k}: vLLM needs num_speculative_tokens <= the target's "
                          f"{n} MTP layers or a multiple of {n}")


def expand_grid(methods: Sequence[str], ks: Sequence[int]) -> list[ServerConfig]:
    """``--method ngram,suffix --k 2,4`` -> ngram-k2, ngram-k4, suffix-k2, suffix-k4 (method-major)."""
    if methods and not ks:
        raise ConfigError("--method needs --k (proposal lengths, e.g. --k 2,4,8)")
    if ks and not methods:
        raise ConfigError("--k needs --method (e.g. --method ngram,suffix)")
    out = []
    for m in methods:
        for k in ks:
            spec = _validate_spec(grid_method(m, k), f"--method {m} --k {k}")
            out.append(ServerConfig(label=config_label(spec), speculative_config=spec))
    return out


def build_configs(configs: Iterable[ServerConfig]) -> list[ServerConfig]:
    """The grid's configs: "off" first (added when absent), duplicates of one config dropped,
    a label used by two different configs made unique (``ngram-k4``, ``ngram-k4-2``)."""
    out: list[ServerConfig] = []
    seen_spec: dict[str, str] = {}
    used: set[str] = set()
    items = list(configs)
    if not any(c.is_baseline for c in items):
        items.insert(0, ServerConfig(label=BASELINE))
    items.sort(key=lambda c: not c.is_baseline)  # stable: baseline first, others in the given order
    baselines = [c for c in items if c.is_baseline]
    if len(baselines) > 1 and len({c.label for c in baselines}) > 1:
        raise ConfigError(f"--config: more than one configuration without speculation ({', '.join(c.label for c in baselines)}); keep one")
    for c in items:
        key = json.dumps(c.speculative_config, sort_keys=True)
        if key in seen_spec:
            continue
        label = c.label
        n = 2
        while label in used or dir_name(label) in {dir_name(u) for u in used}:
            label = f"{c.label}-{n}"
            n += 1
        used.add(label)
        seen_spec[key] = label
        out.append(ServerConfig(label=label, speculative_config=c.speculative_config))
    return out


def cells_for(configs: Sequence[ServerConfig], concurrencies: Sequence[int]) -> list[CellSpec]:
    """Every config × every concurrency, configs in order, concurrencies ascending."""
    if not concurrencies:
        raise ConfigError("--concurrency: give at least one value, e.g. 1,2,4,8")
    cs = sorted(set(concurrencies))
    return [CellSpec(label=c.label, speculative_config=c.speculative_config, concurrency=n) for c in configs for n in cs]



_LABEL_SPEC = re.compile(r"^(?P<method>[A-Za-z_][A-Za-z0-9_]*)-k(?P<k>\d+)$")


def config_from_label(label: str) -> ServerConfig:
    """A running server's config from its ``--url`` name: ``off``, or ``METHOD-kK`` for a model-free
    method (``ngram-k4``, ``suffix-k8``); anything else needs a ``--config 'NAME={...}'``."""
    if label == BASELINE:
        return ServerConfig(label=label)
    m = _LABEL_SPEC.match(label)
    if not m or m.group("method") not in ("ngram", "suffix"):
        raise ConfigError(f"--url {label}=…: say what that server runs with --config '{label}={{...}}' "
                          "(names off, ngram-kK and suffix-kK need none)")
    spec = _validate_spec(grid_method(m.group("method"), int(m.group("k"))), f"--url {label}")
    return ServerConfig(label=label, speculative_config=spec)
